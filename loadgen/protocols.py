"""The duck-typed interfaces the load generator needs from its collaborators.

loadgen must not import the engine or bench packages, so it names what it uses as Protocols: any
object with these methods works (the engine's Tokenizer, a Hugging Face tokenizer, a test adapter).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

__all__ = ["TokenizerLike"]


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
