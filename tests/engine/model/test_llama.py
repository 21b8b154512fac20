"""The engine's Llama model against transformers' LlamaForCausalLM, and the weight loader.

Tolerance: fp32 logits within atol 1e-4 of transformers (logits are O(5) here, and the two
implementations differ only in summation order: observed differences are ~1e-5). bf16 is
checked against the fp32 reference relative to transformers' own bf16 error (bf16 carries ~3
significant digits, so no fixed atol is meaningful).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from engine.model.attention import AttentionMetadata
from engine.model.llama import LlamaForCausalLM
from engine.model.weights import WeightsError, load_hf_directory, load_model
from perfmodel.model_config import ModelConfig
from perfmodel.presets import get_preset
from tests.support.hf_fixtures import make_hf_model

FP32_ATOL = 1e-4
BLOCK_SIZE = 4
NUM_BLOCKS = 64
CPU = torch.device("cpu")


def new_caches(config: ModelConfig, dtype: torch.dtype = torch.float32) -> list[torch.Tensor]:
    """NaN-filled caches: any read of a slot that was never written would poison the logits."""
    shape = (2, NUM_BLOCKS, BLOCK_SIZE, config.num_key_value_heads, config.head_dim)
    return [torch.full(shape, float("nan"), dtype=dtype) for _ in range(config.num_hidden_layers)]


def run_step(
    model: LlamaForCausalLM,
    caches: list[torch.Tensor],
    steps: list[tuple[torch.Tensor, int, list[int]]],
    num_decode_seqs: int,
) -> torch.Tensor:
    """One engine step. `steps` holds per sequence (new token ids, seq_len after them, blocks);
    returns fp32 logits for every new token in batch order."""
    meta = AttentionMetadata.build(
        [len(ids) for ids, _, _ in steps],
        [seq_len for _, seq_len, _ in steps],
        [blocks for _, _, blocks in steps],
        BLOCK_SIZE,
        num_decode_seqs,
    )
    input_ids = torch.cat([ids for ids, _, _ in steps])
    with torch.inference_mode():
        return model.compute_logits(model(input_ids, meta.token_positions(), caches, meta))


def hf_logits(hf_model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        return hf_model(ids[None]).logits[0].float()


def load_dir(path: Path, dtype: torch.dtype = torch.float32) -> LlamaForCausalLM:
    config, directory = load_hf_directory(path)
    return load_model(config, directory, dtype, CPU)


def test_whole_prefill_matches_transformers(tmp_path: Path) -> None:
    path, hf = make_hf_model(tmp_path)
    model = load_dir(path)
    ids = torch.randint(
        0, model.config.vocab_size, (45,), generator=torch.Generator().manual_seed(1)
    )
    blocks = torch.randperm(NUM_BLOCKS)[:12].tolist()
    logits = run_step(model, new_caches(model.config), [(ids, len(ids), blocks)], 0)
    torch.testing.assert_close(logits, hf_logits(hf, ids), atol=FP32_ATOL, rtol=0)


def test_chunked_prefill_then_decode_matches_transformers(tmp_path: Path) -> None:
    """Three sequences share a NaN-filled cache through random non-contiguous block tables;
    batches mix decodes with prefill chunks that start mid-prompt, teacher-forced."""
    path, hf = make_hf_model(tmp_path)
    model = load_dir(path)
    gen = torch.Generator().manual_seed(2)
    lengths = (30, 23, 17)  # prompt + decoded tokens of each sequence
    seqs = [torch.randint(0, model.config.vocab_size, (n,), generator=gen) for n in lengths]
    free = torch.randperm(NUM_BLOCKS, generator=gen).tolist()
    tables = [[free.pop() for _ in range(-(-n // BLOCK_SIZE))] for n in lengths]
    expected = [hf_logits(hf, s) for s in seqs]
    caches = new_caches(model.config)
    done = [0, 0, 0]  # tokens of each sequence already in the cache

    def check(batch: list[tuple[int, int]], num_decode: int) -> None:
        """batch: (sequence, number of new tokens), decodes first."""
        steps = []
        for s, n in batch:
            steps.append((seqs[s][done[s] : done[s] + n], done[s] + n, tables[s]))
        logits = run_step(model, caches, steps, num_decode)
        row = 0
        for s, n in batch:
            want = expected[s][done[s] : done[s] + n]
            torch.testing.assert_close(logits[row : row + n], want, atol=FP32_ATOL, rtol=0)
            row, done[s] = row + n, done[s] + n

    check([(0, 7), (1, 5)], 0)  # two first chunks
    check([(0, 9), (1, 10), (2, 6)], 0)  # two mid-prompt chunks and a first chunk
    check([(0, 1), (1, 1), (2, 8)], 2)  # decodes of 0 and 1 beside a mid-prompt chunk of 2
    while min(done[s] + 1 - lengths[s] for s in range(3)) <= 0:
        batch = [(s, 1) for s in range(3) if done[s] < lengths[s]]
        check(batch, len(batch))  # pure decode steps until every sequence is complete


@pytest.mark.parametrize(
    "overrides",
    [
        {"tie_word_embeddings": True},
        {"num_key_value_heads": 4},  # multi-head attention, no grouping
        {
            "rope_theta": 500000.0,
            "rope_scaling": {
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 32,  # < sequence length: scaling matters
            },
        },
    ],
    ids=["tied", "mha", "llama3-rope"],
)
def test_config_variants_match_transformers(tmp_path: Path, overrides: dict) -> None:
    path, hf = make_hf_model(tmp_path, **overrides)
    model = load_dir(path)
    ids = torch.randint(
        0, model.config.vocab_size, (60,), generator=torch.Generator().manual_seed(3)
    )
    logits = run_step(model, new_caches(model.config), [(ids, 60, list(range(15)))], 0)
    torch.testing.assert_close(logits, hf_logits(hf, ids), atol=FP32_ATOL, rtol=0)


def test_bfloat16_stays_close_to_fp32_reference(tmp_path: Path) -> None:
    path, hf = make_hf_model(tmp_path)
    model = load_dir(path, torch.bfloat16)
    assert model.embed_tokens.weight.dtype == torch.bfloat16
    ids = torch.randint(
        0, model.config.vocab_size, (20,), generator=torch.Generator().manual_seed(4)
    )
    caches = new_caches(model.config, torch.bfloat16)
    prefill = run_step(model, caches, [(ids[:19], 19, [5, 9, 2, 7, 11])], 0)
    decode = run_step(model, caches, [(ids[19:], 20, [5, 9, 2, 7, 11])], 1)
    logits, want = torch.cat([prefill, decode]), hf_logits(hf, ids)
    assert logits.dtype == torch.float32
    # bf16 keeps 8 mantissa bits, so compare error budgets rather than values: ours may stray
    # from the fp32 reference at most twice as far as transformers' own bf16 run does (~3%).
    hf_bf16_error = (hf_logits(hf.to(torch.bfloat16), ids) - want).abs().max()
    assert (logits - want).abs().max() <= 2 * hf_bf16_error


def test_sharded_checkpoint_loads_like_single_file(tmp_path: Path) -> None:
    path, hf = make_hf_model(tmp_path / "sharded", max_shard_size="40KB")
    assert (path / "model.safetensors.index.json").is_file()
    assert len(list(path.glob("*.safetensors"))) > 2
    model = load_dir(path)
    ids = torch.arange(1, 30)
    logits = run_step(model, new_caches(model.config), [(ids, 29, list(range(8)))], 0)
    torch.testing.assert_close(logits, hf_logits(hf, ids), atol=FP32_ATOL, rtol=0)


def test_missing_tensor_is_named(tmp_path: Path) -> None:
    path, _ = make_hf_model(tmp_path)
    tensors = load_file(path / "model.safetensors")
    del tensors["model.layers.1.mlp.up_proj.weight"]
    save_file(tensors, path / "model.safetensors", metadata={"format": "pt"})
    config, directory = load_hf_directory(path)
    with pytest.raises(WeightsError, match=r"model\.layers\.1\.mlp\.up_proj\.weight") as info:
        load_model(config, directory, torch.float32, CPU)
    assert str(directory) in str(info.value)


def test_wrong_shape_names_expected_and_found(tmp_path: Path) -> None:
    path, _ = make_hf_model(tmp_path)
    tensors = load_file(path / "model.safetensors")
    tensors["model.layers.0.self_attn.k_proj.weight"] = torch.zeros(16, 64)
    save_file(tensors, path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(WeightsError) as info:
        load_dir(path)
    message = str(info.value)
    assert "model.layers.0.self_attn.k_proj.weight" in message
    assert "(16, 64)" in message and "(32, 64)" in message


def test_unexpected_tensor_and_empty_directory_are_rejected(tmp_path: Path) -> None:
    path, _ = make_hf_model(tmp_path / "model")
    tensors = load_file(path / "model.safetensors")
    tensors["model.layers.0.self_attn.q_proj.bias"] = torch.zeros(64)
    save_file(tensors, path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(WeightsError, match=r"q_proj\.bias"):
        load_dir(path)
    (path / "model.safetensors").unlink()
    with pytest.raises(WeightsError, match=r"no \*\.safetensors"):
        load_hf_directory(path)


def test_random_init_is_seeded_and_well_behaved() -> None:
    config = ModelConfig.from_hf_config(
        {
            "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 1,
            "max_position_embeddings": 64, "torch_dtype": "bfloat16",
        },
        name="random",
    )  # fmt: skip
    a = load_model(config, None, torch.float32, CPU, seed=7)
    b = load_model(config, None, torch.float32, CPU, seed=7)
    c = load_model(config, None, torch.float32, CPU, seed=8)
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters(), strict=True))
    assert not torch.equal(a.embed_tokens.weight, c.embed_tokens.weight)
    ids = torch.arange(10)
    logits = run_step(a, new_caches(config), [(ids, 10, [3, 1, 4])], 0)
    assert torch.isfinite(logits).all() and logits.abs().max() < 10
    bf16 = load_model(config, None, torch.bfloat16, CPU, seed=7)
    assert torch.isfinite(
        run_step(bf16, new_caches(config, torch.bfloat16), [(ids, 10, [3, 1, 4])], 0)
    ).all()


LLAMA_3_1_CONFIG = {  # the published Llama-3.1-8B-Instruct config.json (transformers 4.x keys)
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
    "vocab_size": 128256, "hidden_size": 4096, "intermediate_size": 14336,
    "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
    "max_position_embeddings": 131072, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
    "rope_scaling": {
        "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192, "rope_type": "llama3",
    },
    "tie_word_embeddings": False, "bos_token_id": 128000,
    "eos_token_id": [128001, 128008, 128009], "torch_dtype": "bfloat16",
}  # fmt: skip


def test_config_from_hf_dicts_and_directories(tmp_path: Path) -> None:
    config = ModelConfig.from_hf_config(LLAMA_3_1_CONFIG, name="llama-3.1-8b")
    assert config.head_dim == 128 and config.rope_theta == 500000.0
    assert config.rope_scaling is not None and config.rope_scaling["factor"] == 8.0
    assert config.eos_token_ids == (128001, 128008, 128009) and config.dtype == "bfloat16"
    assert config.num_params() == get_preset("llama-3-8b").num_params()

    path, hf = make_hf_model(tmp_path, tie_word_embeddings=True)
    from_dir = ModelConfig.from_hf_config(path)  # transformers 5.x keys (rope_parameters)
    assert from_dir.name == path.name and from_dir.tie_word_embeddings
    assert from_dir.num_params() == hf.num_parameters()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"hidden_size": None}, "'hidden_size' is missing"),
        ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "rope type 'yarn'"),
        ({"num_key_value_heads": 5}, "multiple of num_key_value_heads"),
        ({"model_type": "qwen2"}, "model_type 'qwen2'"),
        ({"torch_dtype": "int8"}, "dtype 'int8'"),
    ],
)
def test_config_errors_name_the_key(change: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ModelConfig.from_hf_config({**LLAMA_3_1_CONFIG, **change})


def test_presets_have_published_sizes() -> None:
    assert get_preset("llama-3-8b").num_params() == 8_030_261_248
    assert get_preset("llama-3-70b").num_params() == 70_553_706_496
    # K and V, 32 layers, 8 KV heads of 128, bf16: 128 KiB per token.
    assert get_preset("llama-3-8b").kv_bytes_per_token(2) == 131_072
    tiny = get_preset("tiny")
    assert (tiny.hidden_size, tiny.num_hidden_layers, tiny.vocab_size) == (256, 4, 4096)
    with pytest.raises(KeyError, match=r"known presets: .*llama-3-8b.*tiny"):
        get_preset("llama-2")
