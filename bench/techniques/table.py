"""`bench techniques`: what each optimization buys, in one table.

Per study (bench.techniques.studies) one ablation (bench.experiments.ablate.run_ablation: a
fresh reference engine per value, the same requests), then per row the claimed figure's ratio
measured here, the same ratio predicted on the simulated GPUs (bench.techniques.predictions),
and, where they and the claim disagree, the reason (bench.techniques.reasons). Written to
``<runs_dir>/<UTC>-techniques/techniques.json``; the ablations' and simulations' run folders
stay beside it.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console

from bench.experiments.ablate import Switch, run_ablation
from bench.experiments.ablation_metrics import ABLATION_COLUMNS
from bench.run.endpoint.environment import hardware
from bench.techniques.claims import CLAIMS, Claim
from bench.techniques.predictions import DEVICES, SimCache, predict
from bench.techniques.quality import WRONG_OUTPUT, row_quality
from bench.techniques.reasons import verdict
from bench.techniques.render import cell_texts
from bench.techniques.speculation_estimate import speculation_estimate
from bench.techniques.studies import ROWS, STUDIES, Study, study
from perfmodel.files import JSONObject, atomic_write_text
from perfmodel.model_config import ModelConfig
from perfmodel.roofline import Batch, CostModel
from results.folder.run_folder import RunData, load_run

TECHNIQUES_JSON = "techniques.json"
_TITLES = {key: (title, unit) for key, title, unit in ABLATION_COLUMNS}


def _ablation(study_: Study, runs_dir: Path, console: Console, quick: bool) -> JSONObject:
    switches = [Switch(study_.switch, study_.values)]
    switches += [Switch(k, (v,)) for k, v in {**study_.fixed, **study_.measured_only}.items()]
    path = run_ablation(study_.scenario(quick), switches, runs_dir, console, live=False)
    doc = json.loads(path.read_text())
    doc["path"] = str(path)
    return doc


def _setting_row(doc: JSONObject, switch: str, value: Any) -> JSONObject | None:
    return next((r for r in doc["rows"] if r["setting"].get(switch) == value), None)


def _compute_bound_share(run: RunData) -> float | None:
    bound = ((run.summary or {}).get("attribution") or {}).get("bound_time_s") or {}
    total = sum(bound.values()) if bound else 0.0
    return bound["compute"] / total if total else None


def _decode_over_prefill_cost(cached: RunData, recomputed: RunData) -> float | None:
    """Forward seconds per token of the pure decode steps of the run with the KV cache over
    those of the prefill steps of the run without it (where every step recomputes)."""
    if cached.steps is None or recomputed.steps is None:
        return None
    steps, other = cached.steps, recomputed.steps
    decode = steps[(steps["num_prefill_tokens"] == 0) & (steps["num_decode_tokens"] > 0)]
    prefill = other[(other["num_decode_tokens"] == 0) & (other["num_prefill_tokens"] > 0)]
    if decode.empty or prefill.empty:
        return None
    per_decode = decode["forward_s"].sum() / decode["num_decode_tokens"].sum()
    per_prefill = prefill["forward_s"].sum() / prefill["num_prefill_tokens"].sum()
    return float(per_decode / per_prefill) if per_prefill else None


def _facts(claim: Claim, off_run: RunData, on_run: RunData) -> JSONObject:
    """The figures a row's scale and reason read from its runs."""
    ok = on_run.requests[on_run.requests["status"] == "ok"]
    desc = ((on_run.run_json.get("engine") or {}).get("description")) or {}
    shape = desc.get("model_config") or {}
    facts: JSONObject = {
        "sequence_length": float((ok["prompt_tokens"] + ok["output_tokens"]).mean())
        if len(ok)
        else None,
        "prompt_tokens": float(ok["prompt_tokens"].mean()) if len(ok) else None,
        "compute_bound_share": _compute_bound_share(on_run),
        "machine_load": (on_run.summary or {}).get("machine_load"),
    }
    if shape.get("num_attention_heads"):
        facts["group"] = shape["num_key_value_heads"] / shape["num_attention_heads"]
    if claim.technique == "kv_cache":
        # The run with the cache decodes; the one without recomputes every token as prefill.
        facts["decode_over_prefill_cost"] = _decode_over_prefill_cost(on_run, off_run)
    if claim.technique == "speculative":
        k = int((desc.get("engine_config") or {}).get("num_speculative_tokens") or 0)
        est = speculation_estimate(off_run, on_run, k) if k else None
        facts["speculation"] = est.to_dict() if est else None
    if claim.technique == "flash_attention" and shape and facts["prompt_tokens"]:
        cost = CostModel(ModelConfig.from_dict(shape)).step(
            Batch.prefill(round(facts["prompt_tokens"]))
        )
        facts["attention_flop_share"] = float(cost.attention_flops / cost.flops)
    return facts


def _scale_value(claim: Claim, facts: JSONObject) -> float | None:
    if claim.scale == "sequence length":
        return facts.get("sequence_length")
    if claim.scale == "1/group":
        return facts.get("group")
    return 1.0


def build_row(
    claim: Claim, doc: JSONObject, study_: Study, off: Any, on: Any, quick: bool,
    sims: SimCache,
) -> JSONObject:  # fmt: skip
    """One row of techniques.json from its study's ablation ``doc``."""
    off_row = _setting_row(doc, study_.switch, off)
    on_row = _setting_row(doc, study_.switch, on)
    if off_row is None or on_row is None:
        raise ValueError(f"{claim.technique}: the ablation has no run for {off!r} and {on!r}")
    facts = _facts(claim, load_run(Path(off_row["run"])), load_run(Path(on_row["run"])))
    measured: JSONObject = {
        "value": claim.ratio_of(off_row.get(claim.metric), on_row.get(claim.metric)),
        "off": off_row.get(claim.metric),
        "on": on_row.get(claim.metric),
        "also": {k: [off_row.get(k), on_row.get(k)] for k in claim.also},
        "acceptance_rate": on_row.get("acceptance_rate"),
        "prefix_hit_rate": on_row.get("prefix_hit_rate"),
        "runs": [off_row["run"], on_row["run"]],
        **facts,
    }
    bounds = claim.bounds(_scale_value(claim, facts))
    predictions = predict(claim, study_, study_.scenario(quick), off, on, measured, sims)
    placement, reason = verdict(claim, bounds, measured, predictions)
    quality = row_quality(study_, off, on)
    if quality is not None and not quality.right:
        # A speedup of a wrong answer is no speedup: the row says what is wrong instead, and
        # its ratio is kept apart, out of the table and the chart.
        placement, reason = WRONG_OUTPUT, f"{WRONG_OUTPUT}: {quality.reason}"
        measured["value_of_wrong_output"] = measured["value"]
        measured["value"] = None
    title, unit = _TITLES[claim.metric]
    return {
        "technique": claim.technique,
        "title": claim.title,
        "claim": claim.claim,
        "metric": claim.metric,
        "metric_title": title,
        "unit": unit,
        "ratio": claim.ratio,
        "switch": study_.switch,
        "off": off,
        "on": on,
        "claimed": list(bounds),
        "measured": measured,
        "placement": placement,
        "quality": quality.to_dict() if quality is not None else None,
        "predictions": predictions,
        "reason": reason,
        "ablation": doc["path"],
    }


def run_techniques(
    runs_dir: Path, console: Console, quick: bool = False, only: list[str] | None = None
) -> Path:
    """Measure and predict every row (or those named in ``only``); returns techniques.json."""
    claims = {c.technique: c for c in CLAIMS}
    unknown = sorted(set(only or ()) - set(claims))
    if unknown:
        raise ValueError(
            f"--only {', '.join(unknown)}: no such technique; choose from {', '.join(claims)}"
        )
    rows = [r for r in ROWS if not only or r.technique in only]
    stamp = datetime.now(UTC)
    out_dir = runs_dir / f"{stamp.strftime('%Y%m%dT%H%M%SZ')}-techniques{'-quick' if quick else ''}"
    sims = SimCache(out_dir / "predicted")
    docs: dict[str, JSONObject] = {}
    table_rows = []
    for r in rows:
        study_ = study(r.study)
        if study_.key not in docs:
            console.rule(f"[bold]{r.study}: {study_.switch} = {', '.join(map(str, study_.values))}")
            docs[study_.key] = _ablation(study_, out_dir / "measured", console, quick)
        table_rows.append(
            build_row(claims[r.technique], docs[study_.key], study_, r.off, r.on, quick, sims)
        )
    doc = {
        "kind": "techniques",
        "quick": quick,
        "started_utc": stamp.isoformat(),
        "ended_utc": datetime.now(UTC).isoformat(),
        "hardware": dict(hardware()),
        "devices": [d.label for d in DEVICES],
        "studies": [s.key for s in STUDIES if s.key in docs],
        "rows": table_rows,
    }
    path = out_dir / TECHNIQUES_JSON
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(cell_texts(doc), indent=2, default=str) + "\n")
    return path
