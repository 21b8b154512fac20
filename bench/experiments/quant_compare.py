"""`bench quantize`'s table: each method's checkpoint against the float model it came from.

`compare_methods` makes one checkpoint per method (bench/experiments/quantize.py) from the same
calibration prompts, then measures every model on the same evaluation prompts (different ones,
drawn after the calibration prompts from the same scenario): logit error against the float
model (bench/experiments/quant_eval.py) and batch-1 decode speed on the reference engine, the
models timed in turn. The float model is the table's first row, its own reference.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.table import Table

from bench.experiments.quant_eval import (
    DecodeSpeed,
    LogitError,
    decode_speeds,
    float32_model,
    logit_error,
    prompt_logits,
)
from bench.experiments.quantize import QuantScheme, calibration_prompts, make_checkpoint
from bench.scenario.engine_sets import SettingValue
from bench.scenario.scenario import Scenario

FLOAT = "float"


@dataclass(frozen=True)
class MethodRow:
    """One model of the table: `method` (FLOAT for the unquantized model), its checkpoint
    folder, the seconds llm-compressor took (0 for FLOAT), its logit error and decode speed."""

    method: str
    checkpoint: str
    quantize_s: float
    error: LogitError
    speed: DecodeSpeed

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "error": self.error.to_dict(), "speed": asdict(self.speed)}


@dataclass(frozen=True)
class QuantComparison:
    """The table and what it was measured on (prompt counts, decode length, settings)."""

    model: str
    scheme: str
    scenario: str
    num_samples: int
    eval_prompts: int
    decode_tokens: int
    engine_settings: dict[str, SettingValue]
    rows: list[MethodRow] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["rows"] = [row.to_dict() for row in self.rows]
        return data


def compare_methods(
    model_dir: Path,
    out_root: Path,
    methods: list[str],
    scheme: QuantScheme,
    scenario: Scenario,
    num_samples: int,
    eval_prompts: int,
    decode_tokens: int,
    engine_settings: dict[str, SettingValue],
    progress: Any = print,
) -> QuantComparison:
    """Make `out_root/<method>` for each method and measure every row (module docstring).
    `progress` receives one line per step."""
    calibration = calibration_prompts(model_dir, scenario, num_samples)
    evaluation = calibration_prompts(model_dir, scenario, eval_prompts, skip=num_samples)
    reference = [prompt_logits(float32_model(model_dir), p) for p in evaluation]
    comparison = QuantComparison(
        model=str(model_dir), scheme=scheme.name(), scenario=scenario.name,
        num_samples=num_samples, eval_prompts=eval_prompts, decode_tokens=decode_tokens,
        engine_settings=dict(engine_settings),
    )  # fmt: skip
    folders: list[tuple[str, Path, float]] = [(FLOAT, model_dir, 0.0)]
    for method in methods:
        progress(f"quantizing with {method} ({scheme.name()}, {num_samples} prompts)")
        start = time.perf_counter_ns()
        folder = make_checkpoint(model_dir, out_root / method, method, scheme, calibration)
        folders.append((method, folder, (time.perf_counter_ns() - start) / 1e9))
    errors = []
    for method, folder, _ in folders:
        progress(f"measuring {method}'s logits on {eval_prompts} prompts")
        model = float32_model(folder)
        errors.append(logit_error(reference, [prompt_logits(model, p) for p in evaluation]))
        del model
    progress(f"timing every model's decode of {decode_tokens} tokens, in turn")
    speeds = decode_speeds([f for _, f, _ in folders], evaluation[0], decode_tokens,
                           engine_settings)  # fmt: skip
    for (method, folder, seconds), error, speed in zip(folders, errors, speeds, strict=True):
        comparison.rows.append(MethodRow(method, str(folder), seconds, error, speed))
    return comparison


def comparison_table(comparison: QuantComparison) -> Table:
    """The terminal table: one row per model, speed also as a ratio to the float row."""
    table = Table(title=f"{comparison.scheme} against the float model ({comparison.model})")
    for name in ("method", "mean KL (nats)", "max |Δlogit|", "top-1 agree", "decode tok/s",
                 "vs float", "weights MiB", "kernels"):  # fmt: skip
        table.add_column(name, justify="left" if name in ("method", "kernels") else "right")
    base = comparison.rows[0].speed.tokens_per_s
    for row in comparison.rows:
        e, s = row.error, row.speed
        kernels = ", ".join(f"{k} x{n}" for k, n in s.kernels.items()) or "float"
        table.add_row(
            row.method, f"{e.mean_kl:.3g}", f"{e.max_abs_diff:.3f}", f"{e.top1_agreement:.1%}",
            f"{s.tokens_per_s:.1f}", f"{s.tokens_per_s / base:.2f}x",
            f"{s.weight_bytes / 2**20:.2f}", kernels,
        )  # fmt: skip
    return table
