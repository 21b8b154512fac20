"""Continuous batching with a token budget, chunked prefill and recompute preemption (FCFS).

Each step the scheduler hands out at most ``max_num_batched_tokens`` tokens: first to the running
requests in arrival order (a decode costs one token, an unfinished prefill the rest of its prompt,
cut to the budget when chunked prefill is on), then to waiting requests while the budget, the
batch size cap and the free KV blocks allow. When a running request needs a block and none is
free, the most recently admitted running request is preempted: its blocks are freed and its
tokens (prompt and outputs so far) will be recomputed when it is scheduled again.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

from engine.kv_cache_manager import KVCacheManager
from engine.request import Request, RequestStatus


@dataclass
class ScheduledRequest:
    request: Request
    num_new_tokens: int
    # True when, after this step, every known token of the request has K/V: the step's last
    # position yields the next token. False for a prefill chunk that stops mid-prompt.
    samples: bool


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
    ) -> None:
        self.kv = kv_cache_manager
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_model_len = max_model_len
        self.enable_chunked_prefill = enable_chunked_prefill
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
        victim.num_preemptions += 1
        self.num_preemptions_total += 1
        self.waiting.appendleft(victim)
        out.preempted.append(victim)

    def _num_new_tokens(self, request: Request, budget: int) -> int:
        remaining = request.num_tokens - request.num_computed_tokens
        if remaining <= budget:
            return remaining
        return budget if self.enable_chunked_prefill else 0

    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        budget = self.max_num_batched_tokens
        now = time.perf_counter()

        i = 0
        while i < len(self.running) and budget > 0:
            req = self.running[i]
            n = self._num_new_tokens(req, budget)
            if n == 0:
                i += 1
                continue
            while not self.kv.allocate_slots(req, n):
                victim = self.running.pop()
                self._preempt(victim, out)
                if victim is req:
                    break
            else:
                self._record(out, req, n)
                budget -= n
                i += 1

        # New requests wait while anything was preempted this step: admitting them would only
        # take the blocks the preempted ones need back.
        while (
            not out.preempted
            and self.waiting
            and budget > 0
            and len(self.running) < self.max_num_seqs
        ):
            req = self.waiting[0]
            n = self._num_new_tokens(req, budget)
            if n == 0 or not self.kv.allocate_slots(req, n):
                break
            self.waiting.popleft()
            req.status = RequestStatus.RUNNING
            if req.first_scheduled_s is None:
                req.first_scheduled_s = now
            self.running.append(req)
            self._record(out, req, n)
            budget -= n
        return out

    def _record(self, out: SchedulerOutput, req: Request, n: int) -> None:
        samples = req.num_computed_tokens + n == req.num_tokens
        out.scheduled.append(ScheduledRequest(req, n, samples))
        if n == 1 and req.num_computed_tokens > 0 and samples:
            out.num_decode_tokens += 1
        else:
            out.num_prefill_tokens += n

    def update_from_output(
        self, out: SchedulerOutput, sampled: dict[str, int]
    ) -> list[tuple[Request, list[int]]]:
        """Advance every scheduled request by the step's results.

        ``sampled`` maps request id to the token sampled at its last scheduled position (only
        for requests whose step ``samples``). Returns (request, new token ids) for each request
        that produced a token or finished; finished requests have left the scheduler.
        """
        updates: list[tuple[Request, list[int]]] = []
        finished: set[str] = set()
        for s in out.scheduled:
            req = s.request
            req.num_computed_tokens += s.num_new_tokens
            if not s.samples:
                continue
            token = sampled[req.request_id]
            req.append_output_token(token)
            status = req.check_stop(self.max_model_len)
            if status is not None:
                req.status = status
                finished.add(req.request_id)
                self.kv.free(req)
                del self.requests[req.request_id]
            updates.append((req, [token]))
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
