"""Named model shapes: a tiny random model for tests and CPU benchmarks, and real Llama-3 shapes.

The Llama-3 entries reproduce Meta's published config.json files (Meta-Llama-3-8B/70B, whose
parameter counts are 8,030,261,248 and 70,553,706,496) so the analytic model and the simulated
executor can size weights and KV cache without downloading anything. Their eos ids are the
instruct models' (<|end_of_text|> 128001 and <|eot_id|> 128009), which also end base-model runs.
Llama-3-405B (Llama-3.1's), Llama-2-7B (the LLaMA-7B shape, multi-head attention) and Mistral-7B
are there for the analytic commands (`bench roofline`, `bench capacity`); each states its source.
"""

from __future__ import annotations

from dataclasses import replace

from perfmodel.model_config import ModelConfig

# The tiny model pairs with Tokenizer.for_preset(4096), whose special tokens are <s>=0 and </s>=1.
TINY = ModelConfig(
    name="tiny",
    vocab_size=4096,
    hidden_size=256,
    intermediate_size=704,
    num_hidden_layers=4,
    num_attention_heads=8,
    num_key_value_heads=2,
    head_dim=32,
    max_position_embeddings=2048,
    rms_norm_eps=1e-5,
    rope_theta=10000.0,
    rope_scaling=None,
    tie_word_embeddings=False,
    bos_token_id=0,
    eos_token_ids=(1,),
    # bfloat16 as the larger presets: the engine's dtype "auto" then runs it in bf16 on a CPU
    # with native bf16 (AVX512-BF16 or AMX: 1.7x the decode tokens/s of fp32 on a 2-core Xeon)
    # and in float32 where bf16 would be emulated, slower than fp32 (engine.llm_engine).
    dtype="bfloat16",
)

# The tiny model with other KV head counts, for GQA ablations: identical but for the K/V
# projection width, so KV bytes per token go 4x up (multi-head, 8 KV heads) or 2x down
# (multi-query, 1 KV head) from tiny's 2 KV heads.
TINY_MHA = replace(TINY, name="tiny-mha", num_key_value_heads=8)
TINY_MQA = replace(TINY, name="tiny-mqa", num_key_value_heads=1)

LLAMA_3_8B = ModelConfig(
    name="llama-3-8b",
    vocab_size=128256,
    hidden_size=4096,
    intermediate_size=14336,
    num_hidden_layers=32,
    num_attention_heads=32,
    num_key_value_heads=8,
    head_dim=128,
    max_position_embeddings=8192,
    rms_norm_eps=1e-5,
    rope_theta=500000.0,
    rope_scaling=None,
    tie_word_embeddings=False,
    bos_token_id=128000,
    eos_token_ids=(128001, 128009),
    dtype="bfloat16",
)

LLAMA_3_70B = ModelConfig(
    name="llama-3-70b",
    vocab_size=128256,
    hidden_size=8192,
    intermediate_size=28672,
    num_hidden_layers=80,
    num_attention_heads=64,
    num_key_value_heads=8,
    head_dim=128,
    max_position_embeddings=8192,
    rms_norm_eps=1e-5,
    rope_theta=500000.0,
    rope_scaling=None,
    tie_word_embeddings=False,
    bos_token_id=128000,
    eos_token_ids=(128001, 128009),
    dtype="bfloat16",
)


# Llama-3.1-405B's published config.json (there is no Llama-3 405B without the .1): 405,853,388,800
# parameters, llama3 RoPE scaling to a 131,072-token context.
LLAMA_3_405B = ModelConfig(
    name="llama-3-405b",
    vocab_size=128256,
    hidden_size=16384,
    intermediate_size=53248,
    num_hidden_layers=126,
    num_attention_heads=128,
    num_key_value_heads=8,
    head_dim=128,
    max_position_embeddings=131072,
    rms_norm_eps=1e-5,
    rope_theta=500000.0,
    rope_scaling={
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    },
    tie_word_embeddings=False,
    bos_token_id=128000,
    eos_token_ids=(128001, 128008, 128009),
    dtype="bfloat16",
)

# Llama-2-7B (meta-llama/Llama-2-7b-hf): the LLaMA-7B shape, multi-head attention (32 KV heads),
# 6,738,415,616 parameters.
LLAMA_2_7B = ModelConfig(
    name="llama-2-7b",
    vocab_size=32000,
    hidden_size=4096,
    intermediate_size=11008,
    num_hidden_layers=32,
    num_attention_heads=32,
    num_key_value_heads=32,
    head_dim=128,
    max_position_embeddings=4096,
    rms_norm_eps=1e-5,
    rope_theta=10000.0,
    rope_scaling=None,
    tie_word_embeddings=False,
    bos_token_id=1,
    eos_token_ids=(2,),
    dtype="float16",
)

# Mistral-7B-v0.3 (no sliding window, unlike v0.1): 7,248,023,552 parameters.
MISTRAL_7B = ModelConfig(
    name="mistral-7b",
    vocab_size=32768,
    hidden_size=4096,
    intermediate_size=14336,
    num_hidden_layers=32,
    num_attention_heads=32,
    num_key_value_heads=8,
    head_dim=128,
    max_position_embeddings=32768,
    rms_norm_eps=1e-5,
    rope_theta=1000000.0,
    rope_scaling=None,
    tie_word_embeddings=False,
    bos_token_id=1,
    eos_token_ids=(2,),
    dtype="bfloat16",
)


class UnknownPresetError(KeyError, ValueError):
    """An unknown preset name: a KeyError for dict-like callers, printed without repr quotes."""

    def __str__(self) -> str:
        return str(self.args[0])


PRESETS: dict[str, ModelConfig] = {
    c.name: c
    for c in (
        TINY,
        TINY_MHA,
        TINY_MQA,
        LLAMA_3_8B,
        LLAMA_3_70B,
        LLAMA_3_405B,
        LLAMA_2_7B,
        MISTRAL_7B,
    )
}


def get_preset(name: str) -> ModelConfig:
    """Return the preset called `name`; an unknown name raises UnknownPresetError listing them."""
    try:
        return PRESETS[name]
    except KeyError:
        raise UnknownPresetError(
            f"unknown model preset {name!r}; known presets: {', '.join(sorted(PRESETS))} "
            "(or pass a Hugging Face model directory instead)"
        ) from None
