"""A deterministic byte-level BPE of any vocabulary size, built without training.

Tokenizer.for_preset trains a BPE on a synthetic corpus: under 2 s for the tiny model's 4,096
ids, but about 30 s (once, then cached) for Llama-3's 128,256, which is too slow for a simulated
70B that should start in a second. This builds one directly instead: <s> and </s>, the 256 byte
symbols, then lowercase words of 1..4 letters (with and without a leading space) in a fixed order,
each merge joining a word's prefix with its last letter, so every merge's parts exist before it.
Encoding and decoding work as for any byte-level BPE (text round-trips exactly); only the
"language" is artificial. Presets with vocabularies above LARGE_VOCAB use it (engine.llm_engine).
"""

from __future__ import annotations

import itertools
import string
from collections.abc import Iterator

import numpy as np
import tokenizers
from tokenizers import decoders, models, pre_tokenizers, processors

from engine.tokenizer.tokenizer import BOS, EOS, SYNTHETIC_CHAT_TEMPLATE, Tokenizer, TokenizerError

# Vocabularies larger than this get the constructed tokenizer (training would take seconds).
LARGE_VOCAB = 16384
_SPACE = "\u0120"  # the byte-level alphabet's symbol for " "
_LETTERS = string.ascii_lowercase


def _words(seed: int) -> Iterator[tuple[str, str]]:
    """(prefix, last letter) of each constructed word, shortest first; the 4-letter words,
    more than any vocabulary needs, come in a seeded order so that a cut keeps every letter."""
    for letter in _LETTERS:
        yield _SPACE, letter
    for length in (2, 3):
        for lead in ("", _SPACE):
            for letters in itertools.product(_LETTERS, repeat=length):
                yield lead + "".join(letters[:-1]), letters[-1]
    # Index i < 26**4 is a word without a leading space, the rest with one; a seeded permutation
    # picks them in an order that keeps every letter whatever the cut.
    count = len(_LETTERS) ** 4
    for index in np.random.default_rng(seed).permutation(2 * count).tolist():
        lead, rest = (_SPACE, index - count) if index >= count else ("", index)
        letters = [_LETTERS[rest // len(_LETTERS) ** p % len(_LETTERS)] for p in (3, 2, 1, 0)]
        yield lead + "".join(letters[:-1]), letters[-1]


def constructed_bpe(vocab_size: int, seed: int = 0) -> tokenizers.Tokenizer:
    """The byte-level BPE backend of exactly ``vocab_size`` ids (<s>=0, </s>=1)."""
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    minimum = 2 + len(alphabet) + 1
    if vocab_size < minimum:
        raise TokenizerError(f"vocab_size {vocab_size} is too small; need at least {minimum}")
    vocab = {BOS: 0, EOS: 1}
    for symbol in alphabet:
        vocab[symbol] = len(vocab)
    merges: list[tuple[str, str]] = []
    for prefix, last in _words(seed):
        if len(vocab) >= vocab_size:
            break
        vocab[prefix + last] = len(vocab)
        merges.append((prefix, last))
    if len(vocab) != vocab_size:
        raise TokenizerError(f"cannot construct {vocab_size} tokens (at most {len(vocab)})")
    backend = tokenizers.Tokenizer(models.BPE(vocab=vocab, merges=merges))
    backend.add_special_tokens([BOS, EOS])
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, 0)]
    )
    return backend


def constructed_tokenizer(vocab_size: int, seed: int = 0) -> Tokenizer:
    """A Tokenizer (same special tokens and chat template as Tokenizer.for_preset) over
    :func:`constructed_bpe`."""
    backend = constructed_bpe(vocab_size, seed)
    return Tokenizer(backend, f"constructed-bpe-{vocab_size}", BOS, [EOS], SYNTHETIC_CHAT_TEMPLATE)
