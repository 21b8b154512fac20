"""The analytic model against the seeds' figures, and against torch's FLOP counter."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode, sdpa_flop_count

from engine.model.attention import AttentionMetadata
from engine.model.llama import LlamaForCausalLM
from perfmodel.capacity import capacity, kv_bytes_per_token
from perfmodel.hardware import get_gpu, ridge_point
from perfmodel.models import resolve_model
from perfmodel.presets import TINY
from perfmodel.roofline import Batch, CostModel, Precision, memory_time_s

GIB = 2**30
LLAMA_70B = resolve_model("Llama-3-70B")


def test_llama_3_70b_kv_cache_sizes() -> None:
    per_token = kv_bytes_per_token(LLAMA_70B, "bf16")
    assert per_token == 327_680
    assert per_token * 4_096 == 1_342_177_280
    assert per_token * 131_072 == 40 * GIB
    # The cost model's per-GPU figure agrees on one GPU and splits over TP.
    assert CostModel(LLAMA_70B).kv_bytes_per_token == per_token
    assert CostModel(LLAMA_70B, tp=4).kv_bytes_per_token == per_token / 4


def test_llama_7b_multi_head_is_one_gib_at_2048_tokens() -> None:
    llama_7b = resolve_model("llama-7b")  # the LLaMA-7B shape: 32 layers, d_model 4096, MHA
    assert (llama_7b.num_hidden_layers, llama_7b.hidden_size) == (32, 4096)
    assert llama_7b.num_key_value_heads == llama_7b.num_attention_heads
    assert kv_bytes_per_token(llama_7b, "fp16") * 2_048 == GIB


def test_gqa_with_8_kv_heads_is_8x_smaller_than_mha() -> None:
    mha = dataclasses.replace(LLAMA_70B, num_key_value_heads=64)
    assert LLAMA_70B.num_attention_heads == 64 and LLAMA_70B.num_key_value_heads == 8
    assert kv_bytes_per_token(mha, "bf16") == 8 * kv_bytes_per_token(LLAMA_70B, "bf16")


def test_int4_kv_gives_about_4x_the_users_of_fp16() -> None:
    gpu = get_gpu("a100-80gb")
    users = {
        kv: capacity(LLAMA_70B, gpu, 4_096, Precision.for_model(LLAMA_70B, kv_dtype=kv), tp=4)
        for kv in ("fp16", "fp8", "int4")
    }
    assert users["fp16"].fits and users["fp16"].max_users > 50
    assert users["int4"].max_users / users["fp16"].max_users == pytest.approx(4.0, rel=0.02)
    assert users["fp8"].max_users / users["fp16"].max_users == pytest.approx(2.0, rel=0.02)
    # Without TP the 141 GB of weights cannot fit one 80 GB GPU.
    alone = capacity(LLAMA_70B, gpu, 4_096)
    assert not alone.fits and alone.max_users == 0 and "do not fit" in alone.reason


def test_ridge_points() -> None:
    assert ridge_point(312e12, 2.0e12) == 156  # docs/ARCHITECTURE.md's A100 figure
    # The datasheet's A100 80GB SXM bandwidth is 2,039 GB/s: 153 FLOP/B, within 2% of 156.
    assert get_gpu("a100-80gb").ridge_flop_per_byte("bf16") == pytest.approx(156, rel=0.02)
    assert get_gpu("h100-sxm").ridge_flop_per_byte("bf16") == pytest.approx(295, abs=1)
    with pytest.raises(ValueError, match="no fp8 peak"):
        get_gpu("a100-80gb").peak_for("fp8")


def test_decode_floor_reads_140_gb_of_weights_in_70_ms() -> None:
    step = CostModel(LLAMA_70B, Precision("fp16", "fp16", "fp16")).step(Batch.decode(1, 1))
    assert step.weight_bytes == pytest.approx(140e9, rel=0.01)
    assert memory_time_s(step.bytes, 2e12) == pytest.approx(0.070, rel=0.01)
    assert step.roofline_time_s(312e12, 2e12) == pytest.approx(0.070, rel=0.01)
    assert not step.compute_bound(312e12, 2e12)


@pytest.mark.parametrize("batch", [1, 8, 32, 64])
def test_decode_batch_b_has_arithmetic_intensity_about_b(batch: int) -> None:
    step = CostModel(LLAMA_70B).step(Batch.decode(batch, 16))
    assert step.arithmetic_intensity == pytest.approx(batch, rel=0.05)


def test_prefill_is_compute_bound_and_decode_grows_with_context() -> None:
    model = CostModel(LLAMA_70B)
    prefill = model.step(Batch.prefill(4_096))
    assert prefill.compute_bound(312e12, 2.039e12)
    short, long = model.step(Batch.decode(32, 512)), model.step(Batch.decode(32, 8_192))
    assert long.kv_read_bytes == pytest.approx(short.kv_read_bytes * 8_191 / 511)
    assert long.arithmetic_intensity < short.arithmetic_intensity


def test_causal_pairs_match_the_engine_definition_and_arrays_work() -> None:
    # A chunk of q tokens ending at context c: positions c-q..c-1 attend 1..c keys each.
    q, c = 5, 12
    assert Batch.from_chunks([(q, c)]).attn_pairs == sum(range(c - q + 1, c + 1))
    assert Batch.from_chunks([(q, c)], causal=False).attn_pairs == q * c
    with pytest.raises(ValueError, match="new tokens <= context"):
        Batch.from_chunks([(3, 2)])
    model = CostModel(TINY)
    batches = [Batch.decode(4, 100), Batch.prefill(64, 2)]
    arrays = Batch(*(np.array([getattr(b, f.name) for b in batches], dtype=float)
                     for f in dataclasses.fields(Batch)))  # fmt: skip
    vector = model.step(arrays)
    for i, b in enumerate(batches):
        assert vector.flops[i] == pytest.approx(model.step(b).flops)
        assert vector.bytes[i] == pytest.approx(model.step(b).bytes)


def test_request_flops_equal_the_sum_of_its_steps() -> None:
    model = CostModel(TINY)
    prompt, output = 37, 9
    steps = [Batch.prefill(prompt)] + [Batch.decode(1, prompt + j) for j in range(1, output)]
    assert model.request_flops(prompt, output) == pytest.approx(
        sum(model.step(b).flops for b in steps)
    )


def test_tensor_parallel_sharding_rules() -> None:
    one, four = CostModel(LLAMA_70B), CostModel(LLAMA_70B, tp=4)
    b = Batch.decode(8, 1_024)
    assert four.step(b).flops == pytest.approx(one.step(b).flops / 4)
    assert four.step(b).comm_bytes > 0 == one.step(b).comm_bytes
    # 16 GPUs > 8 KV heads: KV heads are replicated, one per GPU.
    assert CostModel(LLAMA_70B, tp=16).kv_heads == 1
    with pytest.raises(ValueError, match="split evenly"):
        CostModel(LLAMA_70B, tp=3)


def _cpu_sdpa_flops(q_shape, k_shape, v_shape, *args, out_shape=None, **kwargs) -> int:
    # torch's counter registers sdpa's CUDA kernels only; the CPU kernel computes the same
    # products, so it is counted with torch's own formula (which ignores causal masking).
    return sdpa_flop_count(q_shape, k_shape, v_shape)


def test_flop_counter_agrees_with_the_analytic_matmul_flops() -> None:
    torch.manual_seed(0)
    model = LlamaForCausalLM(TINY)
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.02)
    # Two decodes of equal context (the batched decode pads to the longest), a prefill chunk
    # continuing a cached prompt, and a first chunk: (new tokens, context after the step).
    chunks = [(1, 20), (1, 20), (5, 12), (7, 7)]
    block, tables, used = 16, [], 0
    for _, ctx in chunks:
        n = -(-ctx // block)
        tables.append(list(range(used, used + n)))
        used += n
    meta = AttentionMetadata.build(
        [q for q, _ in chunks], [c for _, c in chunks], tables, block, num_decode_seqs=2
    )
    num_tokens = sum(q for q, _ in chunks)
    kv = [torch.zeros(2, used, block, TINY.num_key_value_heads, TINY.head_dim) for _ in range(4)]
    ids = torch.randint(0, TINY.vocab_size, (num_tokens,))
    last = torch.tensor([meta.query_start_loc[i + 1] - 1 for i in range(len(chunks))])
    mapping = {torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: _cpu_sdpa_flops}
    with FlopCounterMode(display=False, custom_mapping=mapping) as counter:
        hidden = model(ids, meta.token_positions(), kv, meta)
        model.compute_logits(hidden[last])
    # sdpa computes the whole q x c rectangle, so compare with the non-causal pair count.
    analytic = CostModel(TINY, Precision("fp32", "fp32", "fp32")).step(
        Batch.from_chunks(chunks, causal=False)
    )
    assert counter.get_total_flops() == analytic.flops
    assert analytic.attention_flops > 0 and analytic.lm_head_flops > 0
