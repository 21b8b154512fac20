"""Build a LlamaForCausalLM on a device: random weights, or a Hugging Face safetensors directory.

The model is first built on the meta device (no memory), then materialised once in the compute
dtype on the target device, so an 8B model in bf16 never passes through an fp32 copy. Every
tensor's presence, shape and dtype is checked from the safetensors headers before any weight is
read, so a wrong checkpoint fails in milliseconds with the tensor named.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import torch
from safetensors import safe_open

from engine.model.llama import LlamaForCausalLM, WeightSlot
from perfmodel.model_config import ModelConfig
from perfmodel.models import resolve_model
from perfmodel.presets import PRESETS, get_preset

INDEX_FILE = "model.safetensors.index.json"
# Tensors some checkpoints carry that this model recomputes or does not need.
IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)
FLOAT_DTYPES = ("F16", "BF16", "F32", "F64")
INIT_STD = 0.02  # small enough that random-model logits stay O(1) and sampling is well behaved


class WeightsError(ValueError):
    """A weights directory that does not match the model config (names the tensor and file)."""


def load_hf_directory(path: str | Path) -> tuple[ModelConfig, Path]:
    """Read `path/config.json` and check that the directory holds safetensors weights.

    Returns the config (named after the directory) and the resolved directory path.
    """
    directory = Path(path).expanduser().resolve()
    if not directory.is_dir():
        raise WeightsError(f"{directory}: not a directory; pass a Hugging Face model directory")
    config = ModelConfig.from_hf_config(directory)
    _safetensors_files(directory)  # fail now, not after the engine has allocated its cache
    return config, directory


def load_model(
    config: ModelConfig,
    weights_dir: Path | None,
    dtype: torch.dtype,
    device: torch.device,
    seed: int = 0,
    quantized_modules: frozenset[str] = frozenset(),
) -> LlamaForCausalLM:
    """A ready-to-run model (eval mode, no grad) in `dtype` on `device`.

    weights_dir None: random weights, normal(0, INIT_STD) matrices and unit norms, drawn from a
    generator seeded with `seed` on `device` (same seed and device -> same weights). Otherwise
    the HF Llama tensors of `weights_dir` (single file, or sharded with model.safetensors.index
    .json); raises WeightsError for a missing, unexpected, wrongly shaped or non-float tensor.
    quantized_modules: HF module names (e.g. 'model.layers.0.self_attn.q_proj') a quantized
    checkpoint stores in its own tensors; their float weights are left unfilled and their
    tensors unread, for engine/model/checkpoints to replace the layers they belong to.
    """
    device = torch.device(device)
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    model = model.to(dtype=dtype).to_empty(device=device)
    if weights_dir is None:
        _init_random(model, seed, device)
    else:
        _load_safetensors(model, Path(weights_dir), quantized_modules)
    model.eval()
    model.requires_grad_(False)
    return model


def _init_random(model: LlamaForCausalLM, seed: int, device: torch.device) -> None:
    generator = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for _, param in sorted(model.named_parameters()):  # sorted: order-independent of code
            if param.dim() == 1:
                param.fill_(1.0)  # RMSNorm gains
            else:
                param.normal_(0.0, INIT_STD, generator=generator)


def _safetensors_files(directory: Path) -> dict[str, Path] | list[Path]:
    """The index's tensor -> file map when sharded with an index, else the list of files."""
    index = directory / INDEX_FILE
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        except (json.JSONDecodeError, KeyError) as exc:
            raise WeightsError(f"{index}: not a safetensors index with a 'weight_map'") from exc
        mapping = {name: directory / file for name, file in weight_map.items()}
        for file in sorted(set(mapping.values())):
            if not file.is_file():
                raise WeightsError(f"{index} lists shard '{file.name}', which is missing")
        return mapping
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        hint = " (.bin checkpoints are not supported)" if any(directory.glob("*.bin")) else ""
        raise WeightsError(f"{directory}: no *.safetensors weight files{hint}")
    return files


def tensor_locations(directory: Path) -> dict[str, Path]:
    """Every tensor name of the directory's safetensors files -> the file that holds it."""
    found = _safetensors_files(directory)
    if isinstance(found, dict):
        return found
    locations: dict[str, Path] = {}
    for file in found:
        with safe_open(file, framework="pt", device="cpu") as handle:
            for name in handle.keys():  # noqa: SIM118 (safe_open is not a dict)
                if name in locations:
                    raise WeightsError(
                        f"{directory}: tensor '{name}' is in both {locations[name].name} and "
                        f"{file.name}; remove the stale file"
                    )
                locations[name] = file
    return locations


def _load_safetensors(
    model: LlamaForCausalLM, directory: Path, quantized_modules: frozenset[str]
) -> None:
    slots = model.hf_weight_slots()
    _check_slots_cover_model(model, slots)
    skip = quantized_modules
    slots = {n: s for n, s in slots.items() if n.removesuffix(".weight") not in skip}
    locations = {
        n: f for n, f in tensor_locations(directory).items() if n.rpartition(".")[0] not in skip
    }
    missing = [name for name in slots if name not in locations]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise WeightsError(
            f"{directory}: tensor '{missing[0]}'{more} is missing; the checkpoint does not match "
            "its config.json"
        )
    optional = {"lm_head.weight"} if model.config.tie_word_embeddings else set()
    unexpected = [
        name
        for name in locations
        if name not in slots and name not in optional and not name.endswith(IGNORED_SUFFIXES)
    ]
    if unexpected:
        raise WeightsError(
            f"{directory}: unexpected tensor '{unexpected[0]}' ({len(unexpected)} in all); this "
            "loader reads plain Llama checkpoints (no biases, no quantisation)"
        )

    by_file: dict[Path, list[str]] = defaultdict(list)
    for name in slots:
        by_file[locations[name]].append(name)
    for file, names in sorted(by_file.items()):  # pass 1: headers only
        with safe_open(file, framework="pt", device="cpu") as handle:
            for name in names:
                _check_header(handle.get_slice(name), name, slots[name], file)
    with torch.no_grad():
        for file, names in sorted(by_file.items()):  # pass 2: copy, converting dtype and device
            with safe_open(file, framework="pt", device="cpu") as handle:
                for name in names:
                    slot = slots[name]
                    rows = slot.param[slot.row_start : slot.row_start + slot.shape[0]]
                    rows.copy_(handle.get_tensor(name))


def _check_slots_cover_model(model: LlamaForCausalLM, slots: dict[str, WeightSlot]) -> None:
    """Guard against a model change that adds a parameter the loader would leave uninitialised
    (load_model materialises parameters with to_empty, so an unfilled one holds garbage)."""
    filled: dict[int, int] = defaultdict(int)
    for slot in slots.values():
        filled[id(slot.param)] += slot.shape[0]
    for name, param in model.named_parameters():
        if filled[id(param)] != param.shape[0]:
            raise AssertionError(f"hf_weight_slots() fills {filled[id(param)]} rows of {name}")


def _check_header(tensor_slice: object, name: str, slot: WeightSlot, file: Path) -> None:
    shape = tuple(tensor_slice.get_shape())  # type: ignore[attr-defined]
    if shape != slot.shape:
        raise WeightsError(
            f"{file}: tensor '{name}' has shape {shape}, expected {slot.shape} from config.json"
        )
    dtype = tensor_slice.get_dtype()  # type: ignore[attr-defined]
    if dtype not in FLOAT_DTYPES:
        raise WeightsError(
            f"{file}: tensor '{name}' has dtype {dtype}; only {', '.join(FLOAT_DTYPES)} load"
        )


def load_model_spec(model: str, shape_only: bool = False) -> tuple[ModelConfig, Path | None]:
    """A preset name or a local HF directory -> (config, weights directory or None).

    ``shape_only`` (the simulated device, which loads no weights) also takes every name and
    alias of perfmodel.models and a bare config.json, and returns no weights directory.
    """
    if model in PRESETS:
        return get_preset(model), None
    path = Path(model)
    if path.is_dir() and not shape_only:
        return load_hf_directory(path)
    if shape_only:
        return resolve_model(model), None
    raise ValueError(
        f"model {model!r} is neither a preset ({', '.join(sorted(PRESETS))}) nor a directory"
    )
