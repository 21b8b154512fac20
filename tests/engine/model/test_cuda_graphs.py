"""CUDA graphs for decode steps: buckets, padding and slicing on a CPU, capture on a GPU."""

from __future__ import annotations

import pytest
import torch
import typer

from bench.cli.app import app
from bench.cli.serve import config_from_options
from engine.config import EngineConfig
from engine.core.request import SamplingParams
from engine.llm_engine import LLMEngine
from engine.model import fused_step
from engine.model.attention import AttentionMetadata
from engine.model.cuda_graphs import (
    DecodeGraphs,
    StaticInputs,
    bucket_for,
    capture_sizes,
    context_bucket,
)
from engine.model.model_runner import ModelRunner
from tests.support.cuda import gpu
from tests.support.engine_fixtures import make_engine, ragged_workload, run

SETTINGS = {"model": "tiny", "dtype": "float32", "device": "cpu", "seed": 1, "max_num_seqs": 6}


def test_buckets_are_powers_of_two_up_to_max_num_seqs() -> None:
    assert capture_sizes(1) == [1]
    assert capture_sizes(8) == [1, 2, 4, 8]
    assert capture_sizes(20) == [1, 2, 4, 8, 16, 20]
    sizes = capture_sizes(20)
    assert [bucket_for(n, sizes) for n in (1, 2, 3, 5, 8, 9, 17, 20, 21)] == [
        1, 2, 4, 8, 8, 16, 20, 20, None,
    ]  # fmt: skip
    with pytest.raises(ValueError, match="max_num_seqs"):
        capture_sizes(0)


def test_context_buckets_round_up_to_a_power_of_two_of_blocks() -> None:
    assert [context_bucket(c, 16, 64) for c in (1, 16, 17, 33, 100, 1024, 5000)] == [
        16, 16, 32, 64, 128, 1024, 1024,
    ]  # fmt: skip


def test_padding_rows_read_and_write_only_the_scratch_block() -> None:
    meta = AttentionMetadata.build([1, 1, 1], [5, 9, 2], [[3, 4], [7, 1, 2], [6]], 4, 3)
    inputs = StaticInputs.empty(4, max_blocks=8, device=torch.device("cpu"))
    inputs.block_tables.fill_(-1)  # stale values from an earlier step
    ids, positions = torch.tensor([11, 12, 13]), meta.token_positions()
    inputs.fill(ids, positions, meta, scratch_block=9)
    assert inputs.input_ids.tolist() == [11, 12, 13, 0]
    assert inputs.positions.tolist() == [4, 8, 1, 0]
    assert inputs.slot_mapping.tolist() == [*meta.slot_mapping.tolist(), 9 * 4]
    assert inputs.seq_lens.tolist() == [5, 9, 2, 1]
    assert inputs.block_tables[:3, :3].tolist() == meta.block_tables.tolist()
    assert set(inputs.block_tables[:, 3:].flatten().tolist()) == {9}
    assert inputs.block_tables[3].tolist() == [9] * 8
    graph_meta = inputs.metadata(ctx=16, block_size=4)
    assert graph_meta.seq_lens == [16] * 4 and graph_meta.block_tables.shape == (4, 4)
    assert graph_meta.num_decode_seqs == 4 and graph_meta.query_start_loc == [0, 1, 2, 3, 4]


def test_only_pure_decode_batches_within_the_static_table_are_covered() -> None:
    graphs = DecodeGraphs.__new__(DecodeGraphs)
    graphs.sizes, graphs.max_blocks, graphs.block_size = capture_sizes(4), 3, 4
    ids = torch.zeros(2, dtype=torch.int64)
    decode = AttentionMetadata.build([1, 1], [5, 12], [[1, 2], [3, 4, 5]], 4, 2)
    assert graphs.covers(ids, decode)
    mixed = AttentionMetadata.build([1, 3], [5, 7], [[1, 2], [3, 4]], 4, 1)
    assert not graphs.covers(torch.zeros(4, dtype=torch.int64), mixed)
    too_long = AttentionMetadata.build([1, 1], [5, 13], [[1, 2], [3, 4, 5, 6]], 4, 2)
    assert not graphs.covers(ids, too_long)
    five = AttentionMetadata.build([1] * 5, [2] * 5, [[i] for i in range(5)], 4, 5)
    assert not graphs.covers(torch.zeros(5, dtype=torch.int64), five)  # past the largest bucket


def _padded_runner_engine(**kernels: str) -> tuple[LLMEngine, ModelRunner]:
    """An engine whose runner runs decode steps through DecodeGraphs' padded static buffers,
    eagerly (capture is CUDA-only): what a replay computes, checked on a CPU. ``kernels``:
    the model's custom_ops (torch: the fused layers CUDA runs)."""
    reference = make_engine(max_num_seqs=6, **kernels)
    template = reference.executor
    assert isinstance(template, ModelRunner)
    runner = ModelRunner(
        template.model, reference.model_config, reference.config.cache.block_size,
        template._num_blocks, template.dtype, template.device, seed=1,
        cuda_graphs=True, max_num_seqs=6, max_model_len=reference.max_model_len,
    )  # fmt: skip
    assert runner.decode_graphs is not None and not runner.decode_graphs.capture
    return LLMEngine(EngineConfig.from_flat(SETTINGS), executor=runner), runner


@pytest.mark.parametrize("kernels", [{}, {"custom_ops": "torch"}], ids=["default", "fused"])
def test_padded_decode_batches_give_the_tokens_of_the_eager_path(kernels: dict) -> None:
    workload = ragged_workload(9, seed=4)
    expected = run(make_engine(max_num_seqs=6, attention_backend="torch", **kernels), workload)
    engine, runner = _padded_runner_engine(**kernels)
    assert runner.model.fused_layers and (fused_step.covers(runner.model) == bool(kernels))
    graphs = runner.decode_graphs
    assert graphs is not None
    runner.decode_graphs = _Counting(graphs)  # type: ignore[assignment]
    assert run(engine, workload) == expected
    assert runner.decode_graphs.calls > 0  # type: ignore[union-attr]
    # The scratch block is held back from the block pool.
    assert engine.block_pool.num_blocks == runner._num_blocks - 1


class _Counting:
    """Wraps DecodeGraphs, counting the steps it ran; ``capture`` is what it tells the runner
    (True: each of its steps stands for a replay)."""

    def __init__(self, inner: DecodeGraphs, capture: bool = False) -> None:
        self.inner, self.calls, self.capture = inner, 0, capture

    def covers(self, input_ids: torch.Tensor, meta: AttentionMetadata) -> bool:
        return self.inner.covers(input_ids, meta)

    def __call__(self, *args: object) -> torch.Tensor:
        self.calls += 1
        return self.inner(*args)  # type: ignore[arg-type]


@pytest.mark.parametrize("capture", [True, False])
def test_the_steps_say_which_forwards_replayed_a_graph(capture: bool) -> None:
    """steps.parquet's cuda_graph: 1 exactly for the pure decode steps a graph ran, 0 for
    prefill and mixed steps, and 0 everywhere when nothing was captured."""
    engine, runner = _padded_runner_engine()
    assert runner.decode_graphs is not None
    runner.decode_graphs = _Counting(runner.decode_graphs, capture)  # type: ignore[assignment]
    run(engine, ragged_workload(9, seed=4))
    steps = engine.steps.since()
    decode_only = [
        int(p == 0 and d > 0)
        for p, d in zip(steps["num_prefill_tokens"], steps["num_decode_tokens"], strict=True)
    ]
    assert 0 < sum(decode_only) < len(decode_only)  # both kinds of step ran
    assert steps["cuda_graph"] == (decode_only if capture else [0] * len(decode_only))
    assert sum(steps["cuda_graph"]) == (runner.decode_graphs.calls if capture else 0)


def _resolved(device: str, choice: bool | None, kv_dtype: torch.dtype, blocks: int = 64) -> bool:
    engine = LLMEngine.__new__(LLMEngine)
    engine.config = EngineConfig.from_flat({"cuda_graphs": choice})
    engine.device = torch.device(device)
    return engine._cuda_graphs(kv_dtype, blocks)


def test_graphs_are_on_by_default_on_cuda_only() -> None:
    assert _resolved("cuda", None, torch.bfloat16)
    assert not _resolved("cuda", None, torch.float8_e4m3fn)  # its write cannot be captured
    assert not _resolved("cuda", None, torch.bfloat16, blocks=1)  # no scratch block to spare
    assert not _resolved("cuda", False, torch.bfloat16)  # --set cuda_graphs=false
    assert not _resolved("cpu", None, torch.float32)
    engine = make_engine()
    assert not engine.cuda_graphs and engine.describe()["cuda_graphs"] is False
    assert isinstance(engine.executor, ModelRunner) and engine.executor.decode_graphs is None


def test_without_cuda_the_setting_is_refused_with_one_line() -> None:
    with pytest.raises(ValueError, match="cuda_graphs needs a CUDA device") as err:
        make_engine(cuda_graphs=True)
    assert "\n" not in str(err.value) and "false" in str(err.value)
    with pytest.raises(ValueError, match="simulated device"):
        LLMEngine(EngineConfig.from_flat({"device": "sim", "gpu": "h100-sxm", "cuda_graphs": True}))


def test_an_fp8_kv_cache_is_refused_with_one_line() -> None:
    engine = make_engine()
    with pytest.raises(ValueError, match="does not cover an fp8 KV cache"):
        ModelRunner(
            engine.executor.model, engine.model_config, 16, 8, torch.float32,
            torch.device("cpu"), kv_cache_dtype=torch.float8_e4m3fn, cuda_graphs=True,
        )  # fmt: skip


def test_bench_serve_has_the_flag_from_the_setting() -> None:
    command = typer.main.get_command(app).commands["serve"]  # type: ignore[attr-defined]
    with command.make_context("serve", ["--cuda-graphs"]) as ctx:
        assert config_from_options(dict(ctx.params)).kernels.cuda_graphs is True
    with command.make_context("serve", ["--no-cuda-graphs"]) as ctx:
        assert config_from_options(dict(ctx.params)).kernels.cuda_graphs is False
    assert EngineConfig().kernels.cuda_graphs is None  # the device decides
    assert EngineConfig.from_flat({"cuda_graphs": True}).to_flat()["cuda_graphs"] is True


@gpu
def test_cuda_graph_replays_give_the_eager_tokens() -> None:
    workload = ragged_workload(12, seed=6)
    settings = {"device": "cuda", "max_num_seqs": 8}
    eager = run(make_engine(**settings, cuda_graphs=False), workload)
    engine = make_engine(**settings)  # graphs are the CUDA default
    runner = engine.executor
    assert isinstance(runner, ModelRunner) and runner.decode_graphs is not None
    assert run(engine, workload) == eager
    assert runner.decode_graphs.num_graphs > 0 and runner.decode_graphs.num_replays > 0
    assert sum(engine.steps.since()["cuda_graph"]) == runner.decode_graphs.num_replays
    params = SamplingParams(max_tokens=3, temperature=0.0, ignore_eos=True)
    assert len(engine.generate([[4, 5, 6]], [params])[0]) == 3
