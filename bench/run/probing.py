"""The probes of one `bench run`: which samplers, the analytic model's inputs, samples.parquet.

- :func:`probe_spec`: NVML and CPU samplers when the engine runs on this host (the GPUs and
  processes here are then the engine's), engine /metrics through the adapter's name map always.
- :func:`samples_frame`: the probes' readings on the run's clock (t_s = seconds since t0_ns).
- :func:`analytic_section`: run.json's "analytic": the model shape, the dtypes and TP degree the
  analytic model assumes, and the roofs (peak FLOP/s and bytes/s) MFU and MBU are measured
  against: the hardware table for a known GPU, `bench calibrate`'s figures for a CPU. Every
  assumption is written down, so the summary can be recomputed from the run folder alone.
- :func:`start_probes` (the probe process, each unavailable probe said once) and
  :func:`launch_reference` / :func:`collect_nsys_report` for `bench run --nsys`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from rich.console import Console

from bench.run.sim_analytic import simulated_analytic
from engine_adapters.base import EngineAdapter
from engine_adapters.launcher import LaunchedEngine, free_port, launch
from engine_adapters.reference import serve_command
from perfmodel import calibration
from perfmodel.hardware import HardwareSpec, compute_dtype, find_by_nvml_name, spec_from_calibration
from perfmodel.models import resolve_model, short_dtype
from probes import nsys
from probes.probe_process import ProbeProcess
from probes.session import ProbeResult, ProbeSpec
from results.run_folder import RunFolder


def probe_spec(
    adapter: EngineAdapter, base_url: str, engine_pid: int | None, local: bool
) -> ProbeSpec:
    """Samplers for a run against ``base_url`` (``local``: the engine runs on this host)."""
    processes = {"client": os.getpid()}
    if engine_pid is not None:
        processes["engine"] = engine_pid
    return ProbeSpec(
        nvml=local,
        cpu=True,
        processes=processes,
        engine_url=base_url if adapter.metric_names else None,
        engine_metric_names=adapter.metric_names,
        engine_metrics_path=adapter.metrics_path,
    )


def samples_frame(result: ProbeResult, t0_ns: int) -> pd.DataFrame:
    """The readings as samples.parquet's columns, ordered by time (stable)."""
    cols = result.columns
    frame = pd.DataFrame(
        {
            "t_s": (np.asarray(cols["t_ns"], dtype=np.int64) - t0_ns) / 1e9,
            "source": pd.Series(cols["source"], dtype=object),
            "name": pd.Series(cols["name"], dtype=object),
            "value": np.asarray(cols["value"], dtype=np.float64),
            "labels": pd.Series(cols["labels"], dtype=object),
        }
    )
    return frame.sort_values("t_s", kind="mergesort").reset_index(drop=True)


def _precision(description: Mapping[str, Any] | None, config_dtype: str) -> dict[str, str]:
    """Weight, KV and activation dtypes of the engine (reference: from /debug/engine)."""
    if not description:
        dtype = short_dtype(config_dtype)
        return {"weight_dtype": dtype, "kv_dtype": dtype, "activation_dtype": dtype}
    dtype = short_dtype(str(description.get("dtype") or config_dtype))
    engine_config = description.get("engine_config") or {}
    quant = engine_config.get("quantization")
    weights = quant if quant in ("int8", "int4") else dtype
    kv = short_dtype(str(description.get("kv_cache_dtype") or dtype))
    kv = {"float8_e4m3fn": "fp8", "float8_e5m2": "fp8"}.get(kv, kv)
    return {"weight_dtype": weights, "kv_dtype": kv, "activation_dtype": dtype}


def _roofs(spec: HardwareSpec, dtype: str, source: str) -> tuple[dict[str, Any] | None, str | None]:
    try:
        flops = spec.peak_for(dtype)
    except ValueError as exc:
        return None, str(exc)
    return {
        "name": spec.name,
        "source": source,
        "compute_dtype": compute_dtype(dtype),
        "flops_per_s": flops,
        "bytes_per_s": spec.memory_bytes_per_s,
        "ridge_flop_per_byte": flops / spec.memory_bytes_per_s,
    }, None


def find_roofs(
    device: str,
    compute: str,
    gpu_names: list[str],
    cpu_name: str,
    calibration_path: Path | None = None,
) -> tuple[dict[str, Any] | None, str | None]:
    """Roofs for an engine on ``device`` ("cpu", "cuda", "cuda:N") computing in ``compute``.

    Returns (roofs, None) or (None, why there are none).
    """
    if device.startswith("cuda"):
        index = int(device.partition(":")[2] or 0)
        if index >= len(gpu_names):
            return None, f"NVML lists no GPU {index}; no roofs"
        spec = find_by_nvml_name(gpu_names[index])
        if spec is None:
            return None, f"{gpu_names[index]} is not in perfmodel.hardware's table; no roofs"
        return _roofs(spec, compute, f"hardware table: {spec.source}")
    saved = calibration.load(calibration_path)
    if saved is None:
        return None, "no calibration of this CPU: run `bench calibrate` for a CPU run's roofs"
    measured_on = saved.get("host", {}).get("cpu")
    if measured_on and measured_on != cpu_name:
        return None, f"the calibration was measured on {measured_on!r}, not {cpu_name!r}"
    spec = spec_from_calibration(saved, "cpu")
    return _roofs(spec, compute, f"bench calibrate ({saved.get('created_utc')})")


def analytic_section(
    description: Mapping[str, Any] | None,
    model_spec: str | None,
    local: bool,
    gpu_names: list[str],
    cpu_name: str,
    calibration_path: Path | None = None,
) -> dict[str, Any]:
    """run.json's "analytic" (module docstring); ``model_spec`` names the model for engines
    that do not describe themselves (a preset or HF directory, e.g. the --tokenizer)."""
    simulated = simulated_analytic(description)
    if simulated is not None:
        return simulated
    notes: list[str] = []
    config_dict = (description or {}).get("model_config")
    if config_dict is None and model_spec:
        try:
            config_dict = resolve_model(model_spec).to_dict()
            notes.append(f"model shape from {model_spec!r}; tensor parallelism assumed 1")
        except ValueError as exc:
            notes.append(f"model shape unknown: {exc}")
    if config_dict is None:
        return {"model_config": None, "roofs": None, "notes": notes or ["model shape unknown"]}
    precision = _precision(description, str(config_dict.get("dtype", "bfloat16")))
    if not description:
        notes.append("dtypes assumed from the checkpoint's dtype (the engine does not say)")
    roofs, reason = None, "the engine runs on another host; no roofs"
    if local:
        device = str((description or {}).get("device") or ("cuda" if gpu_names else "cpu"))
        roofs, reason = find_roofs(
            device, precision["activation_dtype"], gpu_names, cpu_name, calibration_path
        )
    if reason:
        notes.append(reason)
    return {
        "model_config": config_dict,
        "precision": precision,
        "tp": 1,
        "roofs": roofs,
        "notes": notes,
    }


def start_probes(
    console: Console, adapter: EngineAdapter, base_url: str, engine_pid: int | None, local: bool
) -> tuple[ProbeProcess | None, list[str]]:
    """Start the probe process; a probe that cannot run is said once, and the run goes on."""
    probes = ProbeProcess(probe_spec(adapter, base_url, engine_pid, local))
    try:
        reasons = probes.start()
    except RuntimeError as e:
        probes, reasons = None, [f"probes: {e}; the run goes on without them"]
    for reason in reasons:
        console.print(f"[yellow]{reason}[/yellow]")
    return probes, reasons


def launch_reference(
    settings: dict[str, Any], nsys_wanted: bool, runs_dir: Path, console: Console
) -> tuple[LaunchedEngine, Path | None]:
    """Start the reference engine on a free local port, under nsys when asked and available."""
    host = "127.0.0.1"
    port = free_port(host)
    command = serve_command(host, port, settings)
    output: Path | None = None
    if nsys_wanted:
        runs_dir.mkdir(parents=True, exist_ok=True)
        output = runs_dir / f".nsys-{os.getpid()}-{port}"
        try:
            command = nsys.nsys_command(command, output)
            console.print(f"profiling the engine with: {' '.join(command[:5])} ...")
        except nsys.NsysUnavailable as e:
            console.print(f"[yellow]{e}[/yellow]")
            output = None
    return launch(command, f"http://{host}:{port}"), output


def collect_nsys_report(folder: Path, output: Path, console: Console) -> None:
    """Move nsys's report into the run folder and note it in run.json."""
    report = nsys.report_path(output)
    if not report.is_file():
        console.print(f"[yellow]nsys wrote no report at {report}[/yellow]")
        return
    target = folder / "engine.nsys-rep"
    report.replace(target)
    run_json = json.loads((folder / "run.json").read_text(encoding="utf-8"))
    run_json.setdefault("recorded", {})["nsys"] = target.name
    RunFolder(folder).write_run_json(run_json)
    console.print(f"nsys report: [bold]{target}[/bold]")
