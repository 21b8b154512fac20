"""`bench run --nsys` stops the profiled engine so that nsys can write its report: the front
alone is signalled, it closes its engine core, and nsys (never signalled) exits after them.

nsys here is tests/support/fake_nsys.py: it records the signals it gets and, once its program
exits, writes a report saying which processes of the group were still alive."""

from __future__ import annotations

import io
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from rich.console import Console

from bench.run.orchestrate import RunOptions, run_benchmark
from bench.scenario.scenario import load_scenario
from engine_adapters import launcher
from engine_adapters.launcher import LaunchedEngine
from tests.support.fake_nsys import install_fake_nsys, read_fake_report

SCENARIO = """
name = "profiled"
users = 2
num_requests = 4
ignore_eos = true
seed = 3

[input_len]
kind = "uniform"
low = 8
high = 16

[output_len]
kind = "uniform"
low = 4
high = 8

[engine]
device = "cpu"
dtype = "float32"
"""


@pytest.mark.slow
def test_the_report_lands_in_the_run_folder_after_the_core_exits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_fake_nsys(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{Path(sys.executable).parent}:/usr/bin:/bin")
    scenario = tmp_path / "profiled.toml"
    scenario.write_text(SCENARIO)
    out = io.StringIO()
    options = RunOptions(load_scenario(scenario), None, "reference", None, "tiny",
                         tmp_path / "runs", live=False, nsys=True, probes=False,
                         calibrate=False)  # fmt: skip
    folder, _ = run_benchmark(options, Console(file=out, width=200))
    report = folder / "engine.nsys-rep"
    assert report.is_file(), out.getvalue()
    got = read_fake_report(report)
    # nsys itself was never signalled: it saw its program end and wrote the report.
    assert got["signals"] == []
    # bench serve shut down on its SIGTERM (uvicorn raises the signal again once it has shut
    # down) and had closed its engine core before it exited: the core, which does the CUDA
    # work, ended its own loop rather than dying of a signal with its trace unflushed.
    assert got["program_exit"] in (0, -signal.SIGTERM)
    assert not [cmd for cmd in got["left_at_exit"] if "multiprocessing.spawn" in cmd]
    assert got["left_in_group"] == []


def test_a_wrapped_program_that_ignores_sigterm_is_killed_with_its_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A wrapper and its program that both ignore SIGTERM: after the bounded wait for the
    # program, the group gets SIGTERM, then SIGKILL after GROUP_STOP_S, and stop() returns.
    monkeypatch.setattr(launcher, "GROUP_STOP_S", 0.5)
    program = [sys.executable, "-c", "import time; time.sleep(120)"]
    wrapper = ["sh", "-c", 'trap "" TERM; "$@"; echo done', "sh", *program]
    process = subprocess.Popen(wrapper, start_new_session=True)
    engine = LaunchedEngine(wrapper, "http://127.0.0.1:9", process, tmp_path / "log",
                            wrapped_command=program)  # fmt: skip
    deadline = time.monotonic() + 30
    while not any(p.cmdline() == program for p in psutil.Process(process.pid).children()):
        assert time.monotonic() < deadline, "the wrapped program did not start"
        time.sleep(0.05)
    child = psutil.Process(process.pid).children()[0]
    code = engine.stop(timeout_s=0.5)
    assert code == -9  # the wrapper outlived both waits: SIGKILL
    # The group's SIGKILL reached the program too; the kernel may take a moment to end it.
    deadline = time.monotonic() + 10

    def ended() -> bool:
        try:
            return not child.is_running() or child.status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    while not ended():
        assert time.monotonic() < deadline, "the wrapped program outlived its group's SIGKILL"
        time.sleep(0.05)
