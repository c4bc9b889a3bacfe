"""The registry of channel drivers: every module here (not starting with ``_``) that
exports ``DRIVER``, a :class:`~tests.conformance.driver.ChannelDriver` class. Adding a
channel to the kit is adding its module; every case then runs on it (``[<module>]`` in
the test ids)."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

from tests.conformance.driver import ChannelDriver


def driver_names() -> list[str]:
    """The drivers' module names, sorted."""
    return sorted(
        m.name for m in pkgutil.iter_modules([str(Path(__file__).parent)]) if not m.name.startswith("_")
    )


def load(name: str) -> ChannelDriver:
    """A new driver from module ``name``."""
    module = importlib.import_module(f"{__name__}.{name}")
    driver_class = getattr(module, "DRIVER", None)
    if driver_class is None:
        raise TypeError(f"tests/conformance/drivers/{name}.py exports no DRIVER (its driver class)")
    driver: ChannelDriver = driver_class()
    return driver
