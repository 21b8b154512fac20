"""fp8 (e4m3) KV cache (engine/model/kv_dtype.py, engine/model/attention.py) and the GQA presets.

Stated errors, measured on this CPU and bounded with 2.5-3.5x margin:
  * paged attention, fp8 cache vs fp32 cache, same q/k/v (K/V ~ N(0, 1), mixed decodes and
    prefill chunks): relative L2 error of the output 0.018 (scales 1.0) and 0.016 (scales
    from the data's range) -> bound 0.05; a bf16 cache gives 0.001. e4m3 keeps 3
    mantissa bits, so each stored value is off by at most 2^-4 of itself (RMS ~3.6%), and the
    softmax-weighted sum averages part of it away.
  * the random tiny model, 8 prompts of 8-40 tokens then 24 greedy decode steps, teacher
    forced (both runs are fed the fp32-cache run's greedy tokens, so one flipped argmax does
    not cascade into different contexts): relative L2 error of the decode logits 0.014 ->
    bound 0.05, and greedy agreement (share of decode steps whose argmax equals the fp32
    run's) 0.95 -> bound 0.85. A random model's logits are nearly flat, which makes argmax
    flips easier than in a trained model.
"""

from __future__ import annotations

import pytest
import torch

from engine.model.attention import AttentionMetadata, paged_attention, write_kv_cache
from engine.model.kv_dtype import (
    FP8_DTYPE,
    FP8_MAX,
    allocate_kv_caches,
    encode_kv,
    resolve_kv_cache_dtype,
    scales_from_amax,
)
from engine.model.llama import LlamaForCausalLM
from engine.model.weights import load_model
from perfmodel.presets import get_preset

CPU = torch.device("cpu")
BLOCK_SIZE = 8


def relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    return float((actual.float() - expected.float()).norm() / expected.float().norm())


def test_kv_cache_dtype_names_resolve() -> None:
    assert resolve_kv_cache_dtype("auto", torch.bfloat16) == torch.bfloat16
    assert resolve_kv_cache_dtype("fp8", torch.float32) == FP8_DTYPE
    assert resolve_kv_cache_dtype("fp8_e4m3", torch.float32) == FP8_DTYPE
    with pytest.raises(ValueError, match="kv_cache_dtype must be one of auto, fp8, fp8_e4m3"):
        resolve_kv_cache_dtype("int8", torch.float32)


def test_fp8_write_touches_only_its_slots_rounds_and_saturates() -> None:
    cache = torch.full((2, 4, BLOCK_SIZE, 2, 16), float("nan")).to(FP8_DTYPE)
    gen = torch.Generator().manual_seed(0)
    k, v = torch.randn(3, 2, 16, generator=gen), torch.randn(3, 2, 16, generator=gen)
    k[0, 0, 0], v[0, 0, 0] = 1000.0, -1e6  # beyond e4m3's range: must saturate, not NaN
    slots = torch.tensor([5, 17, 30])
    write_kv_cache(cache, slots, k, v)
    flat = cache.view(2, -1, 2, 16).float()
    written = flat[:, slots]
    assert torch.isnan(flat).sum() == flat.numel() - written.numel()
    assert written[0, 0, 0, 0] == FP8_MAX and written[1, 0, 0, 0] == -FP8_MAX
    expected = torch.stack((k, v)).clamp(-FP8_MAX, FP8_MAX)
    # Round to nearest with 3 mantissa bits: error <= 2^-4 relative, plus the subnormal step.
    assert ((written - expected).abs() <= expected.abs() / 16 + 2**-10).all()


def test_scales_divide_on_write() -> None:
    kv = torch.tensor([[2560.0, -9000.0], [0.5, 0.25]])  # 256 is exact in e4m3; 900 saturates
    stored = encode_kv(kv, FP8_DTYPE, k_scale=10.0, v_scale=0.5).float()
    assert torch.equal(stored, torch.tensor([[256.0, -FP8_MAX], [1.0, 0.5]]))
    assert scales_from_amax([224.0, 0.0], headroom=2.0) == [1.0, 1.0]


def attention_case(
    cache_dtype: torch.dtype, k_scale: float, v_scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """A mixed batch (3 decodes, a later prefill chunk, a first chunk), run twice: once to fill
    the context, once for the step under test. Returns (output, the fp32-cache output)."""
    gen = torch.Generator().manual_seed(3)
    shapes = [(19, 1), (7, 1), (33, 1), (26, 9), (12, 12)]  # (seq_len, query_len)
    tables = [[4 * i + j for j in range(5)] for i in range(len(shapes))]
    outputs = []
    for dtype in (cache_dtype, torch.float32):
        cache = torch.zeros(2, 4 * len(shapes), BLOCK_SIZE, 2, 16).to(dtype)
        kv = [
            torch.randn(2, ctx, 2, 16, generator=gen.manual_seed(3 + i))
            for i, (ctx, _) in enumerate(shapes)
        ]
        earlier = [ctx - q for ctx, q in shapes]
        fill = AttentionMetadata.build(earlier, earlier, tables, BLOCK_SIZE, 0)
        ks = torch.cat([x[0, :n] for x, n in zip(kv, earlier, strict=True)])
        vs = torch.cat([x[1, :n] for x, n in zip(kv, earlier, strict=True)])
        write_kv_cache(cache, fill.slot_mapping, ks, vs, k_scale, v_scale)
        meta = AttentionMetadata.build(
            [q for _, q in shapes], [c for c, _ in shapes], tables, BLOCK_SIZE, 3
        )
        k = torch.cat([x[0, n:] for x, n in zip(kv, earlier, strict=True)])
        v = torch.cat([x[1, n:] for x, n in zip(kv, earlier, strict=True)])
        q = torch.randn(k.shape[0], 8, 16, generator=gen.manual_seed(99))
        scales = (k_scale, v_scale) if dtype == cache_dtype else (1.0, 1.0)
        outputs.append(paged_attention(q, k, v, cache, meta, 16**-0.5, *scales))
    return outputs[0], outputs[1]


# 1.0 (the default) and scales that put |x| = 6 sigma at 336 (K) and 448 (V): both must give
# the same error, since e4m3's relative precision is the same across its normal range.
@pytest.mark.parametrize(("k_scale", "v_scale"), [(1.0, 1.0), (6 / 336, 6 / 448)])
def test_paged_attention_with_fp8_cache_is_close_to_fp32(k_scale: float, v_scale: float) -> None:
    fp8_out, fp32_out = attention_case(FP8_DTYPE, k_scale, v_scale)
    assert 0 < relative_error(fp8_out, fp32_out) < 0.05
    # The first prefill chunk attends to its own fresh K/V only: untouched by the cache dtype.
    assert torch.equal(fp8_out[-12:], fp32_out[-12:])


def teacher_forced_decode(
    model: LlamaForCausalLM,
    cache_dtype: torch.dtype,
    prompts: list[list[int]],
    steps: int,
    forced: list[list[int]] | None,
) -> tuple[torch.Tensor, list[list[int]]]:
    """Prefill all prompts in one step, then `steps` batched decode steps feeding `forced`
    tokens (or the run's own greedy ones). Returns decode logits [steps, S, V], tokens fed."""
    config, num_seqs = model.config, len(prompts)
    per_seq = -(-(max(map(len, prompts)) + steps + 1) // BLOCK_SIZE)
    tables = [list(range(i * per_seq, (i + 1) * per_seq)) for i in range(num_seqs)]
    caches = allocate_kv_caches(
        config.num_hidden_layers,
        num_seqs * per_seq,
        BLOCK_SIZE,
        config.num_key_value_heads,
        config.head_dim,
        cache_dtype,
        CPU,
    )
    seqs, fed, logits = [list(p) for p in prompts], [[] for _ in prompts], []
    lens = [len(p) for p in prompts]
    meta = AttentionMetadata.build(lens, lens, tables, BLOCK_SIZE, 0)
    with torch.inference_mode():
        ids = torch.tensor([t for s in seqs for t in s])
        hidden = model(ids, meta.token_positions(), caches, meta)
        step_logits = model.compute_logits(hidden[torch.tensor(meta.query_start_loc[1:]) - 1])
        for step in range(steps):
            greedy = step_logits.argmax(-1).tolist()
            for i, seq in enumerate(seqs):
                seq.append(forced[i][step] if forced else greedy[i])
                fed[i].append(seq[-1])
            meta = AttentionMetadata.build(
                [1] * num_seqs, [len(s) for s in seqs], tables, BLOCK_SIZE, num_seqs
            )
            hidden = model(
                torch.tensor([s[-1] for s in seqs]), meta.token_positions(), caches, meta
            )
            step_logits = model.compute_logits(hidden)
            logits.append(step_logits)
    return torch.stack(logits), fed


def test_tiny_model_decode_with_fp8_cache_agrees_with_fp32_cache() -> None:
    model = load_model(get_preset("tiny"), None, torch.float32, CPU, seed=0)
    gen = torch.Generator().manual_seed(0)
    lengths = torch.randint(8, 41, (8,), generator=gen).tolist()
    prompts = [torch.randint(2, 4096, (n,), generator=gen).tolist() for n in lengths]
    reference, fed = teacher_forced_decode(model, torch.float32, prompts, 24, None)
    fp8, _ = teacher_forced_decode(model, FP8_DTYPE, prompts, 24, fed)
    assert relative_error(fp8, reference) < 0.05
    agreement = (fp8.argmax(-1) == reference.argmax(-1)).float().mean().item()
    assert agreement >= 0.85


def test_kv_scales_live_on_the_model_and_are_validated() -> None:
    with torch.device("meta"):
        model = LlamaForCausalLM(get_preset("tiny"))
    assert model.kv_scales() == ([1.0] * 4, [1.0] * 4)
    model.set_kv_scales([0.5, 1, 2, 4], [1, 1, 1, 0.25])
    assert model.kv_scales() == ([0.5, 1.0, 2.0, 4.0], [1.0, 1.0, 1.0, 0.25])
    with pytest.raises(ValueError, match="one K and one V scale per layer"):
        model.set_kv_scales([1.0], [1.0])
    with pytest.raises(ValueError, match="layer 1: KV scales must be positive"):
        model.set_kv_scales([1, 0, 1, 1], [1, 1, 1, 1])


def test_fp8_cache_and_gqa_presets_shrink_kv_bytes_per_token() -> None:
    tiny, mha, mqa = (get_preset(n) for n in ("tiny", "tiny-mha", "tiny-mqa"))
    fp8_bytes = allocate_kv_caches(1, 1, 1, 1, 1, FP8_DTYPE, CPU)[0].element_size()
    assert fp8_bytes == 1
    assert tiny.kv_bytes_per_token(4) == 2 * 4 * 2 * 32 * 4 == 2048
    assert tiny.kv_bytes_per_token(fp8_bytes) == 512
    assert (mha.num_key_value_heads, mqa.num_key_value_heads) == (8, 1)
    assert mha.kv_bytes_per_token(4) == 4 * 2048 and mqa.kv_bytes_per_token(4) == 1024
    # Same model otherwise, and both run through the paged cache.
    for config in (mha, mqa):
        assert config.hidden_size == tiny.hidden_size and config.num_attention_heads == 8
        model = load_model(config, None, torch.float32, CPU)
        logits, _ = teacher_forced_decode(model, FP8_DTYPE, [[5, 6, 7]], 2, None)
        assert torch.isfinite(logits).all()
