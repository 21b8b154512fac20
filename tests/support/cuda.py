"""The one skip for GPU tests: ``@needs_cuda`` marks a test ``gpu`` and skips it, with the
reason, where torch sees no CUDA device."""

from __future__ import annotations

import pytest
import torch

needs_cuda = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA device: torch.cuda.is_available() is False"
)


def gpu(test):  # type: ignore[no-untyped-def]
    """Mark ``test`` as a GPU test (``pytest -m gpu``) that skips without CUDA."""
    return pytest.mark.gpu(needs_cuda(test))
