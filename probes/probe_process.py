"""The probes in a child process of their own (``python -m probes.probe_process``).

Why a process: a sampler parsing a large /metrics page (vLLM's is ~50 kB, about 10 ms of pure
Python) would hold the interpreter lock that the load generator's event loop needs to stamp
chunks; in a process of its own it cannot delay a timestamp, and the probes' whole cost shows up
as that process's CPU time, which is reported.

Protocol over the child's stdin/stdout, one JSON object a line: the parent writes the ProbeSpec,
the headers of the engine's /metrics (``--api-key``/``--header``: through the pipe, never a
file, the environment or argv), the path of a result file and, for a run that streams its
samples, the parts folder and flush interval (the child then writes the readings there as it
takes them, probes.sample_stream, and holds none); the child answers
{"event": "started", "reasons": [...]} once its samplers run; any line on stdin stops it; it
writes the ProbeResult as JSON to the result file and answers {"event": "stopped"}. End of input
(the parent died, killed) stops it too: it writes its last part, removes the result file nobody
will read, and exits. It runs in a session of its own and ignores SIGINT: an
interrupted `bench run` stops it through this protocol, after the load, so its readings still
reach the run folder. A plain subprocess, not multiprocessing, so that nothing re-imports the
parent's __main__ (the `bench` CLI).
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO

from perfmodel.files import JSONObject
from probes.probe_spec import ProbeSpec
from probes.sampler import SAMPLE_COLUMNS
from probes.sampler_kinds import build_samplers
from probes.session import ProbeResult, ProbeSession

_START_TIMEOUT_S = 60.0
_STOP_TIMEOUT_S = 30.0


def _send(stream: IO[str], message: JSONObject) -> None:
    stream.write(json.dumps(message) + "\n")
    stream.flush()


def _failed(reason: str) -> ProbeResult:
    report = {"source": "probes", "status": "failed", "reason": reason, "errors": 0}
    return ProbeResult({name: [] for name in SAMPLE_COLUMNS}, [report])


class ProbeProcess:
    """Run ``spec``'s samplers in a child process: ``start()`` before the load, ``stop()`` after.

    ``engine_headers`` go with each /metrics scrape (module docstring: how they travel).
    ``parts``: the folder the child streams the readings to, every ``flush_s`` seconds
    (probes.sample_stream); None: they come back in the result."""

    def __init__(
        self,
        spec: ProbeSpec,
        engine_headers: Mapping[str, str] | None = None,
        parts: Path | None = None,
        flush_s: float = 0.0,
    ) -> None:
        self.spec = spec
        self._engine_headers = dict(engine_headers or {})
        self._parts = None if parts is None else str(Path(parts).resolve())
        self._flush_s = flush_s
        self._process: subprocess.Popen[str] | None = None
        fd, name = tempfile.mkstemp(prefix="probes-", suffix=".json")
        os.close(fd)
        self._result_path = Path(name)

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def _readline(self, timeout_s: float) -> JSONObject:
        assert self._process is not None and self._process.stdout is not None
        # One line is pending at a time in this protocol, so select-then-readline cannot strand
        # a buffered line.
        with selectors.DefaultSelector() as selector:
            selector.register(self._process.stdout, selectors.EVENT_READ)
            if not selector.select(timeout_s):
                raise RuntimeError(f"the probe process did not answer within {timeout_s:.0f} s")
        line = self._process.stdout.readline()
        if not line:
            code = self._process.wait(5)
            raise RuntimeError(f"the probe process exited with code {code}")
        return json.loads(line)

    def start(self, timeout_s: float = _START_TIMEOUT_S) -> list[str]:
        """Start the child and wait until its samplers run; returns why unavailable ones cannot.

        Raises RuntimeError when the child does not come up within ``timeout_s``.
        """
        # The child imports this package from wherever the parent found it, whatever its cwd.
        root = str(Path(__file__).resolve().parents[1])
        path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
        self._process = subprocess.Popen(
            [sys.executable, "-m", "probes.probe_process"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": path},
            # A terminal's Ctrl-C signals the foreground process group; the parent alone decides
            # when the probes stop (a stop line, or end of input when it has gone).
            start_new_session=True,
        )
        assert self._process.stdin is not None
        _send(
            self._process.stdin,
            {
                "spec": self.spec.to_json(),
                "engine_headers": self._engine_headers,
                "result": str(self._result_path),
                "parts": self._parts,
                "flush_s": self._flush_s,
            },
        )
        try:
            return list(self._readline(timeout_s)["reasons"])
        except BaseException:  # a failed start, or an interrupt while waiting: no child left
            self._kill()
            raise

    def stop(self, timeout_s: float = _STOP_TIMEOUT_S) -> ProbeResult:
        """Stop the samplers and collect what they recorded; the child then exits."""
        if self._process is None:
            return _failed("the probe process was never started")
        try:
            assert self._process.stdin is not None
            _send(self._process.stdin, {"stop": True})
            self._readline(timeout_s)
            data = json.loads(self._result_path.read_text())
            self._process.wait(timeout_s)
            return ProbeResult(
                data["columns"], data["reports"], data.get("process"), data.get("stream")
            )
        except (OSError, RuntimeError, ValueError, KeyError, subprocess.TimeoutExpired) as exc:
            self._kill()
            return _failed(f"the probe process failed: {type(exc).__name__}: {exc}")
        finally:
            self._result_path.unlink(missing_ok=True)

    def _kill(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait(5)


def main() -> None:
    """The child's side of the protocol (module docstring)."""
    # Stopped by its parent only (module docstring), never by a signal meant for the parent.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    cpu0, t0 = time.process_time(), time.perf_counter()
    request = json.loads(sys.stdin.readline())
    spec = ProbeSpec.from_json(request["spec"])
    parts = request.get("parts")
    session = ProbeSession(
        build_samplers(spec, request.get("engine_headers") or None),
        Path(parts) if parts else None,
        request.get("flush_s") or 0.0,
    )
    _send(sys.stdout, {"event": "started", "reasons": session.start()})
    stopped = sys.stdin.readline()  # a stop message, or "" when the parent has gone
    result = session.stop()
    if not stopped:  # killed: the parts are what remains of the readings
        Path(request["result"]).unlink(missing_ok=True)
        return
    process = {"pid": os.getpid(), "cpu_s": time.process_time() - cpu0}
    process["wall_s"] = time.perf_counter() - t0
    process["cpu_fraction_of_one_core"] = process["cpu_s"] / process["wall_s"]
    payload = {
        "columns": result.columns,
        "reports": result.reports,
        "process": process,
        "stream": result.stream,
    }
    Path(request["result"]).write_text(json.dumps(payload))
    _send(sys.stdout, {"event": "stopped"})


if __name__ == "__main__":
    main()
