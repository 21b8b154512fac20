"""A lab cache laid out by the test: its own calibration, the real build and tokenizer caches.

Tests that write or fake a calibration point LLM_PERF_LAB_CACHE at a temporary folder. The C
kernels and the trained synthetic tokenizers are linked in from the real cache, so the test does
not rebuild or retrain them (both are keyed by their inputs, so sharing them is safe).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from perfmodel import cache


def isolated_cache(monkeypatch: pytest.MonkeyPatch, folder: Path) -> Path:
    """Make ``folder`` the lab's cache root for this test and return it."""
    shared = {"native": cache.native_dir(), "tokenizers": cache.tokenizers_dir()}
    folder.mkdir(parents=True, exist_ok=True)
    for name, source in shared.items():
        source.mkdir(parents=True, exist_ok=True)
        link = folder / name
        if not link.exists():
            link.symlink_to(source, target_is_directory=True)
    monkeypatch.setenv(cache.CACHE_ENV, str(folder))
    return folder
