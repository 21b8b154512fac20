"""The duck-typed interfaces the load generator needs from its collaborators.

loadgen must not import the engine or bench packages, so it names what it uses as Protocols: any
object with these methods works (the engine's Tokenizer, a Hugging Face tokenizer, a test adapter).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    import numpy as np

__all__ = ["BatchedTokenizerLike", "TokenizerLike"]


@runtime_checkable
class TokenizerLike(Protocol):
    """A tokenizer as the load generator uses it.

    Contract:
        * ``encode(text, add_special_tokens=False)`` returns the token ids of ``text`` alone
          (no BOS/EOS when ``add_special_tokens`` is False).
        * ``decode(ids, skip_special_tokens=True)`` returns the text of ``ids``.
        * ``vocab_size`` is the number of ids ``decode`` accepts: ``0 <= id < vocab_size``.
    """

    @property
    def vocab_size(self) -> int: ...

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]: ...

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str: ...


@runtime_checkable
class BatchedTokenizerLike(TokenizerLike, Protocol):
    """A tokenizer whose every call is a round trip (a server's /tokenize and /detokenize).

    Building a prompt pool from a plain TokenizerLike costs two calls per candidate id (8,192
    candidates on a large vocabulary); this one names its own candidates and answers many texts
    per call, so a pool costs a few batched round trips.

    Contract (beyond TokenizerLike's; ``vocab_size`` may be only a lower bound):
        * ``candidate_ids(rng)`` returns distinct ids worth trying for the pool, drawn with ``rng``.
        * ``decode_each(ids)`` returns the text of each id alone, in order.
        * ``encode_batch(texts)`` returns ``[encode(t, add_special_tokens=False) for t in texts]``.
    """

    def candidate_ids(self, rng: np.random.Generator) -> list[int]: ...

    def decode_each(self, ids: list[int]) -> list[str]: ...

    def encode_batch(self, texts: list[str]) -> list[list[int]]: ...
