"""The model tests run their tiny models on one thread each."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def _few_threads() -> None:
    # Two cores are shared with other work, and these models are too small to gain from more.
    # torch keeps the setting for the rest of the session, as it did when each module set it.
    torch.set_num_threads(1)
