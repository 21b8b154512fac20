"""The simulated executor: the engine's real scheduler on a device it does not have.

Implements engine.core.executor.Executor without a model. Each scheduled batch costs the time
engine.sim.cost.StepTimeModel predicts for it; the executor then either advances a virtual
clock by that much (``speedup`` 0: `bench simulate`, faster than real time) or sleeps until the
step's predicted end divided by ``speedup`` (real time at 1, for `bench serve --device sim`, so
the server streams as a real engine would). Tokens come from a seeded generator (a request's own
seed when it has one); the scheduler applies max_tokens, EOS (unless ignore_eos) and stop token
ids to them exactly as to a model's. Speculative decoding keeps its bookkeeping: the proposer
drafts k tokens, the executor accepts each in turn with the stated probability (a seeded
Bernoulli, stopping at the first rejection) and adds one token of its own, as a verifier does.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from engine.config import SpeculativeSettings
from engine.core.request import Request
from engine.core.scheduler import SchedulerOutput
from engine.core.speculation import SpecStats
from engine.sim.cost import StepTime, StepTimeModel
from perfmodel.roofline import Batch


class VirtualClock:
    """Simulated time in integer nanoseconds; it only moves forward."""

    def __init__(self, start_ns: int = 0) -> None:
        self._now_ns = int(start_ns)

    def now_ns(self) -> int:
        return self._now_ns

    def advance(self, duration_ns: int) -> None:
        self._now_ns += max(0, int(duration_ns))

    def advance_to(self, t_ns: int) -> None:
        """Jump to ``t_ns`` (an idle engine waiting for its next request); never backwards."""
        self._now_ns = max(self._now_ns, int(t_ns))


class RealTimePacer:
    """Sleeps until each step's predicted end, ``speedup`` times faster than predicted.

    Back-to-back steps are chained (each ends one predicted step after the previous end), so the
    engine's own scheduling time between steps is absorbed by the modelled overhead
    (``overhead_s``) instead of being paid twice; after an idle spell a step starts when it is
    entered.
    """

    def __init__(self, speedup: float) -> None:
        if speedup <= 0:
            raise ValueError(f"a real-time pacer needs speedup > 0, got {speedup}")
        self.speedup = speedup
        self._deadline_ns = 0

    def wait(self, entry_ns: int, step_s: float, overhead_s: float) -> None:
        step_ns = step_s / self.speedup * 1e9
        slack_ns = min(overhead_s, step_s) / self.speedup * 1e9
        deadline = max(self._deadline_ns + step_ns, entry_ns + step_ns - slack_ns)
        self._deadline_ns = int(deadline)
        remaining_s = (self._deadline_ns - time.perf_counter_ns()) / 1e9
        if remaining_s > 0:
            time.sleep(remaining_s)


class SimProposer:
    """Drafts ``k`` seeded random tokens for every ready request; what is accepted is decided by
    the executor's acceptance rate, not by the tokens. ``writes_lookahead``: the draft writes K/V
    ahead of the request's tokens (a draft model), so the scheduler reserves those slots."""

    def __init__(self, k: int, vocab_size: int, rng: np.random.Generator, writes_lookahead: bool):
        self.k = k
        self.vocab_size = vocab_size
        self.rng = rng
        self.writes_lookahead = writes_lookahead

    def propose(self, requests: list[Request], block_tables: dict[str, list[int]]) -> None:
        if not requests:
            return
        drafts = self.rng.integers(0, self.vocab_size, size=(len(requests), self.k)).tolist()
        for req, draft in zip(requests, drafts, strict=True):
            req.spec_token_ids = draft
            req.spec_draft_probs = None


class SimExecutor:
    """Implements engine.core.executor.Executor on a simulated device (module docstring).

    ``num_kv_blocks`` is the simulated device's KV capacity in blocks (engine.sim.setup sizes
    it as `bench capacity` does). ``speedup`` 0 runs on the virtual clock ``clock``; above 0 in
    real time. ``acceptance_rate`` is the probability that each draft token is accepted.
    ``kv_cache_dtype`` None: the engine's activation dtype.
    """

    # The device loads no weights (the modelled ones are in describe()) and runs no kernels.
    weight_bytes = None
    native_decode = False
    native_custom_ops = False

    def __init__(
        self,
        time_model: StepTimeModel,
        num_kv_blocks: int,
        vocab_size: int,
        seed: int = 0,
        speedup: float = 1.0,
        acceptance_rate: float | None = None,
        kv_cache_dtype: torch.dtype | None = None,
        info: dict[str, Any] | None = None,
    ) -> None:
        if num_kv_blocks < 1:
            raise ValueError(f"the simulated device holds no KV block ({num_kv_blocks})")
        if speedup < 0:
            raise ValueError(f"speedup must be >= 0 (0: virtual time), got {speedup}")
        if acceptance_rate is not None and not 0.0 <= acceptance_rate <= 1.0:
            raise ValueError(f"acceptance_rate must be in [0, 1], got {acceptance_rate}")
        self.time_model = time_model
        self._num_blocks = num_kv_blocks
        self.vocab_size = vocab_size
        self.speedup = speedup
        self.acceptance_rate = acceptance_rate
        self.kv_cache_dtype = kv_cache_dtype
        self.info = info or {}
        self.clock = VirtualClock()
        self.pacer = RealTimePacer(speedup) if speedup > 0 else None
        seeds = np.random.SeedSequence(seed).spawn(3)
        self._token_rng, self._accept_rng, self._draft_rng = (
            np.random.default_rng(s) for s in seeds
        )
        self.spec_stats = SpecStats()
        self.proposer: SimProposer | None = None
        self.last_step: StepTime | None = None
        self.predicted_s_total = 0.0  # predicted time of every step so far, s
        self.draft_s_total = 0.0  # of which the draft model's, s

    @property
    def num_kv_blocks(self) -> int:
        return self._num_blocks

    @property
    def replayed_graph(self) -> bool:
        """False: the simulated device captures no CUDA graphs."""
        return False

    def clock_ns(self) -> int:
        """The virtual clock (``speedup`` 0), else real time (time.perf_counter_ns)."""
        return time.perf_counter_ns() if self.pacer is not None else self.clock.now_ns()

    def make_proposer(self, settings: SpeculativeSettings) -> SimProposer:
        """The proposer of this device's speculative decoding (needs an acceptance rate)."""
        if self.acceptance_rate is None:
            raise ValueError(
                "speculative decoding on the simulated device needs a stated acceptance rate: "
                "set sim_acceptance_rate (0..1)"
            )
        self.proposer = SimProposer(
            settings.num_speculative_tokens,
            self.vocab_size,
            self._draft_rng,
            writes_lookahead=settings.method == "draft",
        )
        return self.proposer

    def execute_model(
        self, scheduler_output: SchedulerOutput, block_tables: dict[str, list[int]]
    ) -> dict[str, list[int]]:
        if scheduler_output.is_empty:
            return {}
        entry_ns = self.clock_ns()
        step = self.predict(scheduler_output)
        self.last_step = step
        self.predicted_s_total += step.total_s
        self.draft_s_total += step.draft_s
        out = self._sample(scheduler_output)
        if self.pacer is None:
            self.clock.advance(round(step.total_s * 1e9))
        else:
            self.pacer.wait(entry_ns, step.total_s, step.overhead_s)
        return out

    def predict(self, scheduler_output: SchedulerOutput) -> StepTime:
        """The predicted time of the scheduled batch (before the scheduler's update)."""
        tokens = seqs = logits = cached = pairs = 0
        draft_seqs = draft_context = 0
        for s in scheduler_output.scheduled:
            q = s.num_new_tokens
            c = s.request.num_computed_tokens + q
            tokens, seqs, cached = tokens + q, seqs + 1, cached + c - q
            pairs += q * c - q * (q - 1) // 2
            if s.samples:
                logits += 1 + len(s.spec_token_ids)
            if s.spec_token_ids:
                draft_seqs += 1
                draft_context += c
        k = self.proposer.k if self.proposer is not None else 0
        return self.time_model.predict(
            Batch(tokens, seqs, logits, cached, pairs),
            num_draft_seqs=draft_seqs,
            draft_tokens=k,
            draft_context=draft_context // max(1, draft_seqs),
        )

    def _sample(self, scheduler_output: SchedulerOutput) -> dict[str, list[int]]:
        sampling = [s for s in scheduler_output.scheduled if s.samples]
        unseeded = [s for s in sampling if s.request.generator is None]
        draws = iter(self._token_rng.integers(0, self.vocab_size, size=len(unseeded)).tolist())
        out: dict[str, list[int]] = {}
        for s in sampling:
            req = s.request
            if req.generator is None:
                token = next(draws)
            else:
                token = int(torch.randint(self.vocab_size, (1,), generator=req.generator))
            accepted = self._accept(len(s.spec_token_ids)) if s.spec_token_ids else 0
            out[req.request_id] = [*s.spec_token_ids[:accepted], token]
        return out

    def _accept(self, num_drafts: int) -> int:
        """Drafts accepted in a row before the first rejection; recorded in spec_stats."""
        assert self.acceptance_rate is not None
        hits = self._accept_rng.random(num_drafts) < self.acceptance_rate
        accepted = int(np.argmin(hits)) if not hits.all() else num_drafts
        self.spec_stats.record(num_drafts, accepted)
        return accepted

    def embed(self, prompts: list[list[int]]) -> list[list[float]]:
        """Refused: the simulated device holds no weights, so it has no hidden states."""
        raise ValueError(
            "the simulated device holds no weights, so it has no embeddings; serve a real "
            "model (a preset on device cpu or cuda) for /v1/embeddings"
        )

    def describe(self) -> dict[str, Any]:
        """JSON-safe: the device, its time model, KV capacity and clock mode."""
        return {
            **self.info,
            "time": "virtual" if self.pacer is None else "real",
            "speedup": self.speedup,
            "acceptance_rate": self.acceptance_rate,
            "num_kv_blocks": self._num_blocks,
            "time_model": self.time_model.describe(),
            "predicted_s_total": self.predicted_s_total,
            "draft_s_total": self.draft_s_total,
        }
