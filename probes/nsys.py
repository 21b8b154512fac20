"""`bench run --nsys`: the engine's launch command wrapped in Nsight Systems.

``nsys profile -t cuda,nvtx`` records CUDA API calls and kernels plus the engine's NVTX ranges
(engine.core.telemetry: step, schedule, execute, update, and prefill, decode or mixed around
each step's forward). The report (``<output>.nsys-rep``) is written when the profiled program
exits. A launched engine under nsys is stopped by signalling `bench serve` alone: its front
closes the engine-core process (which does the CUDA work, and whose trace is lost if it is
killed), then exits, and nsys finalizes the report, which takes time for a long trace; the
process group is signalled only after :data:`STOP_TIMEOUT_S` (engine_adapters.launcher).
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


# Which packages bring nsys: said wherever it is missing.
NSYS_INSTALL = (
    "Install Nsight Systems' command line (the package nsight-systems-cli of NVIDIA's CUDA "
    "apt repository, cuda-nsight-systems-<version> with the CUDA toolkit, or Debian "
    "non-free's nsight-systems) and put its bin/ on PATH."
)


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
            f"--nsys: nsys (Nsight Systems) is not on PATH; the engine runs without it. "
            f"{NSYS_INSTALL}"
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
