"""`bench run` with a Locust master on 127.0.0.1 and `bench worker` processes joining it, each a
separate process started as a remote host starts it (`python -m bench worker --master
HOST:PORT`), their output read line by line as it comes."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from engine_adapters.launcher import free_port


class Process:
    """A child process whose merged output is read line by line as it comes."""

    def __init__(self, argv: list[str]) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def wait_for(self, text: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while text not in self.output:
            if time.monotonic() > deadline or self.proc.poll() is not None:
                time.sleep(0.2)  # the reader may still hold the last lines
                assert text in self.output, f"no {text!r} within {timeout_s} s:\n{self.output}"
                return
            time.sleep(0.05)

    def finish(self, timeout_s: float) -> int:
        rc = self.proc.wait(timeout=timeout_s)
        self._reader.join(timeout=5)
        return rc


@contextmanager
def remote_run(
    tmp_path: Path, url: str, scenario_text: str, workers: int, *extra: str
) -> Iterator[tuple[Process, list[Process]]]:
    """`bench run` of ``scenario_text`` with a master on a free port of 127.0.0.1, and
    ``workers`` `bench worker`s joining it."""
    scenario = tmp_path / "remote.toml"
    scenario.write_text(scenario_text)
    address = f"127.0.0.1:{free_port()}"
    bench = [sys.executable, "-m", "bench"]
    run = Process([
        *bench, "run", "--scenario", str(scenario), "--url", url, "--tokenizer", "tiny",
        "--driver", "locust", "--expect-workers", str(workers), "--master-bind", address,
        "--no-live", "--no-probes", "--runs-dir", str(tmp_path / "runs"), *extra,
    ])  # fmt: skip
    started: list[Process] = []
    try:
        # The command printed is the one each worker host runs.
        run.wait_for(f"bench worker --master {address}", timeout_s=45)
        started = [Process([*bench, "worker", "--master", address]) for _ in range(workers)]
        yield run, started
    finally:
        for p in [run, *started]:
            if p.proc.poll() is None:
                p.proc.kill()
                p.proc.wait(timeout=10)


def run_folder(tmp_path: Path) -> Path:
    (folder,) = (tmp_path / "runs").iterdir()
    return folder
