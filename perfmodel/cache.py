"""The one cache folder of the lab, and every path derived from it.

Everything the lab generates and keeps between runs lives under :func:`cache_root`:
``$LLM_PERF_LAB_CACHE``, else ``~/.cache/llm-perf-lab``. Nothing else is configurable on its own,
so that pointing one variable elsewhere (a CI cache, a test's temporary folder) moves all of it.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = [
    "CACHE_ENV",
    "cache_root",
    "calibration_path",
    "engines_dir",
    "native_dir",
    "revisions_dir",
    "sim_calibration_path",
    "tokenizers_dir",
]

CACHE_ENV = "LLM_PERF_LAB_CACHE"


def cache_root() -> Path:
    """$LLM_PERF_LAB_CACHE, else ~/.cache/llm-perf-lab (read at each call, not at import)."""
    custom = os.environ.get(CACHE_ENV)
    return Path(custom) if custom else Path.home() / ".cache" / "llm-perf-lab"


def calibration_path() -> Path:
    """`bench calibrate`'s measured roofs of this machine (JSON)."""
    return cache_root() / "calibration.json"


def sim_calibration_path(model: str) -> Path:
    """`bench sim-calibrate`'s fit of the simulated CPU to ``model``'s real steps (JSON)."""
    return cache_root() / f"sim-calibration-{model}.json"


def native_dir() -> Path:
    """The C kernels built for this CPU, one folder per build key."""
    return cache_root() / "native"


def tokenizers_dir() -> Path:
    """Synthetic tokenizers trained for presets, one JSON file per vocabulary size."""
    return cache_root() / "tokenizers"


def engines_dir() -> Path:
    """External engines installed by benchmarks/engines/install-*.sh, one folder per version."""
    return cache_root() / "engines"


def revisions_dir() -> Path:
    """`bench ab --a-rev/--b-rev`: one folder per commit, its checkout and its virtualenv."""
    return cache_root() / "revisions"
