"""Fixtures of the conformance kit: ``rig`` runs a module's cases once per driver (one
daemon in this process per driver and module); ``restartable`` does the same with the
daemon as a subprocess the cases may kill."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conformance.drivers import driver_names, load
from tests.conformance.model import KitModel
from tests.conformance.rig import InProcess, Subprocess
from tests.fakes.scripted_openai import ScriptedOpenAIThread


@pytest.fixture(scope="module", params=driver_names())
def rig(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcess]:
    driver = load(request.param)
    model = KitModel()
    with ScriptedOpenAIThread(default=model) as provider:
        driver.start()
        try:
            with InProcess(driver, model).running(tmp_path_factory.mktemp(driver.name), provider) as rig:
                yield rig
        finally:
            driver.stop()


@pytest.fixture(scope="module", params=driver_names())
def restartable(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Subprocess]:
    driver = load(request.param)
    model = KitModel()
    with ScriptedOpenAIThread(default=model) as provider:
        driver.start()
        rig = Subprocess(driver, model, tmp_path_factory.mktemp(driver.name), provider.base_url)
        try:
            rig.start()
            yield rig
        finally:
            rig.close()
            driver.stop()
