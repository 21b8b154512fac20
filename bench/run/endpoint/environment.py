"""What a run ran on: CPU and GPU names, memory, package versions, the git commit.

Recorded in run.json so that any figure can be traced to its machine and code, and so that
comparisons across machines can be refused (issue: CI gates).
"""

from __future__ import annotations

import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path

import psutil

from results.schema import Hardware

_PACKAGES = (
    "llm-perf-lab",
    "torch",
    "transformers",
    "httpx",
    "fastapi",
    "uvicorn",
    "pandas",
    "pyarrow",
    "nvidia-ml-py",
)


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpu_names() -> list[str]:
    """Names of the NVIDIA GPUs NVML sees; empty where there is no driver."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # no library, no driver, no GPU: all mean "none here"
        return []
    try:
        names = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i))
            names.append(name.decode() if isinstance(name, bytes) else name)
        return names
    finally:
        pynvml.nvmlShutdown()


def package_versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in _PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def git_commit(path: Path | None = None) -> str | None:
    """HEAD of the checkout the code runs from ("+dirty" when it has uncommitted changes)."""
    where = path or Path(__file__).resolve().parent
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True, timeout=5
        )
        if sha.returncode != 0:
            return None
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=where,
            capture_output=True,
            text=True,
            timeout=5,
        )
        return sha.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.TimeoutExpired):
        return None


def hardware() -> Hardware:
    """run.json's "hardware": this machine's CPU, cores, memory, GPUs and platform."""
    return Hardware(
        cpu=cpu_name(),
        cpu_count_logical=os.cpu_count(),
        cpu_count_physical=psutil.cpu_count(logical=False),
        memory_bytes=psutil.virtual_memory().total,
        gpus=gpu_names(),
        platform=platform.platform(),
    )
