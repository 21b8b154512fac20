"""The mark of a GPU test: ``@gpu`` is ``pytest.mark.gpu`` (`pytest -m gpu` selects them), and
tests/conftest.py skips every such test, with the reason, where torch sees no CUDA device: one
skip for all of them."""

from __future__ import annotations

import pytest

gpu = pytest.mark.gpu
