"""Predicted step times follow the roofline; the simulated KV capacity is `bench capacity`'s."""

from __future__ import annotations

import pytest

from engine.config import EngineConfig
from engine.sim.cost import StepTimeModel, device_roofs
from engine.sim.setup import build_sim_executor
from perfmodel.capacity import capacity
from perfmodel.efficiency import INTERCONNECT, allreduce_time_s, efficiency_for
from perfmodel.hardware import get_gpu
from perfmodel.presets import get_preset
from perfmodel.roofline import Batch, Precision

LLAMA_70B = get_preset("llama-3-70b")
BF16 = Precision("bf16", "bf16", "bf16")


def a100_model(tp: int = 4, precision: Precision = BF16) -> StepTimeModel:
    return StepTimeModel(LLAMA_70B, precision, tp, device_roofs("a100-80gb", "bf16"))


def test_decode_is_flat_in_batch_until_the_ridge_then_grows() -> None:
    model = a100_model()
    t = {b: model.predict(Batch.decode(b, 1024)).kernels_s for b in (1, 8, 32, 512, 2048)}
    # Memory-bound: the weights dominate, the KV and activations of a few sequences do not.
    assert t[8] / t[1] < 1.05
    assert t[32] / t[1] < 1.25
    # Past the ridge (achieved 268 TFLOP/s over 1.79 TB/s = 149 FLOP/byte) compute takes over.
    small, big = model.predict(Batch.decode(8, 1024)), model.predict(Batch.decode(2048, 1024))
    assert small.memory_s > 10 * small.compute_s
    assert big.compute_s > big.memory_s
    assert t[2048] / t[512] > 1.8


def test_decode_time_grows_with_context_by_the_kv_it_reads() -> None:
    model = a100_model()
    short, long = model.predict(Batch.decode(64, 512)), model.predict(Batch.decode(64, 8192))
    kv_bytes = 64 * (8192 - 512) * model.cost.kv_bytes_per_token
    assert long.memory_s - short.memory_s == pytest.approx(
        kv_bytes / model.roofs.bytes_per_s, rel=0.02
    )


def test_prefill_is_compute_bound_and_linear_in_tokens() -> None:
    model = a100_model()
    one, four = model.predict(Batch.prefill(1024)), model.predict(Batch.prefill(4096))
    assert one.compute_s > one.memory_s and four.compute_s > four.memory_s
    # Linear FLOPs x4, attention pairs x16: a little more than 4x.
    assert 4.0 < four.kernels_s / one.kernels_s < 4.6


def test_achieved_rates_are_the_peaks_times_published_efficiencies() -> None:
    roofs = device_roofs("a100-80gb", "bf16")
    eff = efficiency_for("a100-80gb-sxm")
    assert eff.compute is not None and eff.memory is not None
    assert roofs.flops_per_s == pytest.approx(312e12 * eff.compute)
    assert roofs.bytes_per_s == pytest.approx(2039e9 * eff.memory)
    assert "Maximum Achievable Matmul" in roofs.sources["compute_efficiency"]
    # A part without a published measurement runs at its datasheet peak, and says so.
    l4 = device_roofs("l4", "bf16")
    assert l4.flops_per_s == l4.peak_flops_per_s
    assert "no published" in l4.sources["compute_efficiency"]


def test_allreduce_costs_latency_for_small_messages_and_bandwidth_for_large() -> None:
    link = INTERCONNECT["a100-80gb-sxm"]
    small = allreduce_time_s(16 * 1024, 4, link)
    assert 8e-6 < small < 15e-6  # NCCL's LL ring latency over 4 NVLink GPUs: 6.6 + 6 x 0.6 us
    big = allreduce_time_s(1e9, 4, link)
    assert big == pytest.approx(1e9 * 1.5 / link.bus_bytes_per_s, rel=0.01)
    assert allreduce_time_s(1e6, 1, link) == 0.0
    assert a100_model().predict(Batch.decode(1, 100)).comm_s > 0
    assert a100_model().comm_s(1, 1) < a100_model().comm_s(1024, 1)


def test_quantized_weights_and_fp8_kv_cut_bytes_not_flops() -> None:
    base = a100_model().predict(Batch.decode(1, 2048))
    int4 = a100_model(precision=Precision("int4", "bf16", "bf16")).predict(Batch.decode(1, 2048))
    assert int4.memory_s < base.memory_s * 0.3
    assert int4.compute_s == pytest.approx(base.compute_s)
    fp8 = a100_model(precision=Precision("bf16", "fp8", "bf16"))
    assert fp8.cost.kv_bytes_per_token == a100_model().cost.kv_bytes_per_token / 2


@pytest.mark.parametrize(
    ("tp", "kv", "utilization"), [(4, "auto", 0.9), (8, "fp8", 0.9), (4, "auto", 0.8)]
)
def test_kv_capacity_is_bench_capacitys(tp: int, kv: str, utilization: float) -> None:
    config = EngineConfig.from_flat(dict(model="llama-3-70b", device="sim", gpu="a100-80gb", tp=tp,
                                         kv_cache_dtype=kv,
                                         gpu_memory_utilization=utilization))  # fmt: skip
    import torch

    executor = build_sim_executor(config, LLAMA_70B, torch.bfloat16)
    precision = Precision("bf16", "fp8" if kv == "fp8" else "bf16", "bf16")
    cap = capacity(LLAMA_70B, get_gpu("a100-80gb"), 8192, precision, tp, utilization)
    assert executor.num_kv_blocks == cap.max_tokens // 16
    assert executor.describe()["capacity"]["max_tokens"] == cap.max_tokens


def test_a_draft_model_costs_k_of_its_decode_steps() -> None:
    draft = StepTimeModel(get_preset("llama-3-8b"), BF16, 4, device_roofs("a100-80gb", "bf16"))
    target = StepTimeModel(LLAMA_70B, BF16, 4, device_roofs("a100-80gb", "bf16"), draft=draft)
    with_drafts = target.predict(Batch.decode(8, 1000), 8, 3, 1000)
    assert with_drafts.draft_s == pytest.approx(3 * draft.predict(Batch.decode(8, 1000)).total_s)
