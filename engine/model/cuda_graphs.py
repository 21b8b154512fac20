"""CUDA graphs for pure decode steps: capture per batch-size bucket, pad to it, replay.

A decode step of a small model launches hundreds of kernels, and on a GPU the host's launch
time, not the device, sets its duration. As vLLM does, a step whose sequences all decode one
token runs as the replay of a graph captured for a batch of `bucket` sequences, the smallest of
`capture_sizes` (1, 2, 4, 8, ... up to max_num_seqs) that holds it. A graph replays fixed
shapes from fixed addresses, so:
  * inputs live in static buffers (token ids, positions, KV slots, context lengths, block
    table), written before each replay; rows past the real batch are padding: token 0 at
    position 0, reading and writing only the one scratch block the runner reserves;
  * the torch decode attention gathers K/V padded to the longest context, a length baked into
    the graph: the key is (batch bucket, context bucket), the context rounded up to a power of
    two of blocks; the real lengths (the static context-length buffer) mask the padding, so
    the result is the eager one's;
  * the hidden states come out of a static buffer, of which the real rows are sliced.
Graphs are captured on first use of a key (the first such step pays for the capture), into one
shared memory pool. The setting is `cuda_graphs` (engine.config.KernelSettings), off by
default; without CUDA the engine refuses it. `capture=False` runs the same padded static
buffers eagerly, which is how the padding and slicing are tested on a CPU.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any

import torch

from engine.model.attention import AttentionMetadata
from engine.model.llama import LlamaForCausalLM


def capture_sizes(max_num_seqs: int) -> list[int]:
    """Batch-size buckets: powers of two below ``max_num_seqs``, then ``max_num_seqs``."""
    if max_num_seqs < 1:
        raise ValueError(f"max_num_seqs must be at least 1 for CUDA graphs, got {max_num_seqs}")
    sizes, size = [], 1
    while size < max_num_seqs:
        sizes.append(size)
        size *= 2
    return [*sizes, max_num_seqs]


def bucket_for(num_seqs: int, sizes: list[int]) -> int | None:
    """The smallest bucket of ``sizes`` (sorted) holding ``num_seqs``; None past the largest."""
    i = bisect.bisect_left(sizes, num_seqs)
    return sizes[i] if i < len(sizes) else None


def context_bucket(max_ctx: int, block_size: int, max_blocks: int) -> int:
    """Tokens of K/V a graph gathers per sequence: ``max_ctx`` rounded up to a power of two of
    blocks, at most ``max_blocks`` blocks."""
    blocks = 1
    need = -(-max_ctx // block_size)
    while blocks < need:
        blocks *= 2
    return min(blocks, max_blocks) * block_size


@dataclass
class StaticInputs:
    """The fixed-address buffers of one batch bucket (int64, on the device)."""

    input_ids: torch.Tensor  # [bucket]
    positions: torch.Tensor  # [bucket]
    slot_mapping: torch.Tensor  # [bucket]
    seq_lens: torch.Tensor  # [bucket]
    block_tables: torch.Tensor  # [bucket, max_blocks]

    @classmethod
    def empty(cls, bucket: int, max_blocks: int, device: torch.device) -> StaticInputs:
        def z(*shape: int) -> torch.Tensor:
            return torch.zeros(shape, dtype=torch.int64, device=device)

        return cls(z(bucket), z(bucket), z(bucket), z(bucket), z(bucket, max_blocks))

    def fill(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        meta: AttentionMetadata,
        scratch_block: int,
    ) -> None:
        """Copy a real decode batch (n <= bucket rows) in; pad the rest so that each padding
        row is a one-token sequence in ``scratch_block``, and fill unused table columns with it
        (every index the graph reads must be a valid block)."""
        n, width = input_ids.shape[0], meta.block_tables.shape[1]
        self.input_ids[:n].copy_(input_ids)
        self.positions[:n].copy_(positions)
        self.slot_mapping[:n].copy_(meta.slot_mapping)
        self.seq_lens[:n].copy_(meta.seq_lens_t)
        self.block_tables.fill_(scratch_block)
        self.block_tables[:n, :width].copy_(meta.block_tables)
        self.input_ids[n:].zero_()
        self.positions[n:].zero_()
        self.slot_mapping[n:].fill_(scratch_block * meta.block_size)
        self.seq_lens[n:].fill_(1)

    def metadata(self, ctx: int, block_size: int) -> AttentionMetadata:
        """The metadata a graph is captured with: every sequence decodes, the host lengths say
        ``ctx`` (the gather width baked into the graph), the device lengths are the real ones."""
        bucket = self.input_ids.shape[0]
        return AttentionMetadata(
            slot_mapping=self.slot_mapping,
            query_start_loc=list(range(bucket + 1)),
            seq_lens=[ctx] * bucket,
            seq_lens_t=self.seq_lens,
            block_tables=self.block_tables[:, : -(-ctx // block_size)],
            num_decode_seqs=bucket,
            block_size=block_size,
        )


class DecodeGraphs:
    """Runs pure decode steps of ``model`` as CUDA graph replays (module docstring).

    ``scratch_block``: a KV block no request ever gets (the runner holds it back from the
    block pool), where padding rows write. ``max_blocks``: block-table width of the longest
    context (max_model_len). With ``capture=False`` the padded static batch runs eagerly.
    """

    def __init__(
        self,
        model: LlamaForCausalLM,
        kv_caches: list[torch.Tensor],
        block_size: int,
        max_num_seqs: int,
        max_blocks: int,
        scratch_block: int,
        capture: bool = True,
    ) -> None:
        self.model, self.kv_caches = model, kv_caches
        self.block_size, self.max_blocks = block_size, max_blocks
        self.scratch_block = scratch_block
        self.sizes = capture_sizes(max_num_seqs)
        self.capture = capture
        self.device = kv_caches[0].device
        self._inputs: dict[int, StaticInputs] = {}
        self._graphs: dict[tuple[int, int], tuple[Any, torch.Tensor]] = {}
        self._pool: Any = None
        self.num_replays = 0

    @property
    def num_graphs(self) -> int:
        """Graphs captured so far (one per (batch bucket, context bucket) met)."""
        return len(self._graphs)

    def covers(self, input_ids: torch.Tensor, meta: AttentionMetadata) -> bool:
        """Whether this step is a pure decode batch that fits the largest bucket and the
        static block table (a speculative lookahead may widen a table past max_model_len)."""
        n = meta.num_seqs
        return (
            n > 0
            and meta.num_decode_seqs == n
            and input_ids.shape[0] == n
            and bucket_for(n, self.sizes) is not None
            and meta.block_tables.shape[1] <= self.max_blocks
            and max(meta.seq_lens) <= self.max_blocks * self.block_size
        )

    def __call__(
        self, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata
    ) -> torch.Tensor:
        """Hidden states [n, hidden] of a pure decode batch of n sequences (``covers``)."""
        n = meta.num_seqs
        bucket = bucket_for(n, self.sizes)
        assert bucket is not None, "call covers() first"
        ctx = context_bucket(max(meta.seq_lens), self.block_size, self.max_blocks)
        inputs = self._inputs.get(bucket)
        if inputs is None:
            inputs = self._inputs[bucket] = StaticInputs.empty(bucket, self.max_blocks, self.device)
        inputs.fill(input_ids, positions, meta, self.scratch_block)
        if not self.capture:
            hidden = self._forward(inputs, ctx)
        else:
            graph, hidden = self._graphs.get((bucket, ctx)) or self._capture(bucket, ctx, inputs)
            graph.replay()
            self.num_replays += 1
        return hidden[:n]

    def _forward(self, inputs: StaticInputs, ctx: int) -> torch.Tensor:
        meta = inputs.metadata(ctx, self.block_size)
        return self.model(inputs.input_ids, inputs.positions, self.kv_caches, meta)

    def _capture(self, bucket: int, ctx: int, inputs: StaticInputs) -> tuple[Any, torch.Tensor]:
        # Warm up on a side stream (lazy inits, allocator), as torch's graph docs require; the
        # inputs already hold this step's batch, whose K/V writes the replay repeats exactly.
        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            self._forward(inputs, ctx)
        torch.cuda.current_stream(self.device).wait_stream(stream)
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool):
            hidden = self._forward(inputs, ctx)
        self._graphs[(bucket, ctx)] = (graph, hidden)
        return graph, hidden
