"""A real byte-level BPE tokenizer for tests, trained in well under a second."""

from __future__ import annotations

import functools
import random

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers


class BpeAdapter:
    """The loadgen tokenizer protocol over a ``tokenizers.Tokenizer``."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self._tok = tokenizer
        self.vocab_size = tokenizer.get_vocab_size()

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return self._tok.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return self._tok.decode(ids, skip_special_tokens=skip_special_tokens)


@functools.lru_cache(maxsize=2)
def make_tokenizer(vocab_size: int = 512) -> BpeAdapter:
    """A byte-level BPE trained on a seeded synthetic corpus: the same vocabulary every time."""
    rng = random.Random(0)
    syllables = ["ka", "lo", "mi", "ne", "tra", "str", "ing", "ion", "ed", "pro", "at", "th", "er"]
    words = ["".join(rng.choices(syllables, k=rng.randint(1, 4))) for _ in range(400)]
    corpus = [
        " ".join(rng.choices(words, k=30)) + rng.choice([".", ",", "!", "?", "\n", " 42"])
        for _ in range(400)
    ]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer)
    return BpeAdapter(tok)
