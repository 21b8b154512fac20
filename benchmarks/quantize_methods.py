"""RTN, GPTQ and AWQ side by side: each checkpoint's logit error and decode speed (bench quantize).

    python benchmarks/quantize_methods.py [--work DIR] [--bits 4] [--group-size 64]
        [--num-samples 16] [--eval-prompts 4] [--decode-tokens 32] [--json FILE]

Two models of benchmarks/README.md's shape (hidden 256, 4 layers, 8 heads, 2 KV heads, vocab
4,096, fp32, random weights of std 0.02), built here because no trained model is available
offline:
  * random: the weights as drawn;
  * outliers: the same weights, but in every layer the two RMSNorm gains of OUTLIER_CHANNELS
    input channels are multiplied by OUTLIER_GAIN, so that a few channels of every linear
    layer's input carry activations that much larger. Trained LLMs have such channels (the
    activation outliers AWQ and GPTQ's Hessian are designed around); a random model has none,
    so on it the methods can only differ by chance.
Each model is quantized by every method from the same calibration prompts (the 1-user
scenario's workload) and measured on the same evaluation prompts (bench/experiments/
quant_compare.py); the tables print, and --json keeps both.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from rich.console import Console
from safetensors.torch import load_file, save_file

from bench.experiments.quant_compare import compare_methods, comparison_table
from bench.experiments.quantize import METHODS, QuantScheme
from bench.run.terminal import print_table
from bench.scenario.scenario import load_scenario

SHAPE = {"vocab_size": 4096, "hidden_size": 256, "intermediate_size": 704,
         "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2,
         "head_dim": 32, "max_position_embeddings": 2048, "initializer_range": 0.02}  # fmt: skip
OUTLIER_CHANNELS = (3, 77, 150, 201)  # 4 of 256 hidden channels
OUTLIER_GAIN = 20.0


def build_models(work: Path) -> dict[str, Path]:
    """The random model and its outlier-channel twin (module docstring), built once."""
    # The tests' model builder (transformers' save_pretrained + a trained tokenizer) lives in
    # the checkout's tests/ package, importable from its root.
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.support.hf_fixtures import make_hf_model_dir

    models = {"random": work / "random", "outliers": work / "outliers"}
    for name, path in models.items():
        if (path / "config.json").is_file():
            continue
        make_hf_model_dir(path, **SHAPE)
        if name == "outliers":
            tensors = load_file(path / "model.safetensors")
            for key, value in tensors.items():
                if key.endswith(("input_layernorm.weight", "post_attention_layernorm.weight")):
                    value[list(OUTLIER_CHANNELS)] *= OUTLIER_GAIN
            save_file(tensors, path / "model.safetensors", metadata={"format": "pt"})
    return models


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("quantize-methods"))
    parser.add_argument("--bits", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=64)
    parser.add_argument("--num-samples", type=int, default=16)
    parser.add_argument("--eval-prompts", type=int, default=4)
    parser.add_argument("--decode-tokens", type=int, default=32)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    console = Console()
    torch.set_num_threads(1)  # the calibration and the logits; decode is timed on 1 thread too
    scheme = QuantScheme(args.bits, args.group_size or None, True)
    scenario = load_scenario("1-user")
    results = {}
    for name, model in build_models(args.work).items():
        comparison = compare_methods(
            model, args.work / f"{name}-quantized", list(METHODS), scheme, scenario,
            args.num_samples, args.eval_prompts, args.decode_tokens,
            {"device": "cpu", "num_threads": 1}, progress=console.print,
        )  # fmt: skip
        print_table(console, comparison_table(comparison))
        results[name] = comparison.to_dict()
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
