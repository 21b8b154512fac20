"""The torch executor: turns a scheduled batch into tensors, runs the model, samples.

Sequences are laid out decodes first (one query token each, attended in one batched op), then
prefill chunks. KV memory is allocated here, once, from the engine's memory budget.
"""

from __future__ import annotations

import itertools
import time
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from engine.config import SpeculativeSettings
from engine.core.scheduler import ScheduledRequest, SchedulerOutput
from engine.core.speculation import SpecStats
from engine.model.attention import AttentionMetadata
from engine.model.cuda_graphs import DecodeGraphs
from engine.model.decode_stack import DecodeStack, why_not
from engine.model.input_staging import InputStaging
from engine.model.kv_dtype import allocate_kv_caches, is_fp8
from engine.model.llama import LlamaForCausalLM
from engine.model.quantization.quantize import weight_bytes
from engine.model.rejection_sampler import greedy_verify, rejection_sample
from engine.model.sampler import Sampler, processed_probs
from engine.model.spec_decode import DraftModelProposer, ModelProposer, NgramProposer
from engine.model.step_timer import StepTimer
from engine.model.weights import load_model, load_model_spec
from perfmodel.capacity import kv_cache_budget_bytes, num_kv_blocks
from perfmodel.model_config import ModelConfig

# KV cache memory on a CPU when kv_cache_memory_bytes is unset (the simulated CPU uses it too).
CPU_KV_DEFAULT_BYTES = 512 * 1024**2


def kv_bytes_per_block(config: ModelConfig, block_size: int, dtype: torch.dtype) -> int:
    """Bytes of K and V for ``block_size`` tokens across all layers."""
    elem = torch.empty((), dtype=dtype).element_size()
    per_token = 2 * config.num_hidden_layers * config.num_key_value_heads * config.head_dim * elem
    return per_token * block_size


def load_draft_model(
    settings: SpeculativeSettings, dtype: torch.dtype, device: torch.device, seed: int
) -> LlamaForCausalLM | None:
    """The separate draft model speculation needs (method draft with ``draft_model``), else
    None. Loaded before the KV cache is sized, so that its weights are not counted as free
    memory and its own cache is planned (``num_kv_blocks_for``'s draft_bytes_per_block)."""
    if settings.method != "draft" or settings.draft_model is None:
        return None
    draft_config, draft_dir = load_model_spec(settings.draft_model)
    return load_model(draft_config, draft_dir, dtype, device, seed + 1)


def num_kv_blocks_for(
    config: ModelConfig,
    block_size: int,
    dtype: torch.dtype,
    device: torch.device,
    kv_cache_memory_bytes: int | None,
    draft_bytes_per_block: int = 0,
) -> int:
    """How many blocks fit in the KV budget: the given bytes, else the device's default (on
    CUDA perfmodel.capacity's one budget, from the memory free once the weights are loaded).

    ``draft_bytes_per_block``: what a separate draft model's cache takes per block of the same
    tokens (``kv_bytes_per_block`` of the draft); it keeps a block table parallel to the
    target's, so each block costs both (the draft is loaded before this is called)."""
    if kv_cache_memory_bytes is None:
        if device.type == "cuda":
            free_bytes, total_bytes = torch.cuda.mem_get_info(device)
            kv_cache_memory_bytes = int(kv_cache_budget_bytes(total_bytes, free_bytes))
        else:
            kv_cache_memory_bytes = CPU_KV_DEFAULT_BYTES
    per_block = kv_bytes_per_block(config, block_size, dtype) + draft_bytes_per_block
    n = num_kv_blocks(kv_cache_memory_bytes, per_block)
    if n < 1:
        raise ValueError(
            f"kv_cache_memory_bytes={kv_cache_memory_bytes} holds no block of {block_size} "
            f"tokens ({per_block} bytes, the draft's included); raise it"
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
        draft_model: LlamaForCausalLM | None = None,
        cuda_graphs: bool = False,
        max_num_seqs: int = 1,
        max_model_len: int | None = None,
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
        # Pure decode steps as CUDA graph replays (engine/model/cuda_graphs.py): padding rows
        # write into the last block, held back from the block pool.
        self.decode_graphs: DecodeGraphs | None = None
        if cuda_graphs:
            if is_fp8(self.kv_cache_dtype):
                # encode_kv builds its scale tensor from host floats, a copy a graph cannot hold.
                raise ValueError(
                    "cuda_graphs does not cover an fp8 KV cache; set kv_cache_dtype to auto "
                    "or cuda_graphs to false"
                )
            if num_blocks < 2:
                raise ValueError(
                    f"cuda_graphs needs a KV cache of at least 2 blocks (one is the padding "
                    f"rows' scratch block), got {num_blocks}; raise kv_cache_memory_bytes"
                )
            max_len = max_model_len or config.max_position_embeddings
            self.decode_graphs = DecodeGraphs(
                model, self.kv_caches, block_size, max_num_seqs,
                max_blocks=-(-max_len // block_size), scratch_block=num_blocks - 1,
                capture=device.type == "cuda",
            )  # fmt: skip
        self._replayed_graph = False
        self.sampler = Sampler(seed, device)
        self.step_timer = StepTimer(device)
        self.staging = InputStaging(device)
        self.weight_bytes = weight_bytes(model)
        # Set by make_proposer when speculative decoding is on.
        self.proposer: ModelProposer | None = None
        self.spec_stats = SpecStats()
        # A separate draft loaded before the KV cache was sized (load_draft_model).
        self.draft_model = draft_model

    @property
    def num_kv_blocks(self) -> int:
        """Blocks the block pool may hand out (all but the CUDA graphs' scratch block)."""
        return self._num_blocks - (self.decode_graphs is not None)

    @property
    def native_custom_ops(self) -> bool:
        return self.model.native_ops

    @property
    def replayed_graph(self) -> bool:
        """Whether the last step's forward replayed a captured CUDA graph."""
        return self._replayed_graph

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
            draft = self.draft_model
            if draft is None:  # a runner built without it (the engine loads it first)
                draft = load_draft_model(settings, self.dtype, self.device, self.seed)
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
        # Every step, sampling or not, returns only once its device work is done (step_timer.py).
        self.step_timer.start()
        try:
            return self._execute(scheduler_output, block_tables)
        finally:
            self.step_timer.stop()

    def _execute(
        self, scheduler_output: SchedulerOutput, block_tables: dict[str, list[int]]
    ) -> dict[str, list[int]]:
        seqs = _decodes_first(scheduler_output.scheduled)
        input_ids, positions, meta = self._prepare(seqs, block_tables)
        stack, graphs = self.decode_stack, self.decode_graphs
        self._replayed_graph = False
        if stack is not None and stack.covers(input_ids, meta):
            hidden = stack(input_ids, positions, meta)
        elif graphs is not None and graphs.covers(input_ids, meta):
            hidden = graphs(input_ids, positions, meta)
            self._replayed_graph = graphs.capture
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
        # The logits stay on the device: the sampler runs there and only token ids come back.
        logits = self.model.compute_logits(hidden[_row_index(rows, self.device)]).float()
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
            if len(plain_rows) != logits.shape[0]:
                logits = logits[_row_index(plain_rows, self.device)]
            tokens = self.sampler.sample(
                logits, [r.sampling_params for r in reqs], [r.generator for r in reqs]
            )
            for r, t in zip(reqs, tokens, strict=True):
                out[r.request_id] = [t]
        return out

    @torch.inference_mode()
    def embed(self, prompts: list[list[int]]) -> list[list[float]]:
        """engine.core.executor.Executor.embed: one forward of every prompt as a first prefill
        chunk, the model's own (engine.model.llama), over a scratch KV cache sized for them
        alone, so that the engine's cache and its prefix cache are untouched."""
        if not prompts or not all(prompts):
            raise ValueError("embed: every prompt needs at least one token")
        bs = self.block_size
        counts = [-(-len(p) // bs) for p in prompts]
        config = self.config
        caches = allocate_kv_caches(
            config.num_hidden_layers, sum(counts), bs, config.num_key_value_heads,
            config.head_dim, self.kv_cache_dtype, self.device,
        )  # fmt: skip
        starts = [0, *itertools.accumulate(counts)]
        tables = [list(range(a, b)) for a, b in itertools.pairwise(starts)]
        lens = [len(p) for p in prompts]
        meta = AttentionMetadata.build(lens, lens, tables, bs, 0, self.device)
        meta.native_decode, meta.naive = self.native_decode, self.naive_attention
        ids = torch.tensor([t for p in prompts for t in p], dtype=torch.int64, device=self.device)
        hidden = self.model(ids, meta.token_positions(), caches, meta).float()
        rows = itertools.pairwise(meta.query_start_loc)
        pooled = torch.stack([hidden[a:b].mean(dim=0) for a, b in rows])
        return F.normalize(pooled, dim=-1).cpu().tolist()

    def _verify(self, s: ScheduledRequest, logits: torch.Tensor) -> list[int]:
        """Accepted draft tokens plus one: greedy by exact match, else rejection sampling."""
        req, draft = s.request, s.spec_token_ids
        params = req.sampling_params
        if params.greedy:
            tokens = greedy_verify(logits.argmax(dim=-1).tolist(), draft)
        else:
            q = req.spec_draft_probs
            q = None if q is None else q[: len(draft)]
            # Rejection sampling draws with the request's host generator: its rows come back.
            p = processed_probs(logits.cpu(), [params] * logits.shape[0])
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

        # One staged copy on CUDA (engine/model/input_staging.py), tensors in place on a CPU.
        ids_t, positions_t, slots_t, lens_t, table_t = self.staging.to_device(
            [np.asarray(token_ids, dtype=np.int64), positions_np, slots_np,
             np.asarray(seq_lens, dtype=np.int64), table_np]
        )  # fmt: skip
        meta = AttentionMetadata(
            slot_mapping=slots_t,
            query_start_loc=query_start_loc,
            seq_lens=seq_lens,
            seq_lens_t=lens_t,
            block_tables=table_t,
            num_decode_seqs=num_decode,
            block_size=self.block_size,
            native_decode=self.native_decode,
            naive=self.naive_attention,
        )
        return ids_t, positions_t, meta


def _decodes_first(scheduled: list[ScheduledRequest]) -> list[ScheduledRequest]:
    decodes = [s for s in scheduled if s.num_new_tokens == 1]
    if len(decodes) == len(scheduled):
        return scheduled
    return decodes + [s for s in scheduled if s.num_new_tokens != 1]


def _row_index(rows: list[int], device: torch.device) -> torch.Tensor | slice:
    """Index of ``rows``: a slice when they are contiguous (no host-to-device copy), else a
    tensor on ``device``."""
    if rows == list(range(rows[0], rows[0] + len(rows))):
        return slice(rows[0], rows[0] + len(rows))
    return torch.tensor(rows, device=device)
