"""Package faces that import their heavy parts on first use (PEP 562), as
``netclaw.sessions`` does: ``import adapters`` (which registers every channel's config
section) must stay light, since every ``netclaw`` command loads the configuration."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_names(package: str, names: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` giving each name in ``names`` from its submodule of
    ``package`` (``{"SlackAdapter": "_adapter"}``), imported when first asked for."""

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{module}"), name)

    return __getattr__
