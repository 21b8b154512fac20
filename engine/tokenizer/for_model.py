"""The tokenizer of a model: its directory's tokenizer.json, else a synthetic one of its vocabulary.

One rule for the engine (which loads it beside the weights) and for a client that only needs the
tokenizer (`bench run --url`, which has no weights): both get the same ids for the same model.
Torch-free, so a client can load a tokenizer without importing the engine's model.
"""

from __future__ import annotations

from pathlib import Path

from engine.tokenizer.constructed import LARGE_VOCAB, constructed_tokenizer
from engine.tokenizer.tokenizer import Tokenizer

__all__ = ["tokenizer_for_model"]


def tokenizer_for_model(model: str, vocab_size: int, is_preset: bool) -> Tokenizer:
    """``model``'s tokenizer: for a directory (``is_preset`` False) with tokenizer.json, that
    file's; otherwise a synthetic tokenizer of ``vocab_size`` ids, trained (Tokenizer.for_preset)
    up to LARGE_VOCAB ids and constructed above it (training one of Llama-3's 128,256 ids takes
    about 30 s; engine.tokenizer.constructed builds one in under a second)."""
    path = Path(model)
    if not is_preset and (path / "tokenizer.json").is_file():
        return Tokenizer.from_dir(path)
    if vocab_size > LARGE_VOCAB:
        return constructed_tokenizer(vocab_size)
    return Tokenizer.for_preset(vocab_size)
