"""The C kernels (paged decode attention, small-batch linear, add + RMSNorm) against torch,
and the engine switches that use them."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest
import torch
import torch.nn.functional as F

from engine.config import EngineConfig
from engine.core.request import SamplingParams
from engine.model.attention import AttentionMetadata, paged_attention
from engine.native import attention as native_attention
from engine.native.linear import small_batch_linear
from engine.native.norm import fused_add_rms_norm
from tests.support.engine_fixtures import make_engine, ragged_workload

WHY = native_attention.available()
pytestmark = pytest.mark.skipif(WHY is not None, reason=f"native kernel unavailable: {WHY}")

SHAPES = [  # (query heads, KV heads, head_dim): GQA, MHA, MQA, odd groups, vector and portable
    (8, 2, 32), (8, 8, 32), (8, 1, 32), (6, 2, 32), (16, 2, 64), (8, 8, 128), (4, 2, 48),
    (12, 4, 16),
]  # fmt: skip


@pytest.fixture(params=[False, True], ids=["vector", "portable"])
def path(request: pytest.FixtureRequest) -> Iterator[bool]:
    lib = native_attention.load()
    lib.paged_decode_attention_force_portable(int(request.param))
    yield request.param
    lib.paged_decode_attention_force_portable(0)


def _batch(heads: int, kv_heads: int, head_dim: int, dtype: torch.dtype, seed: int):
    """Decode sequences of 1..200 tokens (block edges included) over shuffled blocks."""
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    block_size, num_blocks = 16, 400
    cache = torch.randn(2, num_blocks, block_size, kv_heads, head_dim, generator=gen).to(dtype)
    lens = [1, 15, 16, 17, 32, 200] + [rng.randint(1, 200) for _ in range(17)]
    free = list(range(num_blocks))
    rng.shuffle(free)
    tables = [[free.pop() for _ in range(-(-n // block_size))] for n in lens]
    meta = AttentionMetadata.build([1] * len(lens), lens, tables, block_size, len(lens))
    q, k, v = (
        torch.randn(len(lens), h, head_dim, generator=gen).to(dtype)
        for h in (heads, kv_heads, kv_heads)
    )
    return q, k, v, cache, meta


@pytest.mark.parametrize(("heads", "kv_heads", "head_dim"), SHAPES)
def test_fp32_matches_torch_path(path: bool, heads: int, kv_heads: int, head_dim: int) -> None:
    q, k, v, cache, meta = _batch(heads, kv_heads, head_dim, torch.float32, seed=heads + head_dim)
    ref_cache, ours_cache = cache.clone(), cache.clone()
    ref = paged_attention(q, k, v, ref_cache, meta, head_dim**-0.5, v_scale=0.5)
    meta.native_decode = True
    meta._plan = None
    ours = paged_attention(q, k, v, ours_cache, meta, head_dim**-0.5, v_scale=0.5)
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-5)
    assert torch.equal(ours_cache, ref_cache)  # the step's K/V were written the same way


@pytest.mark.parametrize(("heads", "kv_heads", "head_dim"), SHAPES[:5])
def test_bf16_matches_fp32_math(path: bool, heads: int, kv_heads: int, head_dim: int) -> None:
    """bf16 in and out, fp32 inside: within one bf16 rounding of the fp32 result computed from
    the same bf16 values (the torch path also rounds the probabilities, so it is further)."""
    q, k, v, cache, meta = _batch(heads, kv_heads, head_dim, torch.bfloat16, seed=7)
    exact_cache = cache.float()
    ref = paged_attention(q.float(), k.float(), v.float(), exact_cache, meta, head_dim**-0.5)
    meta.native_decode = True
    meta._plan = None
    ours = paged_attention(q, k, v, cache, meta, head_dim**-0.5)
    assert ours.dtype == torch.bfloat16
    torch.testing.assert_close(ours.float(), ref, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_mixed_step_matches_torch_path(path: bool, dtype: torch.dtype) -> None:
    """Decodes, a first prefill chunk and chunks that continue a prompt (prefix in the cache)
    in one step: the kernel takes every row, each prefill token over its own causal prefix."""
    rng = random.Random(3)
    gen = torch.Generator().manual_seed(3)
    block_size, num_blocks = 16, 64
    cache = torch.randn(2, num_blocks, block_size, 2, 32, generator=gen).to(dtype)
    query_lens, seq_lens = [1, 1, 37, 5, 20], [40, 17, 37, 70, 20]
    free = list(range(num_blocks))
    rng.shuffle(free)
    tables = [[free.pop() for _ in range(-(-n // block_size))] for n in seq_lens]
    meta = AttentionMetadata.build(query_lens, seq_lens, tables, block_size, 2)
    t = sum(query_lens)
    q, k, v = (torch.randn(t, h, 32, generator=gen).to(dtype) for h in (8, 2, 2))
    ref_cache, ours_cache = cache.clone(), cache.clone()
    ref = paged_attention(q.float(), k.float(), v.float(), ref_cache.float(), meta, 32**-0.5)
    meta.native_decode = True
    meta._plan = None
    ours = paged_attention(q, k, v, ours_cache, meta, 32**-0.5)
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    torch.testing.assert_close(ours.float(), ref, rtol=tol, atol=tol)


def test_narrow_block_table_is_refused() -> None:
    q, k, v, cache, meta = _batch(8, 2, 32, torch.float32, seed=1)
    meta.block_tables = meta.block_tables[:, :2]  # too few columns for the longer sequences
    meta.native_decode = True
    with pytest.raises(ValueError, match="widen block_tables"):
        paged_attention(q, k, v, cache, meta, 32**-0.5)


def test_unsupported_dtype_is_refused_by_the_kernel() -> None:
    q = torch.zeros(1, 8, 32, dtype=torch.float16)
    cache = torch.zeros(2, 4, 16, 2, 32, dtype=torch.float16)
    with pytest.raises(ValueError, match="float32/bfloat16"):
        native_attention.paged_decode_attention(
            q, cache, torch.zeros(1, 1, dtype=torch.int64), torch.ones(1, dtype=torch.int64), 1.0
        )


def test_engine_greedy_tokens_match_between_backends() -> None:
    """Same tokens from the whole engine (chunked prefill, a batch of 32) on either backend."""
    workload = ragged_workload(32)
    outputs = {}
    for backend in ("torch", "native"):
        engine = make_engine(attention_backend=backend, max_num_batched_tokens=64)
        assert engine.describe()["attention_backend"] == backend
        outputs[backend] = engine.generate([p for p, _ in workload], [s for _, s in workload])
    assert outputs["native"] == outputs["torch"]


def test_native_backend_on_an_uncovered_dtype_names_the_fix() -> None:
    with pytest.raises(ValueError, match="attention_backend='native' cannot run here"):
        make_engine(attention_backend="native", kv_cache_dtype="fp8")
    # auto falls back to the torch path instead
    assert make_engine(kv_cache_dtype="fp8").describe()["attention_backend"] == "torch"


def test_bad_backend_name_is_refused() -> None:
    with pytest.raises(ValueError, match="attention_backend must be one of"):
        EngineConfig.from_flat(dict(attention_backend="flash"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [1, 2, 3, 4])
@pytest.mark.parametrize(("n", "k"), [(1408, 256), (256, 704), (4099, 256), (7, 48)])
def test_small_batch_linear_matches_f_linear(dtype: torch.dtype, rows: int, n: int, k: int):
    """Row counts up to 4, widths that are and are not multiples of 4 rows (the tail)."""
    gen = torch.Generator().manual_seed(n + k + rows)
    x = torch.randn(rows, k, generator=gen).to(dtype)
    w = torch.randn(n, k, generator=gen).to(dtype)
    ours = small_batch_linear(x, w)
    assert ours.dtype == dtype and ours.shape == (rows, n)
    exact = F.linear(x.float(), w.float())
    tol = 1e-5 if dtype == torch.float32 else 1e-2  # bf16: one rounding of the output
    torch.testing.assert_close(ours.float(), exact, rtol=tol, atol=tol * exact.abs().max().item())


def test_small_batch_linear_refuses_what_it_does_not_cover() -> None:
    with pytest.raises(ValueError, match="multiple of 16"):
        small_batch_linear(torch.zeros(5, 32), torch.zeros(8, 32))  # 5 rows
    with pytest.raises(ValueError, match="multiple of 16"):
        small_batch_linear(torch.zeros(1, 40), torch.zeros(8, 40))


def test_engine_greedy_tokens_match_with_and_without_custom_ops() -> None:
    workload = [(p, s) for p, s in ragged_workload(4, seed=11)]  # 4 streams: 1..4 rows per step
    outputs = {}
    for backend in ("torch", "native"):
        engine = make_engine(custom_ops=backend)
        assert engine.describe()["custom_ops"] == backend
        outputs[backend] = engine.generate([p for p, _ in workload], [s for _, s in workload])
    assert outputs["native"] == outputs["torch"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("with_residual", [False, True])
def test_fused_add_rms_norm_rounds_as_hf(dtype: torch.dtype, with_residual: bool) -> None:
    """HF's LlamaRMSNorm after HF's residual add, to the rounding of the mean's last bit (its
    summation order differs from torch's): bf16 outputs nearly all equal, the others a step or
    two apart (a step of the normalised value, then the weight's multiply), fp32 within 1e-6.
    The residual sum is exact, and the inputs are left as they were."""
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(37, 256, generator=gen).to(dtype)
    residual = torch.randn(37, 256, generator=gen).to(dtype) if with_residual else None
    weight = (1 + 0.1 * torch.randn(256, generator=gen)).to(dtype)
    x_before = x.clone()
    summed = x if residual is None else x + residual
    h32 = summed.float()
    expected = weight * (h32 * torch.rsqrt(h32.pow(2).mean(-1, keepdim=True) + 1e-5)).to(dtype)
    out, new_residual = fused_add_rms_norm(x, residual, weight, 1e-5)
    assert torch.equal(new_residual, summed)
    assert torch.equal(x, x_before)
    if dtype == torch.bfloat16:
        two_steps = expected.float().abs() * 2**-6  # a bf16 step is at most 2^-7 relative
        assert ((out.float() - expected.float()).abs() <= two_steps).all()
        assert (out == expected).float().mean() > 0.99
    else:
        torch.testing.assert_close(out, expected, rtol=1e-6, atol=1e-6)


def test_without_a_compiler_auto_falls_back_and_native_says_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from engine.native import lib as native_lib

    monkeypatch.setenv("CC", "no-such-cc")
    monkeypatch.setattr(native_lib, "_state", {})  # forget the library this process loaded
    assert "no C compiler" in (native_lib.available() or "")
    engine = make_engine()
    described = engine.describe()
    assert (described["attention_backend"], described["custom_ops"]) == ("torch", "torch")
    out = engine.generate(
        [[5, 6, 7]], SamplingParams(max_tokens=3, temperature=0.0, ignore_eos=True)
    )
    assert len(out[0]) == 3
    with pytest.raises(ValueError, match="no C compiler"):
        make_engine(attention_backend="native")
    with pytest.raises(ValueError, match="no C compiler"):
        make_engine(custom_ops="native")
