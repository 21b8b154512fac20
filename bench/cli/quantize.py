"""`bench quantize`: quantized checkpoints made with llm-compressor, measured against the float
model (bench/experiments/quant_compare.py). Registered on the main app by :func:`register`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from bench.cli.flags.scenario import SCENARIO_HELP
from bench.experiments.quantize import METHODS as _METHODS
from bench.run.messages import print_error, print_info, print_path
from bench.run.terminal import print_table, terminal_console
from perfmodel.files import write_json

console = terminal_console()


def quantize(
    model: Annotated[Path, typer.Argument(help="A local Hugging Face model folder (float).")],
    method: Annotated[
        list[str] | None,
        typer.Option(help=f"{' | '.join(_METHODS)}; repeat to compare several (default: all)."),
    ] = None,
    out: Annotated[
        Path, typer.Option(help="Folder of the checkpoints: one per method, OUT/<method>.")
    ] = Path("quantized"),
    bits: Annotated[int, typer.Option(help="Weight bits: 4 (W4A16) or 8 (W8A16).")] = 4,
    group_size: Annotated[
        int, typer.Option(help="Input columns per scale; 0 = one scale per output channel.")
    ] = 128,
    symmetric: Annotated[
        bool, typer.Option(help="Symmetric (no zero points) or asymmetric weights.")
    ] = True,
    scenario: Annotated[
        str,
        typer.Option(
            help="Calibration and evaluation prompts come from its workload. " + SCENARIO_HELP
        ),
    ] = "1-user",
    num_samples: Annotated[int, typer.Option(help="Calibration prompts.", min=1)] = 16,
    eval_prompts: Annotated[
        int, typer.Option(help="Evaluation prompts (after the calibration ones).", min=1)
    ] = 4,
    decode_tokens: Annotated[
        int, typer.Option(help="Tokens of the timed batch-1 decode of each model.", min=2)
    ] = 64,
    num_threads: Annotated[
        int,
        typer.Option(
            help="torch threads of the timed engine (0: torch's default). One thread keeps "
            "batch-1 decode steady on a shared machine, where more threads oversubscribe.",
            min=0,
        ),
    ] = 1,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="Also write the table as JSON here.")
    ] = None,
) -> None:
    """Quantize a local model with llm-compressor (rtn, gptq, awq; the [quantize] extra) and
    report each checkpoint's logit error against the float model and its decode speed."""
    from bench.experiments.quant_compare import compare_methods, comparison_table
    from bench.experiments.quantize import QuantizeError, QuantScheme
    from bench.scenario.scenario import ScenarioError, load_scenario
    from engine.model.weights import WeightsError

    methods = method or list(_METHODS)
    for name in methods:
        if name not in _METHODS:
            raise _fail(f"--method {name!r} is not one of {', '.join(_METHODS)}")
    if bits not in (4, 8):
        raise _fail(f"--bits {bits} is not supported; use 4 or 8")
    if not (model / "config.json").is_file():
        raise _fail(f"{model}: no config.json; pass a local Hugging Face model folder")
    scheme = QuantScheme(bits, group_size or None, symmetric)
    settings = {"device": "cpu", "num_threads": num_threads or None}
    try:
        comparison = compare_methods(
            model, out, methods, scheme, load_scenario(scenario), num_samples, eval_prompts,
            decode_tokens, settings, progress=lambda line: print_info(console, line),
        )  # fmt: skip
    except (QuantizeError, ScenarioError, WeightsError) as e:
        raise _fail(str(e)) from e
    print_table(console, comparison_table(comparison))
    for row in comparison.rows[1:]:
        print_path(console, f"{row.method} checkpoint", Path(row.checkpoint))
    if json_out is not None:
        write_json(json_out, comparison.to_dict())
        print_path(console, "json", json_out)


def _fail(message: str, code: int = 2) -> typer.Exit:
    print_error(console, message)
    return typer.Exit(code)


def register(app: typer.Typer) -> None:
    """Add `bench quantize` to the main app."""
    app.command("quantize")(quantize)
