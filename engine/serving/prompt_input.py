"""Prompts from the client to token ids the model can take, without stalling the event loop.

Every check that can refuse a prompt runs before the engine sees it, each a 400 naming the
field:

- text is valid Unicode: a lone surrogate (``"\\ud800"`` in JSON is one) cannot be tokenized;
- text that cannot fit is refused by its length alone, before tokenizing: a text of more than
  ``max_prompt_chars`` characters encodes to more than ``max_model_len`` tokens, since no token
  covers more than ``Tokenizer.max_token_bytes()`` bytes and a character is at least one byte
  (a tokenizer with a normalizer, which may merge characters, gets 4 times the room);
- token ids, sent or made by the tokenizer, are ids of the model's embedding table: a tokenizer
  larger than the model (which loads, with a warning) could otherwise crash the engine core.

Tokenizing (and a chat template) runs in a worker thread; the tokenizer releases the GIL while
it encodes, so /health and the streams keep their latency behind a long prompt.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from engine.serving.errors import BadRequest
from engine.tokenizer.tokenizer import Tokenizer

log = logging.getLogger(__name__)

# How much longer than the plain bound a text may be under a normalizer (NFC, NFKC) that can
# merge characters: NFC composes at most 3 code points (a Hangul syllable's jamo) into one.
NORMALIZER_MARGIN = 4


def surrogate_error(text: str, field: str) -> BadRequest | None:
    """The 400 for a text holding a lone surrogate, naming ``field`` and the position."""
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        return BadRequest(
            f"{field} is not valid Unicode: a lone surrogate (U+{ord(text[e.start]):04X}) at "
            f"character {e.start}; send text that encodes to UTF-8 (pair each surrogate)",
            field,
        )
    return None


class PromptInput:
    """Checks and tokenizes prompts for one model (``model_vocab_size`` ids in its embedding,
    ``max_model_len`` tokens of context)."""

    def __init__(self, tokenizer: Tokenizer, model_vocab_size: int, max_model_len: int) -> None:
        self.tokenizer = tokenizer
        self.model_vocab_size = model_vocab_size
        self.max_model_len = max_model_len
        margin = 1 if tokenizer.backend.normalizer is None else NORMALIZER_MARGIN
        self.max_prompt_chars = max_model_len * tokenizer.max_token_bytes() * margin
        if tokenizer.vocab_size > model_vocab_size:
            log.warning(
                "the tokenizer %s has %d token ids, the model's embedding table %d: prompts "
                "holding ids from %d up are refused with 400",
                tokenizer.name, tokenizer.vocab_size, model_vocab_size, model_vocab_size,
            )  # fmt: skip
        # Two threads: one long prompt does not hold up the next short one.
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="tokenize")

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def check_text(self, text: str, field: str) -> None:
        """Raise BadRequest for text that is not valid Unicode or cannot fit the context."""
        error = surrogate_error(text, field)
        if error is not None:
            raise error
        if len(text) > self.max_prompt_chars:
            raise BadRequest(
                f"{field} has {len(text)} characters, more than the {self.max_prompt_chars} "
                f"that could fit this model's maximum context length of {self.max_model_len} "
                "tokens; shorten it",
                field,
                "context_length_exceeded",
            )

    def check_ids(self, ids: list[int], field: str, from_text: bool = False) -> None:
        """Raise BadRequest unless every id is one of the model's embedding table."""
        vocab = self.model_vocab_size
        bad = [t for t in ids if not 0 <= t < vocab]
        if not bad:
            return
        if from_text:
            raise BadRequest(
                f"{field} encodes to token ids the model does not have (ids {bad[:5]} are not "
                f"below {vocab}, the size of its embedding table; the tokenizer has "
                f"{self.tokenizer.vocab_size}); remove the text that makes them",
                field,
            )
        raise BadRequest(f"{field} token ids out of range [0, {vocab}): {bad[:5]}", field)

    async def encode_text(self, text: str, field: str) -> list[int]:
        """The ids of a completion's text prompt (with the tokenizer's BOS), checked."""
        self.check_text(text, field)
        return await self._run(self._encode_checked, text, field)

    def _encode_checked(self, text: str, field: str) -> list[int]:
        # The id check too runs here: a Python loop, which yields the GIL to the event loop.
        ids = self.tokenizer.encode_releasing_gil(text, True)
        self.check_ids(ids, field, from_text=True)
        return ids

    async def encode_chat(self, messages: list[dict[str, str]]) -> list[int]:
        """The ids of chat ``messages`` ([{"role", "content"}]) under the chat template."""
        total = 0
        for i, m in enumerate(messages):
            error = surrogate_error(m["content"], f"messages.{i}.content")
            if error is not None:
                raise error
            total += len(m["content"])
        if total > self.max_prompt_chars:
            raise BadRequest(
                f"messages hold {total} characters of content, more than the "
                f"{self.max_prompt_chars} that could fit this model's maximum context length "
                f"of {self.max_model_len} tokens; send fewer or shorter messages",
                "messages",
                "context_length_exceeded",
            )
        return await self._run(self._render_and_encode, messages)

    def _render_and_encode(self, messages: list[dict[str, str]]) -> list[int]:
        try:
            prompt = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True)
        except Exception as e:  # the template is user data: any error it raises is a 400
            raise BadRequest(f"the chat template failed on these messages: {e}", "messages") from e
        error = surrogate_error(prompt, "messages")
        if error is not None:  # the template itself made one
            raise error
        ids = self.tokenizer.encode_releasing_gil(prompt, False)
        self.check_ids(ids, "messages", from_text=True)
        return ids

    async def _run(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)
