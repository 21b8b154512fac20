"""Turns engine token outputs into streamed text: incremental detokenization and stop strings.

Runs in the server's event loop, off the engine's step loop (vLLM v1 splits it the same way).
Stop strings are matched on text; the text that could still become a stop string is held back
until it cannot, so a client never receives the start of a stop string. With a reasoning prefix
(engine.serving.reasoning) the text is split where the prefix's last token ends, and each delta
says how much of it is reasoning.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from engine.llm_engine import RequestOutput
from engine.serving.metrics import EngineMetrics
from engine.tokenizer.tokenizer import IncrementalDetokenizer, Tokenizer


@dataclass(frozen=True)
class TextDelta:
    """What a client receives for one engine output of one request."""

    text: str
    token_ids: list[int]
    num_prompt_tokens: int
    num_output_tokens: int
    finished: bool
    finish_reason: str | None
    # How many leading characters of ``text`` belong to the reasoning prefix (0 without one).
    reasoning_chars: int = 0
    # Prompt tokens the prefix cache held (usage.prompt_tokens_details.cached_tokens).
    num_cached_tokens: int = 0


class RequestTextState:
    """Per-request detokenization, stop-string matching and latency metrics."""

    def __init__(
        self,
        tokenizer: Tokenizer,
        stop: tuple[str, ...],
        arrival_s: float,
        metrics: EngineMetrics | None,
        reasoning_tokens: int = 0,
    ) -> None:
        """``reasoning_tokens``: the first so many generated tokens are reasoning."""
        self._detok = IncrementalDetokenizer(tokenizer)
        self._reasoning_tokens = reasoning_tokens
        # Characters of the text that are reasoning: unknown (None) until the prefix's last
        # token has been decoded; 0 without a prefix.
        self._boundary: int | None = 0 if reasoning_tokens <= 0 else None
        self._stop = tuple(s for s in stop if s)
        self._hold_chars = max((len(s) for s in self._stop), default=1) - 1
        self._text = ""
        self._sent_chars = 0
        self._arrival_s = arrival_s
        self._last_token_s: float | None = None
        self._metrics = metrics
        self.stopped_by_string = False

    def process(self, out: RequestOutput) -> TextDelta:
        now = time.perf_counter()
        if self._metrics is not None and out.new_token_ids:
            if self._last_token_s is None:
                self._metrics.ttft_s.observe(now - self._arrival_s)
            else:
                self._metrics.itl_s.observe(now - self._last_token_s)
        self._last_token_s = now

        self._decode(out)
        finished, reason = out.finished, out.finish_reason
        if finished:
            # A request can end inside a multi-byte character; send what it has, as decode()
            # of the whole output would.
            self._text += self._detok.flush()
        if self._stop:
            hit = self._find_stop()
            if hit is not None:
                self._text = self._text[:hit]
                finished, reason = True, "stop"
                self.stopped_by_string = True
        end = len(self._text) if finished else max(self._sent_chars, len(self._text) - self._hold)
        delta = self._text[self._sent_chars : end]
        reasoning_end = end if self._boundary is None else min(self._boundary, end)
        reasoning_chars = max(reasoning_end - self._sent_chars, 0)
        self._sent_chars = end
        if finished and self._metrics is not None:
            self._metrics.e2e_s.observe(now - self._arrival_s)
            self._metrics.record_finished(reason or "stop")
        return TextDelta(
            delta,
            out.new_token_ids,
            out.num_prompt_tokens,
            out.num_output_tokens,
            finished,
            reason,
            reasoning_chars,
            out.num_cached_tokens,
        )

    def _decode(self, out: RequestOutput) -> None:
        """Add ``out``'s tokens to the text, noting where the reasoning prefix ends."""
        ids = out.new_token_ids
        if self._boundary is not None:
            self._text += self._detok.feed(ids)
            return
        # Tokens of this output still inside the prefix (several arrive at once when drafts
        # are accepted).
        inside = self._reasoning_tokens - (out.num_output_tokens - len(ids))
        if inside >= len(ids):
            self._text += self._detok.feed(ids)
            return
        if inside > 0:
            self._text += self._detok.feed(ids[:inside])
        self._boundary = len(self._text)
        self._text += self._detok.feed(ids[max(inside, 0) :])

    @property
    def _hold(self) -> int:
        return self._hold_chars if self._stop else 0

    def _find_stop(self) -> int | None:
        # Only text not yet sent can contain a new match; look back far enough to catch a stop
        # string that straddles the last sent character.
        start = max(0, self._sent_chars - self._hold_chars)
        hits = [i for s in self._stop if (i := self._text.find(s, start)) >= 0]
        return min(hits) if hits else None
