"""Continuous (or static) batching with a token budget, chunked prefill and recompute preemption.

Each step hands out at most ``max_num_batched_tokens`` tokens: first to the running requests in
arrival order (a decode costs one token plus its draft tokens under speculative decoding, an
unfinished prefill the rest of its prompt, cut to the budget when chunked prefill is on), then to
waiting requests while the budget, the batch cap and the free KV blocks allow. When a running
request needs a block and none is free, the most recently admitted running request is preempted:
its blocks are freed and its tokens (prompt and outputs so far) are recomputed when it is
scheduled again (a prefix-cache hit on its own freed blocks can spare part of that).

Static batching, the textbook scheme continuous batching replaces: a batch of up to max_num_seqs
requests is admitted when the engine is empty, and no request joins until all of them finish.

Without K/V reuse (``reuse_kv=False``, the cache setting kv_cache off) a request that sampled
goes back to no computed tokens while keeping its blocks, so its next step is a prefill of its
whole sequence (prompt and outputs so far): the cost of a token grows with the length.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Literal

from engine.core.kv_cache_manager import KVCacheManager
from engine.core.request import Request, RequestStatus

Batching = Literal["continuous", "static"]


@dataclass
class ScheduledRequest:
    request: Request
    num_new_tokens: int
    # True when, after this step, every known token of the request has K/V: the step's last
    # position yields the next token. False for a prefill chunk that stops mid-prompt.
    samples: bool
    # Draft tokens to verify this step (speculative decoding); they follow the request's last
    # token in the step's input and are counted in num_new_tokens.
    spec_token_ids: list[int] = field(default_factory=list)
    # Decode: the request computes the one token it sampled last (plus drafts), not its prompt.
    is_decode: bool = False


@dataclass
class SchedulerOutput:
    scheduled: list[ScheduledRequest] = field(default_factory=list)
    num_prefill_tokens: int = 0
    num_decode_tokens: int = 0
    preempted: list[Request] = field(default_factory=list)

    @property
    def total_num_tokens(self) -> int:
        return self.num_prefill_tokens + self.num_decode_tokens

    @property
    def is_empty(self) -> bool:
        return not self.scheduled


class Scheduler:
    def __init__(
        self,
        kv_cache_manager: KVCacheManager,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        max_model_len: int,
        enable_chunked_prefill: bool = True,
        batching: Batching = "continuous",
        num_lookahead_tokens: int = 0,
        reuse_kv: bool = True,
    ) -> None:
        if batching not in ("continuous", "static"):
            raise ValueError(f"batching must be 'continuous' or 'static', got {batching!r}")
        self.kv = kv_cache_manager
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_model_len = max_model_len
        self.enable_chunked_prefill = enable_chunked_prefill
        self.batching = batching
        # Slots beyond the verified tokens that a draft proposer writes K/V into.
        self.num_lookahead_tokens = num_lookahead_tokens
        self.reuse_kv = reuse_kv
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.requests: dict[str, Request] = {}
        self.num_preemptions_total = 0

    def add_request(self, request: Request) -> None:
        if request.request_id in self.requests:
            raise ValueError(f"request id {request.request_id!r} is already in the engine")
        self.requests[request.request_id] = request
        self.waiting.append(request)

    @property
    def num_unfinished(self) -> int:
        return len(self.waiting) + len(self.running)

    def _preempt(self, victim: Request, out: SchedulerOutput) -> None:
        self.kv.free(victim)
        victim.status = RequestStatus.PREEMPTED
        victim.num_computed_tokens = 0
        victim.spec_token_ids = []
        victim.num_preemptions += 1
        self.num_preemptions_total += 1
        self.waiting.appendleft(victim)
        out.preempted.append(victim)

    def _num_new_tokens(self, request: Request, num_computed: int, budget: int) -> int:
        remaining = request.num_tokens - num_computed
        if remaining <= budget:
            return remaining
        return budget if self.enable_chunked_prefill else 0

    def _lookahead(self, request: Request) -> int:
        # Any request may end the step in decode (a finished prefill too) and get drafts whose
        # K/V the proposer writes ahead of its tokens; never past the context length.
        return min(self.num_lookahead_tokens, self.max_model_len - request.num_tokens)

    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        budget = self.max_num_batched_tokens
        if self.batching == "static" and not self.running:
            budget = self._admit(out, budget, admit_all=True)

        i = 0
        while i < len(self.running) and budget > 0:
            req = self.running[i]
            n = self._num_new_tokens(req, req.num_computed_tokens, budget)
            spec = req.spec_token_ids
            if spec and n == 1:
                room = min(
                    budget - 1,
                    self.max_model_len - req.num_tokens - 1,
                    req.sampling_params.max_tokens - req.num_output_tokens - 1,
                )
                spec = spec[: max(0, room)]
                n += len(spec)
            else:
                spec = []
            if n == 0:
                i += 1
                continue
            while not self.kv.allocate_slots(req, n, num_lookahead_tokens=self._lookahead(req)):
                victim = self.running.pop()
                self._preempt(victim, out)
                if victim is req:
                    break
            else:
                self._record(out, req, n, spec)
                budget -= n
                i += 1

        if self.batching == "continuous":
            self._admit(out, budget, admit_all=False)
        return out

    def _admit(self, out: SchedulerOutput, budget: int, admit_all: bool) -> int:
        """Move waiting requests into the batch; returns the budget left.

        Continuous: each admitted request is scheduled at once, so admission stops at the
        budget. Static (``admit_all``): the whole batch is admitted now, its prompts prefilled
        over as many steps as the budget needs.
        """
        now = time.perf_counter()
        # New requests wait while anything was preempted this step: admitting them would only
        # take the blocks the preempted ones need back.
        while not out.preempted and self.waiting and len(self.running) < self.max_num_seqs:
            req = self.waiting[0]
            hits = self.kv.get_computed_blocks(req)
            num_computed = len(hits) * self.kv.block_size
            # A static batch is only admitted here; the running loop schedules its tokens.
            n = 0 if admit_all else self._num_new_tokens(req, num_computed, budget)
            if n == 0 and not admit_all:
                break
            if not self.kv.allocate_slots(req, n, hits, self._lookahead(req)):
                break
            self.kv.record_prefix_lookup(req, num_computed)
            self.waiting.popleft()
            req.status = RequestStatus.RUNNING
            if req.first_scheduled_s is None:
                req.first_scheduled_s = now
                req.num_cached_tokens = num_computed
            self.running.append(req)
            if n:
                self._record(out, req, n, [])
                budget -= n
        return budget

    def _record(self, out: SchedulerOutput, req: Request, n: int, spec: list[int]) -> None:
        remaining = req.num_tokens - req.num_computed_tokens
        samples = n - len(spec) == remaining
        # A decode computes the one token sampled last step (plus drafts); recomputing a
        # preempted request's outputs is prefill work.
        is_decode = remaining == 1 and req.num_output_tokens > 0
        out.scheduled.append(ScheduledRequest(req, n, samples, spec, is_decode))
        if is_decode:
            out.num_decode_tokens += n
        else:
            out.num_prefill_tokens += n

    def update_from_output(
        self, out: SchedulerOutput, sampled: dict[str, list[int]]
    ) -> list[tuple[Request, list[int]]]:
        """Advance every scheduled request by the step's results.

        ``sampled`` maps request id to the tokens the step produced for it: one sampled token,
        or under speculative decoding the accepted draft tokens plus one more (only for
        requests whose step ``samples``). Returns (request, new token ids) for each request
        that produced a token; finished requests have left the scheduler.
        """
        updates: list[tuple[Request, list[int]]] = []
        finished: set[str] = set()
        for s in out.scheduled:
            req = s.request
            if not s.samples:
                req.num_computed_tokens += s.num_new_tokens
                self.kv.cache_full_blocks(req)
                continue
            tokens = sampled[req.request_id]
            num_rejected = len(s.spec_token_ids) - (len(tokens) - 1)
            req.num_computed_tokens += s.num_new_tokens - num_rejected
            req.spec_token_ids = []
            new: list[int] = []
            status = None
            for token in tokens:
                req.append_output_token(token)
                new.append(token)
                status = req.check_stop(self.max_model_len)
                if status is not None:
                    break
            # Cache before freeing: a finished request's blocks stay reusable until evicted.
            self.kv.cache_full_blocks(req)
            if status is not None:
                req.status = status
                finished.add(req.request_id)
                self.kv.free(req)
                del self.requests[req.request_id]
            elif not self.reuse_kv:
                req.num_computed_tokens = 0
            updates.append((req, new))
        if finished:
            self.running = [r for r in self.running if r.request_id not in finished]
        return updates

    def abort(self, request_id: str) -> Request | None:
        """Remove a request wherever it is; returns it, or None if it was not here."""
        req = self.requests.pop(request_id, None)
        if req is None:
            return None
        if req in self.running:
            self.running.remove(req)
        else:
            self.waiting.remove(req)
        self.kv.free(req)
        req.status = RequestStatus.FINISHED_ABORTED
        return req
