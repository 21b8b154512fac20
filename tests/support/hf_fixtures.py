"""Test helpers: tiny random Hugging Face Llama directories, built offline.

`make_hf_model_dir(path, **config_overrides)` writes what a downloaded model directory holds:
config.json and safetensors weights (transformers' save_pretrained) plus tokenizer.json and
tokenizer_config.json (a synthetic byte-level BPE with <s>/</s> and a chat template). Other test
modules reuse it; transformers is a test-only dependency, so it is imported only here and in tests.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from engine.tokenizer.tokenizer import Tokenizer

# Small enough that building, saving and running a model takes well under a second on one core.
TINY_HF_CONFIG: dict[str, Any] = {
    "vocab_size": 512,
    "hidden_size": 64,
    "intermediate_size": 160,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "max_position_embeddings": 256,
    "rms_norm_eps": 1e-5,
    "bos_token_id": 0,  # the synthetic tokenizer's <s>
    "eos_token_id": 1,  # and </s>
    "tie_word_embeddings": False,
    # 10x HF's default std: attention scores of O(1) make attention peaked rather than nearly
    # uniform, so a wrong mask, position or cache slot visibly changes the logits.
    "initializer_range": 0.2,
}


def build_hf_model(seed: int = 0, **config_overrides: Any) -> LlamaForCausalLM:
    """A random fp32 transformers LlamaForCausalLM (eager attention, eval mode).

    Norm gains are drawn around 1 rather than left at 1, so a loader that drops or swaps a norm
    weight changes the logits. `rope_theta` / `rope_scaling` overrides are folded into
    transformers 5's `rope_parameters`.
    """
    settings = {**TINY_HF_CONFIG, **config_overrides}
    rope = dict(settings.pop("rope_scaling", None) or {"rope_type": "default"})
    rope["rope_theta"] = float(settings.pop("rope_theta", 10000.0))
    settings.setdefault("rope_parameters", rope)
    config = LlamaConfig(**settings)
    config._attn_implementation = "eager"  # the plainest reference implementation
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.copy_(1.0 + 0.1 * torch.randn_like(param))
    return model


def make_hf_model(
    path: Path,
    seed: int = 0,
    max_shard_size: str | int | None = None,
    dtype: torch.dtype | None = None,
    **config_overrides: Any,
) -> tuple[Path, LlamaForCausalLM]:
    """Write a random tiny Llama model and its tokenizer into `path`; return (path, HF model).

    max_shard_size (e.g. "60KB") splits the weights into shards with an index file; dtype
    (e.g. torch.bfloat16) stores the weights in it, and config.json says so.
    """
    path.mkdir(parents=True, exist_ok=True)
    model = build_hf_model(seed, **config_overrides)
    if dtype is not None:
        model = model.to(dtype)
    save_kwargs: dict[str, Any] = (
        {} if max_shard_size is None else {"max_shard_size": max_shard_size}
    )
    model.save_pretrained(path, **save_kwargs)
    Tokenizer.for_preset(model.config.vocab_size, use_cache=False).save(path)
    return path, model


def make_hf_model_dir(
    path: Path, dtype: torch.dtype | None = None, **config_overrides: Any
) -> Path:
    """Write a random tiny Llama (config.json, safetensors, tokenizer files) into `path`."""
    return make_hf_model(path, dtype=dtype, **config_overrides)[0]
