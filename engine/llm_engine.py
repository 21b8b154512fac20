"""LLMEngine: one ``step()`` = schedule, execute, update.

Synchronous and single-threaded by design; the async front (engine.serving.async_engine) runs it
in a background thread for the server, and tests drive it directly.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from engine.config import EngineConfig
from engine.core.block_pool import BlockPool
from engine.core.executor import Executor
from engine.core.kv_cache_manager import KVCacheManager
from engine.core.request import Request, SamplingParams
from engine.core.scheduler import Scheduler, SchedulerOutput
from engine.core.speculation import Proposer, SpecStats
from engine.core.telemetry import NvtxRanges, StepRecorder, step_phase
from engine.model.checkpoints.load import load_quantized_model
from engine.model.kv_dtype import is_fp8, resolve_kv_cache_dtype
from engine.model.model_runner import (
    ModelRunner,
    kv_bytes_per_block,
    load_draft_model,
    num_kv_blocks_for,
)
from engine.model.quantization.quantize import QuantReport
from engine.model.weights import load_model_spec
from engine.native import attention as native_attention
from engine.native import lib as native_lib
from engine.native.cpu_features import has_native_bf16
from engine.sim.setup import build_sim_executor
from engine.tokenizer.for_model import tokenizer_for_model
from engine.tokenizer.tokenizer import Tokenizer
from perfmodel.model_config import ModelConfig
from perfmodel.presets import PRESETS

log = logging.getLogger(__name__)

# A step with at least this many prefill tokens per decode token is a burst of arrivals.
# Measured at 100 users, three runs each side: TTFT p99 913 ms mean against 1,043 ms, with
# the same throughput. The earlier "more prefill than decode" cut cost 5% of throughput: it
# also fired on steady-state steps, while the front was busy.
BURST_PREFILL_RATIO = 4


@dataclass(frozen=True)
class RequestOutput:
    """What one step did for one request: its new tokens, and whether it finished."""

    request_id: str
    new_token_ids: list[int]
    num_prompt_tokens: int
    num_output_tokens: int
    finished: bool
    finish_reason: str | None
    # Prompt tokens the prefix cache held when the request was first scheduled.
    num_cached_tokens: int = 0


@dataclass(frozen=True)
class StepStats:
    """The engine's state after a step, for /metrics and logs (counts, not rates)."""

    num_running: int
    num_waiting: int
    kv_cache_usage: float
    num_prefill_tokens: int
    num_decode_tokens: int
    num_generated_tokens: int
    num_preemptions_total: int
    step_s: float
    # Cumulative counters (tokens for the prefix cache, as vLLM's).
    prefix_cache_queries_total: int = 0
    prefix_cache_hits_total: int = 0
    spec_num_drafts_total: int = 0
    spec_num_draft_tokens_total: int = 0
    spec_num_accepted_tokens_total: int = 0
    spec_accepted_per_position_total: tuple[int, ...] = ()


def spin_cpu(seconds: float) -> None:
    """Busy-wait until this thread has spent ``seconds`` more of CPU time (step_spin_ms): work
    that costs the same CPU seconds however loaded the machine is, and more wall time when the
    thread waits for a core."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def resolve_dtype(
    name: str, device: torch.device, checkpoint_dtype: str = "float32"
) -> torch.dtype:
    """The activation dtype. "auto" is bfloat16 on CUDA; on a CPU it is the checkpoint's
    bfloat16 where the CPU computes bfloat16 natively (cpu_features.has_native_bf16), else
    float32, since emulated bfloat16 matmuls are slower than float32 ones."""
    if name != "auto":
        return getattr(torch, name)
    if device.type == "cuda":
        return torch.bfloat16
    if checkpoint_dtype == "bfloat16" and has_native_bf16():
        return torch.bfloat16
    return torch.float32


def load_tokenizer(model: str, config: ModelConfig) -> Tokenizer:
    """The tokenizer of ``model`` (a preset or directory) whose shape is ``config``
    (engine.tokenizer.for_model: its tokenizer.json, else a synthetic one of its vocabulary)."""
    return tokenizer_for_model(model, config.vocab_size, is_preset=model in PRESETS)


def check_request_fits(
    num_prompt_tokens: int, params: SamplingParams, max_model_len: int, kv_capacity_tokens: int
) -> None:
    """Raise ValueError, naming the limit and the fix, if a request of ``num_prompt_tokens``
    and ``params.max_tokens`` could never run on an engine with these limits (tokens)."""
    n, total = num_prompt_tokens, num_prompt_tokens + params.max_tokens
    if n == 0:
        raise ValueError("the prompt is empty; send at least one token")
    if total > max_model_len:
        raise ValueError(
            f"this model's maximum context length is {max_model_len} tokens, but {total} were "
            f"requested ({n} in the prompt, {params.max_tokens} in max_tokens); shorten the "
            "prompt or lower max_tokens"
        )
    if total > kv_capacity_tokens:
        raise ValueError(
            f"the KV cache holds {kv_capacity_tokens} tokens, fewer than this request needs "
            f"({total}); raise kv_cache_memory_bytes"
        )


class LLMEngine:
    def __init__(self, config: EngineConfig, executor: Executor | None = None) -> None:
        self.config = config
        m, cache, sched = config.model, config.cache, config.scheduler
        if config.parallel.num_threads:
            torch.set_num_threads(config.parallel.num_threads)
        self._threads = torch.get_num_threads()
        self.simulated = m.device == "sim"
        self.model_config, weights_dir = load_model_spec(m.model, self.simulated)
        self.tokenizer = load_tokenizer(m.model, self.model_config)
        self.device = torch.device("cpu") if self.simulated else resolve_device(m.device)
        if self.simulated and m.dtype == "auto":
            self.dtype = getattr(torch, self.model_config.dtype)  # the checkpoint's dtype
        else:
            self.dtype = resolve_dtype(m.dtype, self.device, self.model_config.dtype)
        self.max_model_len = min(
            m.max_model_len or self.model_config.max_position_embeddings,
            self.model_config.max_position_embeddings,
        )
        if config.kernels.cuda_graphs is True and self.device.type != "cuda":
            where = "the simulated device" if self.simulated else str(self.device)
            raise ValueError(
                f"cuda_graphs needs a CUDA device, but the engine runs on {where}; "
                "set cuda_graphs to false (drop --cuda-graphs)"
            )
        self.quant_report: QuantReport | None = None
        # Whether pure decode steps replay CUDA graphs (_cuda_graphs), set with the runner.
        self.cuda_graphs = False
        if executor is None and self.simulated:
            executor = build_sim_executor(config, self.model_config, self.dtype)
        elif executor is None:
            executor = self._build_model_runner(weights_dir)
        self.executor = executor
        # The simulated device may keep virtual time; the torch executor runs in real time.
        self.clock_ns: Callable[[], int] = executor.clock_ns
        self.kv_cache_dtype = executor.kv_cache_dtype or self.dtype
        self.weight_bytes = executor.weight_bytes
        self.proposer = self._make_proposer(executor)
        self.block_pool = BlockPool(
            executor.num_kv_blocks, cache.block_size, enable_caching=cache.prefix_caching
        )
        self.kv_cache_manager = KVCacheManager(self.block_pool, cache.kv_layout, self.max_model_len)
        self.scheduler = Scheduler(
            self.kv_cache_manager,
            sched.max_num_seqs,
            sched.max_num_batched_tokens,
            self.max_model_len,
            sched.enable_chunked_prefill,
            sched.batching,
            num_lookahead_tokens=config.speculative.num_speculative_tokens
            if self.proposer is not None and self.proposer.writes_lookahead
            else 0,
            reuse_kv=cache.kv_cache,
        )
        eos = self.model_config.eos_token_ids or self.tokenizer.eos_token_ids
        self.eos_token_ids = tuple(eos)
        self.last_stats: StepStats | None = None
        self.steps = StepRecorder()
        self.nvtx = NvtxRanges()

    def _build_model_runner(self, weights_dir: Path | None) -> ModelRunner:
        """The torch executor: the model (quantized as config.model says, with its report in
        ``self.quant_report``), the draft model if any, and a KV cache sized for both."""
        config = self.config
        m, cache, sched = config.model, config.cache, config.scheduler
        model, self.quant_report = load_quantized_model(
            self.model_config, weights_dir, self.dtype, self.device, m.seed,
            m.quantization, m.quant_group_size,
        )  # fmt: skip
        model.use_custom_ops(self._native_custom_ops())
        # The draft first: the KV cache is then sized for both models' blocks.
        draft = load_draft_model(config.speculative, self.dtype, self.device, m.seed)
        draft_block_bytes = 0
        if draft is not None:
            draft_dtype = next(draft.parameters()).dtype
            draft_block_bytes = kv_bytes_per_block(draft.config, cache.block_size, draft_dtype)
        if self.device.type == "cuda":
            torch.cuda.empty_cache()  # so that mem_get_info sees the float weights freed
        kv_dtype = resolve_kv_cache_dtype(cache.kv_cache_dtype, self.dtype)
        num_blocks = num_kv_blocks_for(
            self.model_config,
            cache.block_size,
            kv_dtype,
            self.device,
            cache.kv_cache_memory_bytes,
            draft_block_bytes,
        )
        self.cuda_graphs = self._cuda_graphs(kv_dtype, num_blocks)
        return ModelRunner(
            model,
            self.model_config,
            cache.block_size,
            num_blocks,
            self.dtype,
            self.device,
            m.seed,
            kv_cache_dtype=kv_dtype,
            native_decode=self._native_decode(kv_dtype),
            draft_model=draft,
            cuda_graphs=self.cuda_graphs,
            max_num_seqs=sched.max_num_seqs,
            max_model_len=self.max_model_len,
            naive_attention=config.kernels.attention_backend == "naive",
        )

    def _cuda_graphs(self, kv_dtype: torch.dtype, num_blocks: int) -> bool:
        """config.kernels.cuda_graphs resolved: as set, or by default on for a CUDA device
        whose KV cache is of the model's dtype (an fp8 cache's write cannot be captured) and
        has a block to spare for the padding rows; off elsewhere."""
        choice = self.config.kernels.cuda_graphs
        if choice is not None:
            return choice
        return self.device.type == "cuda" and not is_fp8(kv_dtype) and num_blocks >= 2

    def _native_decode(self, kv_dtype: torch.dtype) -> bool:
        """Whether decode attention runs in the C kernel (config.kernels.attention_backend)."""
        covered = native_attention.supports_dtypes(self.device, self.dtype, kv_dtype)
        return self._use_native(
            "attention_backend",
            None if covered else (
                f"it covers CPU float32/bfloat16 with a cache of the same dtype, not "
                f"{self.device} {self.dtype} with a {kv_dtype} cache"
            ),
        )  # fmt: skip

    def _native_custom_ops(self) -> bool:
        """Whether small-batch linear layers and add + RMSNorm run in the C kernels
        (config.kernels.custom_ops). Quantized layers keep their own kernels either way."""
        covered = self.device.type == "cpu" and self.dtype in native_lib.SUFFIX
        return self._use_native(
            "custom_ops",
            None if covered else f"it covers CPU float32/bfloat16, not {self.device} {self.dtype}",
        )

    def _use_native(self, setting: str, not_covered: str | None) -> bool:
        """Resolve an auto / native / torch setting: native where the C kernels cover the
        tensors (else ``not_covered`` says why not) and build here; "native" that cannot run
        is a ValueError naming the reason, "auto" falls back to torch and logs it."""
        choice = getattr(self.config.kernels, setting)
        if choice in ("torch", "naive"):
            return False
        why = not_covered or native_lib.available()
        if why is None:
            return True
        if choice == "native":
            raise ValueError(f"{setting}='native' cannot run here: {why}; use 'torch'")
        log.info("%s on the torch path: %s", setting, why)
        return False

    def _attention_backend(self) -> str:
        """The attention that runs, with auto resolved: native, torch or naive."""
        if self.executor.native_decode:
            return "native"
        return "naive" if self.config.kernels.attention_backend == "naive" else "torch"

    def _make_proposer(self, executor: Executor) -> Proposer | None:
        c = self.config.speculative
        return None if c.method == "off" else executor.make_proposer(c)

    @property
    def spec_stats(self) -> SpecStats:
        return self.executor.spec_stats

    @property
    def served_model_name(self) -> str:
        return self.config.model.served_model_name or Path(self.config.model.model).name

    @property
    def max_tokens_capacity(self) -> int:
        """Tokens the KV cache can hold across all requests."""
        return self.block_pool.num_blocks * self.block_pool.block_size

    def describe(self) -> dict[str, Any]:
        """Settings, model shape, resolved dtype and device, and KV capacity (JSON-safe)."""
        return {
            "engine_config": self.config.to_flat(),
            "model_config": self.model_config.to_dict(),
            "served_model_name": self.served_model_name,
            "dtype": str(self.dtype).removeprefix("torch."),
            "device": "sim" if self.simulated else str(self.device),
            "max_model_len": self.max_model_len,
            "block_size": self.block_pool.block_size,
            "num_kv_blocks": self.block_pool.num_blocks,
            "kv_capacity_tokens": self.max_tokens_capacity,
            "kv_bytes_per_token": self.model_config.kv_bytes_per_token(
                torch.empty((), dtype=self.kv_cache_dtype).element_size()
            ),
            "kv_cache_dtype": str(self.kv_cache_dtype).removeprefix("torch."),
            "attention_backend": self._attention_backend(),
            "custom_ops": "native" if self.executor.native_custom_ops else "torch",
            "cuda_graphs": self.cuda_graphs,
            "prefix_caching": self.config.cache.prefix_caching,
            "weight_bytes": self.weight_bytes,
            "quantization": self.quant_report.to_dict() if self.quant_report else None,
            "simulated": self.executor.describe(),
            "stats": self.stats(),
        }

    def check_request(self, num_prompt_tokens: int, params: SamplingParams) -> None:
        """Raise ValueError, naming the limit and the fix, if a request could never run.

        Pure (reads only settings), so the server can call it from its own thread.
        """
        check_request_fits(num_prompt_tokens, params, self.max_model_len, self.max_tokens_capacity)

    def add_request(
        self, request_id: str, prompt_token_ids: list[int], params: SamplingParams
    ) -> None:
        """Queue a request. Raises ValueError when it cannot fit the context or the KV cache."""
        self.check_request(len(prompt_token_ids), params)
        request = Request(
            request_id, list(prompt_token_ids), params, self.eos_token_ids, self.clock_ns() / 1e9
        )
        self.scheduler.add_request(request)

    def abort_request(self, request_id: str) -> bool:
        return self.scheduler.abort(request_id) is not None

    def reset_prefix_cache(self) -> bool:
        """Empty the prefix cache (BlockPool.reset_prefix_cache); False while requests run."""
        if self.has_unfinished_requests():
            return False
        return self.block_pool.reset_prefix_cache()

    def embed(self, prompts: list[list[int]]) -> list[list[float]]:
        """Each prompt's embedding (Executor.embed: mean-pooled final hidden states, L2-normed),
        between steps. Raises ValueError for a prompt past ``max_model_len`` or an executor
        without weights (the simulated device)."""
        for i, prompt in enumerate(prompts):
            if len(prompt) > self.max_model_len:
                raise ValueError(
                    f"input {i} has {len(prompt)} tokens, more than the model's context of "
                    f"{self.max_model_len}; send a shorter input"
                )
        return self.executor.embed(prompts)

    def has_unfinished_requests(self) -> bool:
        return self.scheduler.num_unfinished > 0

    def step(self) -> list[RequestOutput]:
        nvtx_ranges = self.nvtx
        clock_ns = self.clock_ns
        start_ns = clock_ns()
        with nvtx_ranges.range("step", self.steps.num_steps):
            with nvtx_ranges.range("schedule"):
                sched = self.scheduler.schedule()
            self._set_threads(sched)
            forward_start_ns = clock_ns()
            # An empty step computes nothing: no phase range.
            phase = (
                nullcontext()
                if sched.is_empty
                else nvtx_ranges.range(
                    *step_phase(sched.num_prefill_tokens, sched.num_decode_tokens)
                )
            )
            with nvtx_ranges.range("execute", sched.total_num_tokens), phase:
                sampled = self.executor.execute_model(sched, self.kv_cache_manager.block_tables)
            forward_ns = clock_ns() - forward_start_ns
            delay_ms = self.config.scheduler.step_delay_ms
            if delay_ms and not sched.is_empty:
                time.sleep(delay_ms / 1000)
            spin_ms = self.config.scheduler.step_spin_ms
            if spin_ms and not sched.is_empty:
                spin_cpu(spin_ms / 1000)
            composition = self._composition(sched)
            with nvtx_ranges.range("update"):
                updates = self.scheduler.update_from_output(sched, sampled)
            if self.proposer is not None:
                with nvtx_ranges.range("propose"):
                    self._propose()
        outputs = [
            RequestOutput(
                req.request_id,
                tokens,
                req.num_prompt_tokens,
                req.num_output_tokens,
                req.status.is_finished,
                req.status.finish_reason,
                req.num_cached_tokens,
            )
            for req, tokens in updates
        ]
        self.last_stats = StepStats(
            num_running=len(self.scheduler.running),
            num_waiting=len(self.scheduler.waiting),
            kv_cache_usage=self.block_pool.usage,
            num_prefill_tokens=sched.num_prefill_tokens,
            num_decode_tokens=sched.num_decode_tokens,
            num_generated_tokens=sum(len(t) for _, t in updates),
            num_preemptions_total=self.scheduler.num_preemptions_total,
            step_s=(clock_ns() - start_ns) / 1e9,
            prefix_cache_queries_total=self.kv_cache_manager.prefix_cache_queries,
            prefix_cache_hits_total=self.kv_cache_manager.prefix_cache_hits,
            **self._spec_counters(),
        )
        if not sched.is_empty:
            self._record_step(sched, composition, start_ns, forward_ns)
        return outputs

    def _set_threads(self, sched: SchedulerOutput) -> None:
        """config.parallel.prefill_num_threads for a burst step (see ParallelSettings),
        num_threads for the others; a switch costs about 5 us."""
        c = self.config.parallel
        if c.prefill_num_threads is None or c.num_threads is None:
            return
        burst = sched.num_prefill_tokens >= BURST_PREFILL_RATIO * max(sched.num_decode_tokens, 1)
        want = c.prefill_num_threads if burst else c.num_threads
        if want != self._threads:
            torch.set_num_threads(want)
            self._threads = want

    def _spec_counters(self) -> dict[str, Any]:
        spec = self.spec_stats
        return {
            "spec_num_drafts_total": spec.num_drafts,
            "spec_num_draft_tokens_total": spec.num_draft_tokens,
            "spec_num_accepted_tokens_total": spec.num_accepted_tokens,
            "spec_accepted_per_position_total": tuple(spec.accepted_per_position),
        }

    def stats(self) -> dict[str, Any]:
        """Cumulative counters since the engine started (JSON-safe): preemptions, prefix cache
        queries and hits (tokens), speculative drafts, draft and accepted tokens."""
        kv = self.kv_cache_manager
        spec = self.spec_stats
        return {
            "num_preemptions": self.scheduler.num_preemptions_total,
            "num_steps": self.steps.num_steps,
            "prefix_cache_queries": kv.prefix_cache_queries,
            "prefix_cache_hits": kv.prefix_cache_hits,
            "prefix_cache_evictions": self.block_pool.num_evictions,
            "spec_num_drafts": spec.num_drafts,
            "spec_num_draft_tokens": spec.num_draft_tokens,
            "spec_num_accepted_tokens": spec.num_accepted_tokens,
            "spec_accepted_per_position": list(spec.accepted_per_position),
        }

    def _propose(self) -> None:
        """Drafts for every running request now in decode, for the next step to verify."""
        assert self.proposer is not None
        k = self.config.speculative.num_speculative_tokens
        ready = [
            r
            for r in self.scheduler.running
            if r.num_output_tokens
            and r.num_computed_tokens == r.num_tokens - 1
            and r.num_tokens + k <= self.max_model_len
            and r.num_output_tokens + 1 < r.sampling_params.max_tokens
        ]
        self.proposer.propose(ready, self.kv_cache_manager.block_tables)

    @staticmethod
    def _composition(sched: SchedulerOutput) -> dict[str, int]:
        """The step's batch as the roofline model needs it, taken before the update moves the
        requests on: context lengths include the step's tokens, drafts included."""
        context = attn_pairs = decode_seqs = decode_context = 0
        for s in sched.scheduled:
            n = s.num_new_tokens
            ctx = s.request.num_computed_tokens + n
            context += ctx
            # Positions ctx-n .. ctx-1 attend to themselves and everything before them.
            attn_pairs += n * ctx - n * (n - 1) // 2
            if s.is_decode:
                decode_seqs += 1
                decode_context += ctx
        return {
            "num_seqs": len(sched.scheduled),
            "num_prefill_seqs": len(sched.scheduled) - decode_seqs,
            "num_decode_seqs": decode_seqs,
            "context_tokens": context,
            "decode_context_tokens": decode_context,
            "attn_pairs": attn_pairs,
        }

    def _kv_slots_used(self) -> int:
        """Physical KV slots holding tokens: the blocks in use less each request's unfilled
        slots (its partly filled tail, lookahead, or a contiguous reservation). Only full blocks
        are shared, so a block shared by several requests counts once."""
        bs = self.block_pool.block_size
        tables = self.kv_cache_manager.block_tables
        unfilled = sum(
            len(tables[r.request_id]) * bs - r.num_computed_tokens
            for r in self.scheduler.running
            if r.request_id in tables
        )
        return self.block_pool.num_used_blocks * bs - unfilled

    def _record_step(
        self, sched: SchedulerOutput, composition: dict[str, int], start_ns: int, forward_ns: int
    ) -> None:
        pool = self.block_pool
        self.steps.record(
            start_ns=start_ns,
            end_ns=self.clock_ns(),
            forward_ns=forward_ns,
            num_prefill_tokens=sched.num_prefill_tokens,
            num_decode_tokens=sched.num_decode_tokens,
            kv_blocks_used=pool.num_used_blocks,
            kv_slots_used=self._kv_slots_used(),
            kv_blocks_total=pool.num_blocks,
            num_running=len(self.scheduler.running),
            num_waiting=len(self.scheduler.waiting),
            num_preemptions=len(sched.preempted),
            cuda_graph=int(self.executor.replayed_graph),
            **composition,
        )

    def generate(
        self, prompts: list[list[int]], params: SamplingParams | list[SamplingParams]
    ) -> list[list[int]]:
        """Offline helper: run prompts to completion, return each one's output token ids."""
        per = params if isinstance(params, list) else [params] * len(prompts)
        ids = [f"gen-{i}-{time.perf_counter_ns()}" for i in range(len(prompts))]
        results: dict[str, list[int]] = {i: [] for i in ids}
        for rid, prompt, p in zip(ids, prompts, per, strict=True):
            self.add_request(rid, prompt, p)
        while self.has_unfinished_requests():
            for out in self.step():
                results[out.request_id].extend(out.new_token_ids)
        return [results[i] for i in ids]
