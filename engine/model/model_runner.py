"""The torch executor: turns a scheduled batch into tensors, runs the model, samples.

Sequences are laid out decodes first (one query token each, attended in one batched op), then
prefill chunks. KV memory is allocated here, once, from the engine's memory budget.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from engine.config import SpeculativeSettings
from engine.core.scheduler import ScheduledRequest, SchedulerOutput
from engine.core.speculation import SpecStats
from engine.model.attention import AttentionMetadata
from engine.model.decode_stack import DecodeStack, why_not
from engine.model.kv_dtype import allocate_kv_caches
from engine.model.llama import LlamaForCausalLM
from engine.model.quant import weight_bytes
from engine.model.rejection_sampler import greedy_verify, rejection_sample
from engine.model.sampler import Sampler, processed_probs
from engine.model.spec_decode import DraftModelProposer, ModelProposer, NgramProposer
from engine.model.weights import load_model, load_model_spec
from perfmodel.model_config import ModelConfig

# KV cache memory on a CPU when kv_cache_memory_bytes is unset (the simulated CPU uses it too).
CPU_KV_DEFAULT_BYTES = 512 * 1024**2
_GPU_KV_FRACTION = 0.9


def kv_bytes_per_block(config: ModelConfig, block_size: int, dtype: torch.dtype) -> int:
    """Bytes of K and V for ``block_size`` tokens across all layers."""
    elem = torch.empty((), dtype=dtype).element_size()
    per_token = 2 * config.num_hidden_layers * config.num_key_value_heads * config.head_dim * elem
    return per_token * block_size


def num_kv_blocks_for(
    config: ModelConfig,
    block_size: int,
    dtype: torch.dtype,
    device: torch.device,
    kv_cache_memory_bytes: int | None,
) -> int:
    """How many blocks fit in the KV budget: the given bytes, else the device's default."""
    if kv_cache_memory_bytes is None:
        if device.type == "cuda":
            free_bytes, _ = torch.cuda.mem_get_info(device)
            kv_cache_memory_bytes = int(free_bytes * _GPU_KV_FRACTION)
        else:
            kv_cache_memory_bytes = CPU_KV_DEFAULT_BYTES
    n = kv_cache_memory_bytes // kv_bytes_per_block(config, block_size, dtype)
    if n < 1:
        raise ValueError(
            f"kv_cache_memory_bytes={kv_cache_memory_bytes} holds no block of {block_size} "
            f"tokens ({kv_bytes_per_block(config, block_size, dtype)} bytes); raise it"
        )
    return int(n)


class ModelRunner:
    """Implements engine.core.executor.Executor with a LlamaForCausalLM, in real time.

    Its proposers are the model's (n-gram lookup or a draft model): ``make_proposer`` builds
    one, which then sees every forward (ModelProposer.observe).
    """

    def __init__(
        self,
        model: LlamaForCausalLM,
        config: ModelConfig,
        block_size: int,
        num_blocks: int,
        dtype: torch.dtype,
        device: torch.device,
        seed: int = 0,
        kv_cache_dtype: torch.dtype | None = None,
        native_decode: bool = False,
        naive_attention: bool = False,
    ) -> None:
        self.model = model
        self.config = config
        self.block_size = block_size
        self.device = device
        self.seed = seed
        self.dtype = dtype
        self._num_blocks = num_blocks
        # Decode attention in the C kernel (engine/native/attention.py), as the engine decided.
        self.native_decode = native_decode
        self.naive_attention = naive_attention
        self.kv_cache_dtype = kv_cache_dtype or dtype
        self.kv_caches = allocate_kv_caches(
            config.num_hidden_layers,
            num_blocks,
            block_size,
            config.num_key_value_heads,
            config.head_dim,
            self.kv_cache_dtype,
            device,
        )
        # Pure decode steps of 1..4 sequences run the whole stack in one C call where the
        # native kernels run both attention and the custom ops (engine/model/decode_stack.py).
        self.decode_stack: DecodeStack | None = None
        if native_decode and model.native_ops and why_not(model, self.kv_caches) is None:
            self.decode_stack = DecodeStack(model, self.kv_caches)
        self.sampler = Sampler(seed)
        self.weight_bytes = weight_bytes(model)
        # Set by make_proposer when speculative decoding is on.
        self.proposer: ModelProposer | None = None
        self.spec_stats = SpecStats()

    @property
    def num_kv_blocks(self) -> int:
        return self._num_blocks

    @property
    def native_custom_ops(self) -> bool:
        return self.model.native_ops

    def clock_ns(self) -> int:
        """Real time: time.perf_counter_ns."""
        return time.perf_counter_ns()

    def make_proposer(self, settings: SpeculativeSettings) -> ModelProposer:
        """The model's proposer (class docstring): n-gram lookup in each request's own tokens,
        or a draft model, another preset or directory (``draft_model``) or this model's first
        ``draft_num_layers`` layers. From then on it sees every forward."""
        n = settings.num_speculative_tokens
        proposer: ModelProposer
        if settings.method == "ngram":
            proposer = NgramProposer(n, settings.prompt_lookup_min, settings.prompt_lookup_max)
        elif settings.method == "draft":
            draft = None
            if settings.draft_model is not None:
                draft_config, draft_dir = load_model_spec(settings.draft_model)
                draft = load_model(draft_config, draft_dir, self.dtype, self.device, self.seed + 1)
            proposer = DraftModelProposer(
                self.model, n, self.block_size, self.kv_caches,
                draft=draft, num_layers=settings.draft_num_layers,
            )  # fmt: skip
        else:
            raise ValueError(f"speculative={settings.method!r} has no proposer; use ngram or draft")
        self.proposer = proposer
        return proposer

    def describe(self) -> dict[str, Any] | None:
        """None: a real device, which the engine describes itself."""
        return None

    @torch.inference_mode()
    def execute_model(
        self, scheduler_output: SchedulerOutput, block_tables: dict[str, list[int]]
    ) -> dict[str, list[int]]:
        if scheduler_output.is_empty:
            return {}
        seqs = _decodes_first(scheduler_output.scheduled)
        input_ids, positions, meta = self._prepare(seqs, block_tables)
        stack = self.decode_stack
        if stack is not None and stack.covers(input_ids, meta):
            hidden = stack(input_ids, positions, meta)
        else:
            hidden = self.model(input_ids, positions, self.kv_caches, meta)
        if self.proposer is not None:
            self.proposer.observe(input_ids, positions, meta)
        sampling = [i for i, s in enumerate(seqs) if s.samples]
        if not sampling:
            return {}
        # Logit rows: the last position of each sampling sequence, every position of one that
        # verifies drafts (the target's choice after the last token and after each draft).
        qsl = meta.query_start_loc
        rows: list[int] = []
        for i in sampling:
            first = qsl[i + 1] - 1 - len(seqs[i].spec_token_ids)
            rows.extend(range(first, qsl[i + 1]))
        logits = self.model.compute_logits(hidden[torch.tensor(rows, device=self.device)])
        logits = logits.float().cpu()
        plain = [i for i in sampling if not seqs[i].spec_token_ids]
        out: dict[str, list[int]] = {}
        offset, plain_rows = 0, []
        for i in sampling:
            n = 1 + len(seqs[i].spec_token_ids)
            if seqs[i].spec_token_ids:
                out[seqs[i].request.request_id] = self._verify(seqs[i], logits[offset : offset + n])
            else:
                plain_rows.append(offset)
            offset += n
        if plain:
            reqs = [seqs[i].request for i in plain]
            tokens = self.sampler.sample(
                logits[plain_rows], [r.sampling_params for r in reqs], [r.generator for r in reqs]
            )
            for r, t in zip(reqs, tokens, strict=True):
                out[r.request_id] = [t]
        return out

    def _verify(self, s: ScheduledRequest, logits: torch.Tensor) -> list[int]:
        """Accepted draft tokens plus one: greedy by exact match, else rejection sampling."""
        req, draft = s.request, s.spec_token_ids
        params = req.sampling_params
        if params.greedy:
            tokens = greedy_verify(logits.argmax(dim=-1).tolist(), draft)
        else:
            q = req.spec_draft_probs
            q = None if q is None else q[: len(draft)]
            p = processed_probs(logits, [params] * logits.shape[0])
            tokens = rejection_sample(p, draft, q, req.generator or self.sampler.generator)
        self.spec_stats.record(len(draft), len(tokens) - 1)
        return tokens

    def _prepare(
        self, seqs: list[ScheduledRequest], block_tables: dict[str, list[int]]
    ) -> tuple[torch.Tensor, torch.Tensor, AttentionMetadata]:
        num_seqs = len(seqs)
        query_start_loc = [0] * (num_seqs + 1)
        seq_lens = [0] * num_seqs
        token_ids: list[int] = []
        starts = np.empty(num_seqs, dtype=np.int64)
        tables = [block_tables[s.request.request_id] for s in seqs]
        max_blocks = max(len(t) for t in tables)
        table_np = np.zeros((num_seqs, max_blocks), dtype=np.int64)
        num_decode = 0
        for i, s in enumerate(seqs):
            start = s.request.num_computed_tokens
            end = start + s.num_new_tokens
            if s.num_new_tokens == 1:
                num_decode += 1
                token_ids.append(s.request.all_token_ids[start])
            elif s.spec_token_ids:
                token_ids.append(s.request.all_token_ids[start])
                token_ids.extend(s.spec_token_ids)
            else:
                token_ids.extend(s.request.all_token_ids[start:end])
            starts[i] = start
            seq_lens[i] = end
            query_start_loc[i + 1] = query_start_loc[i] + s.num_new_tokens
            table_np[i, : len(tables[i])] = tables[i]

        # Positions and slots for all tokens without a Python loop over tokens: each token's
        # offset inside its sequence's chunk, plus the chunk's start.
        q_lens = np.diff(np.asarray(query_start_loc, dtype=np.int64))
        seq_index = np.repeat(np.arange(num_seqs), q_lens)
        offset_in_chunk = np.arange(query_start_loc[-1]) - np.repeat(query_start_loc[:-1], q_lens)
        positions_np = starts[seq_index] + offset_in_chunk
        blocks = table_np[seq_index, positions_np // self.block_size]
        slots_np = blocks * self.block_size + positions_np % self.block_size

        dev = self.device
        meta = AttentionMetadata(
            slot_mapping=torch.from_numpy(slots_np).to(dev),
            query_start_loc=query_start_loc,
            seq_lens=seq_lens,
            seq_lens_t=torch.tensor(seq_lens, dtype=torch.int64, device=dev),
            block_tables=torch.from_numpy(table_np).to(dev),
            num_decode_seqs=num_decode,
            block_size=self.block_size,
            native_decode=self.native_decode,
            naive=self.naive_attention,
        )
        input_ids = torch.tensor(token_ids, dtype=torch.int64, device=dev)
        return input_ids, torch.from_numpy(positions_np).to(dev), meta


def _decodes_first(scheduled: list[ScheduledRequest]) -> list[ScheduledRequest]:
    decodes = [s for s in scheduled if s.num_new_tokens == 1]
    if len(decodes) == len(scheduled):
        return scheduled
    return decodes + [s for s in scheduled if s.num_new_tokens != 1]
