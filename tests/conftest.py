"""Fixtures that test modules in several folders share.

``base_url``: a real reference-engine server on 127.0.0.1, one per test module, serving the
module's ``SERVER_CONFIG``. ``fake_calibration``: a fixed CPU calibration in the test's tmp_path,
where `bench calibrate`'s file is looked for.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.config import EngineConfig
from results.history.target import ENV_VAR as HISTORY_VAR
from tests.support.calibration import use_fake_calibration

# A pytest-xdist worker (`pytest -n 2`, as .ci/run runs) gets its controller's terminal size as
# COLUMNS and LINES, which bench's console honours (bench.run.terminal.terminal_console): its
# output would wrap at 80 columns where the tests read piped output's width, as they do in one
# process. Before any test imports the CLI, whose console is made at import.
if "PYTEST_XDIST_WORKER" in os.environ:
    os.environ.pop("COLUMNS", None)
    os.environ.pop("LINES", None)


# A test's runs add themselves to no run history unless it asks for one (--history, or the
# variable set by the test itself): the runs folders the tests look into hold only runs. Set
# before any test runs bench, so that the commands it starts inherit it.
os.environ[HISTORY_VAR] = "off"


@pytest.fixture(scope="module")
def base_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """The base URL (``http://127.0.0.1:PORT``) of a server of the module's ``SERVER_CONFIG``.

    The server starts before the module's first test that asks for it and stops after its last.
    """
    config = getattr(request.module, "SERVER_CONFIG", None)
    if not isinstance(config, EngineConfig):
        pytest.fail(
            f"{request.module.__name__}: the base_url fixture serves the module's SERVER_CONFIG; "
            "set SERVER_CONFIG = EngineConfig(...) at the module's top level"
        )
    # Imported here, not above: it loads torch, which the tests of the torch-free packages
    # (perfmodel, results, loadgen, dashboards) must not need.
    from tests.support.server_fixture import running_server

    with running_server(config) as url:
        yield url


@pytest.fixture
def fake_calibration(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The path of a fixed CPU calibration that `bench calibrate`'s readers find for this test."""
    return use_fake_calibration(tmp_path, monkeypatch)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``gpu`` (`pytest -m gpu` on a GPU runner) skip, saying why, where torch
    sees no CUDA device."""
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu_items:
        return
    # Imported here, not above: torch, which most test folders must not need, only when a
    # collected test asks for a GPU.
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(
        reason=f"needs an NVIDIA GPU: torch.cuda.is_available() is False (torch "
        f"{torch.__version__})"
    )
    for item in gpu_items:
        item.add_marker(skip)
