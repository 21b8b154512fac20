"""The torch path's fused layers (engine/model/fused_step.py): few operators, the same numbers.

The operator count is a count, not a timing: torch.profiler lists every aten operator a forward
dispatches, the same on any machine. Numerics are checked against the plain layers (the same
model with the fused path switched off) on every kind of step and attention backend, and, on a
real-shaped model, against transformers' LlamaForCausalLM holding the very same weights.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import pytest
import torch
from torch.autograd.profiler_util import FunctionEvent
from transformers import LlamaConfig
from transformers import LlamaForCausalLM as HFLlama

from engine.config import EngineConfig
from engine.core.request import SamplingParams
from engine.llm_engine import LLMEngine
from engine.model import fused_step
from engine.model.attention import AttentionMetadata
from engine.model.llama import LlamaForCausalLM
from engine.model.weights import load_model
from perfmodel.model_config import ModelConfig
from perfmodel.presets import PRESETS, get_preset
from tests.support.engine_fixtures import make_engine, ragged_workload, run

CPU = torch.device("cpu")
BLOCK = 16
MAX_OPS_PER_LAYER = 40


def _leaf_aten_ops(events: Iterable[FunctionEvent]) -> int:
    return sum(
        1
        for e in events
        if e.name.startswith("aten::")
        and not any(c.name.startswith("aten::") for c in e.cpu_children)
    )


def _decode_ops(config: ModelConfig, batch: int) -> int:
    """Leaf aten ops of one decode forward of `batch` sequences of 20 cached tokens."""
    model = load_model(config, None, torch.float32, CPU, seed=0)
    assert fused_step.covers(model)
    caches = [torch.zeros(2, 4 * batch, BLOCK, config.num_key_value_heads, config.head_dim)
              for _ in model.layers]  # fmt: skip
    tables = [[2 * i, 2 * i + 1] for i in range(batch)]
    with torch.inference_mode():
        prompt = AttentionMetadata.build([20] * batch, [20] * batch, tables, BLOCK, 0)
        ids = torch.arange(20 * batch) % config.vocab_size
        model(ids, prompt.token_positions(), caches, prompt)
        step = AttentionMetadata.build([1] * batch, [21] * batch, tables, BLOCK, batch)
        ids, positions = torch.arange(batch), step.token_positions()
        model(ids, positions, caches, step)  # warm: lazy caches are made on first use
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            model(ids, positions, caches, step)
    return _leaf_aten_ops(prof.events())


@pytest.mark.parametrize("batch", [1, 3])
def test_torch_path_runs_few_operators_per_decode_layer(batch: int) -> None:
    base = get_preset("tiny")
    counts = {n: _decode_ops(dataclasses.replace(base, num_hidden_layers=n), batch) for n in (2, 4)}
    per_layer = (counts[4] - counts[2]) / 2
    assert per_layer <= MAX_OPS_PER_LAYER, counts


@pytest.mark.parametrize(
    "settings",
    [
        {"attention_backend": "torch"},
        {"attention_backend": "naive"},
        {"attention_backend": "native"},
        {"attention_backend": "torch", "max_num_batched_tokens": 24},  # chunked, mixed steps
    ],
    ids=["torch", "naive", "native", "chunked"],
)
def test_fused_layers_give_the_plain_layers_tokens(settings: dict) -> None:
    """Float32 engines with torch custom ops, fused and plain, on ragged greedy requests
    (prefills, mixed steps, decodes of changing batch sizes): the same tokens."""
    workload = ragged_workload(12, seed=3)
    fused = make_engine(custom_ops="torch", **settings)
    assert fused_step.covers(fused.executor.model)  # type: ignore[attr-defined]
    expected = run(fused, workload)
    plain = make_engine(custom_ops="torch", **settings)
    plain.executor.model.fused_layers = False  # type: ignore[attr-defined]
    assert run(plain, workload) == expected


def test_split_decode_gathers_and_fp8_cache_match_the_plain_layers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Decode groups split by a small gather budget (one group per sequence or two), and an
    fp8 cache (which keeps paged_attention): logits as the plain layers', one forward each."""
    config = get_preset("tiny")
    model = load_model(config, None, torch.float32, CPU, seed=0)
    tables = [[0, 1], [2, 3], [4, 5]]
    lens = [20, 9, 31]
    gen = torch.Generator().manual_seed(0)

    def forward(cache_dtype: torch.dtype) -> torch.Tensor:
        shape = (2, 8, BLOCK, config.num_key_value_heads, config.head_dim)
        caches = [torch.zeros(shape).to(cache_dtype) for _ in model.layers]
        gen.manual_seed(0)
        with torch.inference_mode():
            prompt = AttentionMetadata.build(lens, lens, tables, BLOCK, 0)
            ids = torch.randint(0, config.vocab_size, (sum(lens),), generator=gen)
            model(ids, prompt.token_positions(), caches, prompt)
            step = AttentionMetadata.build([1] * 3, [n + 1 for n in lens], tables, BLOCK, 3)
            ids = torch.randint(0, config.vocab_size, (3,), generator=gen)
            return model.compute_logits(model(ids, step.token_positions(), caches, step))

    # Two sequences' padded K/V of 32 positions fit, three do not: groups of 2 and 1 (the
    # plain layers gather all three at once).
    budget = 2 * 2 * config.num_key_value_heads * 32 * config.head_dim * 4
    monkeypatch.setattr(fused_step, "DECODE_GATHER_BUDGET_BYTES", budget)
    results = {dtype: forward(dtype) for dtype in (torch.float32, torch.float8_e4m3fn)}
    model.fused_layers = False
    for dtype, logits in results.items():
        torch.testing.assert_close(logits, forward(dtype), atol=1e-5, rtol=0)


# ---- a real-shaped model against transformers -------------------------------------------------

REAL = dataclasses.replace(
    get_preset("llama-3-8b"), name="llama-3-8b-2l-v32000", num_hidden_layers=2, vocab_size=32000
)
PROMPTS = 3
PROMPT_LEN = 48
NEW_TOKENS = 16


def _hf_sharing(model: LlamaForCausalLM) -> HFLlama:
    """transformers' Llama whose parameters are views of `model`'s (no copy of 2.8 GB)."""
    c = model.config
    hf_config = LlamaConfig(
        vocab_size=c.vocab_size, hidden_size=c.hidden_size,
        intermediate_size=c.intermediate_size, num_hidden_layers=c.num_hidden_layers,
        num_attention_heads=c.num_attention_heads, num_key_value_heads=c.num_key_value_heads,
        head_dim=c.head_dim, max_position_embeddings=c.max_position_embeddings,
        rms_norm_eps=c.rms_norm_eps, rope_parameters={"rope_type": "default",
        "rope_theta": c.rope_theta}, tie_word_embeddings=c.tie_word_embeddings,
    )  # fmt: skip
    hf_config._attn_implementation = "eager"
    with torch.device("meta"):
        hf = HFLlama(hf_config)
    for name, slot in model.hf_weight_slots().items():
        owner, _, leaf = name.rpartition(".")
        rows = slot.param.detach()[slot.row_start : slot.row_start + slot.shape[0]]
        hf.get_submodule(owner).register_parameter(
            leaf, torch.nn.Parameter(rows.view(slot.shape), requires_grad=False)
        )
    rotary = type(hf.model.rotary_emb)(hf_config)  # its inv_freq, real rather than meta
    hf.model.rotary_emb = rotary
    return hf.eval()


def test_real_shaped_model_gives_transformers_greedy_tokens(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """llama-3-8b cut to 2 layers (vocab 32,000, float32): 16 greedy tokens of 3 prompts of 48
    tokens, on the torch path (the fused layers) and with the default kernels, equal the argmax
    of transformers' logits over the same sequence, and every sampled row's logits are within
    1e-4 of transformers' largest logit."""
    monkeypatch.setitem(PRESETS, REAL.name, REAL)
    gen = torch.Generator().manual_seed(5)
    prompts = [torch.randint(3, REAL.vocab_size, (PROMPT_LEN,), generator=gen).tolist()
               for _ in range(PROMPTS)]  # fmt: skip
    params = SamplingParams(max_tokens=NEW_TOKENS, temperature=0.0, ignore_eos=True)
    expected: list[torch.Tensor] = []
    for backend in ("torch", "auto"):
        settings = {"model": REAL.name, "dtype": "float32", "device": "cpu", "seed": 0,
                    "attention_backend": backend, "custom_ops": backend,
                    "kv_cache_memory_bytes": 64 * 1024**2}  # fmt: skip
        engine = LLMEngine(EngineConfig.from_flat(settings))
        model = engine.executor.model  # type: ignore[attr-defined]
        assert fused_step.covers(model) == (backend == "torch")
        rows: list[torch.Tensor] = []
        compute_logits = model.compute_logits

        def recorded(hidden: torch.Tensor, compute=compute_logits, rows=rows) -> torch.Tensor:
            rows.append(compute(hidden))
            return rows[-1]

        monkeypatch.setattr(model, "compute_logits", recorded)
        tokens = [engine.generate([p], params)[0] for p in prompts]  # one at a time: 1 row a step
        if not expected:
            hf = _hf_sharing(model)
            with torch.inference_mode():
                for prompt, out in zip(prompts, tokens, strict=True):
                    seq = torch.tensor(prompt + out[:-1])[None]
                    expected.append(hf(seq).logits[0, PROMPT_LEN - 1 :].float())
            del hf
        ours = torch.cat(rows).view(PROMPTS, NEW_TOKENS, -1)
        for want, got, out in zip(expected, ours, tokens, strict=True):
            assert want.argmax(-1).tolist() == out
            scale = want.abs().max().item()
            torch.testing.assert_close(got, want, atol=1e-4 * scale, rtol=0)
        del engine, model, rows
