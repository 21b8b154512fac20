"""Small ShareGPT-format files for the workload and scenario tests."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

WORDS = ("the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "seven", "hum")


def sentence(n_words: int, seed: int) -> str:
    """``n_words`` words of WORDS, the same for the same seed."""
    rng = np.random.default_rng(seed)
    return " ".join(rng.choice(WORDS, size=n_words).tolist())


def write_sharegpt(path: Path, n: int = 12, turns: int = 3) -> Path:
    """A small ShareGPT-format file: ``n`` conversations of ``turns`` exchanges each, plus one
    conversation of a single human turn (no answer, so no request can come from it)."""
    data = []
    for i in range(n):
        conversation = []
        for k in range(turns):
            conversation.append({"from": "human", "value": sentence(6 + i % 5, 100 * i + k)})
            conversation.append({"from": "gpt", "value": sentence(10 + k, 100 * i + k + 50)})
        data.append({"id": f"c{i}", "conversations": conversation})
    data.append({"id": "short", "conversations": [{"from": "human", "value": "hi"}]})
    path.write_text(json.dumps(data), encoding="utf-8")
    return path
