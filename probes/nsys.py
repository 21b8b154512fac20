"""`bench run --nsys`: the engine's launch command wrapped in Nsight Systems.

``nsys profile -t cuda,nvtx`` records CUDA API calls and kernels plus the engine's NVTX ranges
(engine.core.telemetry: step, schedule, execute, update, prefill, decode). The report
(``<output>.nsys-rep``) is written when the engine exits; nsys ends the collection on SIGTERM,
which is how a launched engine is stopped, but finalizing a long trace takes time: give the
stop a generous timeout (:data:`STOP_TIMEOUT_S`).
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

NSYS_TRACE = "cuda,nvtx"
REPORT_SUFFIX = ".nsys-rep"
STOP_TIMEOUT_S = 120.0


class NsysUnavailable(RuntimeError):
    """nsys is not on PATH; the message says so and how to get it."""


def find_nsys() -> str | None:
    """The nsys executable on PATH, or None."""
    return shutil.which("nsys")


def nsys_command(
    command: Sequence[str],
    output: Path,
    nsys: str | None = None,
    trace: str = NSYS_TRACE,
) -> list[str]:
    """``command`` run under ``nsys profile -t <trace>``, writing ``<output>.nsys-rep``.

    ``nsys`` is the executable (default: the one on PATH). Raises NsysUnavailable when there is
    none, so the caller can say so and run without the profiler.
    """
    executable = nsys or find_nsys()
    if executable is None:
        raise NsysUnavailable(
            "--nsys: nsys (Nsight Systems) is not on PATH; the engine runs without it. Install "
            "Nsight Systems (it ships with the CUDA toolkit) and put its bin/ on PATH."
        )
    if not command:
        raise ValueError("nsys_command needs the engine's command line")
    return [
        executable,
        "profile",
        "-t",
        trace,
        "-o",
        str(output),
        "--force-overwrite=true",
        *command,
    ]


def report_path(output: Path) -> Path:
    """Where nsys writes the report for ``-o output``."""
    return output.with_name(output.name + REPORT_SUFFIX)
