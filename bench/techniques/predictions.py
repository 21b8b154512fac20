"""What `bench techniques` predicts for real GPUs: Llama-3-8B and -70B on A100 and H100.

Most rows run their study's scenario on the simulated device (bench.sim.simulate: the real
scheduler, block manager and prefix cache, step times from the roofline model), once per value,
and take the claimed figure's ratio exactly as the measured row does. Speculative decoding is
simulated at the acceptance rate measured on this machine. Two rows are not about step times
the simulated device models: GQA is read from the capacity model the simulated device sizes
its KV cache with (KV bytes per token, most users at the study's context), and Flash Attention
from the roofline of attention alone (naive attention moves the whole score matrix through
memory; a fused kernel only Q, K, V and the output), since the simulated device has no
attention-kernel term.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bench.experiments.ablation_metrics import ablation_row
from bench.scenario.scenario import Scenario
from bench.sim.simulate import simulate
from bench.techniques.claims import Claim
from bench.techniques.studies import Study
from perfmodel.capacity import capacity
from perfmodel.files import JSONObject
from perfmodel.hardware import get_gpu
from perfmodel.models import dtype_bytes, resolve_model
from results.folder.run_folder import load_run


@dataclass(frozen=True)
class Device:
    model: str
    gpu: str
    tp: int

    @property
    def label(self) -> str:
        tp = f" x{self.tp}" if self.tp > 1 else ""
        return f"{self.model} on {self.gpu}{tp}"


DEVICES: tuple[Device, ...] = (
    Device("llama-3-8b", "a100-80gb", 1),
    Device("llama-3-8b", "h100-sxm", 1),
    Device("llama-3-70b", "a100-80gb", 4),
    Device("llama-3-70b", "h100-sxm", 4),
)


def _memory_bound_share(summary: JSONObject | None) -> float | None:
    bound = ((summary or {}).get("attribution") or {}).get("bound_time_s") or {}
    total = sum(bound.values()) if bound else 0.0
    return bound["memory"] / total if total else None


class SimCache:
    """Simulated runs by (study, value, device), so rows sharing a study simulate it once."""

    def __init__(self, runs_dir: Path) -> None:
        self.runs_dir = runs_dir
        self._rows: dict[tuple[str, str, str, str], JSONObject] = {}

    def row(
        self, study: Study, scenario: Scenario, value: Any, device: Device, extra: JSONObject
    ) -> JSONObject:
        """ablation_row of the simulated run, plus ``memory_bound_share`` of its step time."""
        key = (study.key, repr(value), device.label, repr(sorted(extra.items())))
        if key not in self._rows:
            settings = {**study.fixed, study.switch: value, **extra}
            settings.update(model=device.model, gpu=device.gpu, tp=device.tp)
            folder, summary = simulate(scenario, self.runs_dir, settings)
            row = ablation_row(load_run(folder))
            row["memory_bound_share"] = _memory_bound_share(dict(summary))
            row["run"] = str(folder)
            self._rows[key] = row
        return self._rows[key]


def _gqa(device: Device, context_tokens: int) -> JSONObject:
    """KV bytes per token and most users at ``context_tokens``: the model as it is over the
    same model with one KV head per query head (multi-head attention)."""
    config = resolve_model(device.model)
    mha = replace(config, name=f"{config.name}-mha", num_key_value_heads=config.num_attention_heads)
    gpu = get_gpu(device.gpu)
    on = capacity(config, gpu, context_tokens, tp=device.tp)
    off = capacity(mha, gpu, context_tokens, tp=device.tp)
    return {
        "off": {"kv_used_peak_bytes": off.kv_bytes_per_token, "max_running": off.max_users},
        "on": {"kv_used_peak_bytes": on.kv_bytes_per_token, "max_running": on.max_users},
    }


def attention_times_s(device: Device, prompt_tokens: int) -> dict[str, float]:
    """Roofline time (seconds) of one layer's causal attention over a prompt of
    ``prompt_tokens`` on one GPU, in bf16: fused (Q, K, V read once, the output written once)
    and naive (besides those, K/V repeated to every query head, and the scores and the
    probabilities each written and read back whole)."""
    config = resolve_model(device.model)
    gpu = get_gpu(device.gpu)
    a, d, n = dtype_bytes("bf16"), config.head_dim, prompt_tokens
    q_heads = config.num_attention_heads // device.tp
    kv_heads = max(1, config.num_key_value_heads // device.tp)
    flops = 4.0 * q_heads * d * n * (n + 1) / 2
    fused_bytes = a * d * n * (2 * q_heads + 2 * kv_heads)
    naive_bytes = fused_bytes + a * (2 * 2 * q_heads * d * n + 4 * q_heads * n * n)
    peak, bw = gpu.peak_for("bf16"), gpu.memory_bytes_per_s
    return {
        "fused": max(flops / peak, fused_bytes / bw),
        "naive": max(flops / peak, naive_bytes / bw),
    }


def predict(
    claim: Claim,
    study: Study,
    scenario: Scenario,
    off: Any,
    on: Any,
    measured: JSONObject,
    sims: SimCache,
) -> list[JSONObject]:
    """One prediction per DEVICES entry: ``value`` (the claimed figure's ratio, or None with a
    ``note`` saying why), ``how`` it was predicted, ``also`` (the row's further figures' values
    off and on) and, for simulated rows, the memory-bound share of the "on" run's step time."""
    out = []
    for device in DEVICES:
        entry: JSONObject = {"device": device.label}
        if claim.technique == "gqa":
            figs = _gqa(device, max(1, round(measured.get("sequence_length") or 1)))
            entry["how"] = "capacity model"
            entry["value"] = claim.ratio_of(figs["off"][claim.metric], figs["on"][claim.metric])
            entry["also"] = {k: [figs["off"][k], figs["on"][k]] for k in claim.also}
            config = resolve_model(device.model)
            entry["claimed"] = list(
                claim.bounds(config.num_key_value_heads / config.num_attention_heads)
            )
        elif claim.technique == "flash_attention":
            prompt = max(1, round(measured.get("prompt_tokens") or 1))
            times = attention_times_s(device, prompt)
            entry["how"] = f"attention roofline at {prompt:,} prompt tokens"
            entry["value"] = times["naive"] / times["fused"]
            entry["also"] = {}
        else:
            extra: JSONObject = {}
            if claim.technique == "speculative":
                rate = measured.get("acceptance_rate")
                if rate is None:
                    out.append({**entry, "how": "simulated", "value": None, "also": {},
                                "note": "no acceptance rate was measured to simulate"})  # fmt: skip
                    continue
                extra["sim_acceptance_rate"] = round(float(rate), 4)
            rows = [
                sims.row(study, scenario, v, device, extra if v != "off" else {}) for v in (off, on)
            ]
            entry["how"] = "simulated"
            entry["value"] = claim.ratio_of(rows[0].get(claim.metric), rows[1].get(claim.metric))
            entry["also"] = {k: [rows[0].get(k), rows[1].get(k)] for k in claim.also}
            entry["memory_bound_share"] = rows[1].get("memory_bound_share")
            entry["runs"] = [rows[0]["run"], rows[1]["run"]]
        out.append(entry)
    return out
