"""`bench run`'s lines of the GPU check: one short run of Llama-3-8B shapes with probes, whose
run folder must hold GPU series, energy per token, MFU and MBU; and the same under ``--nsys``
where nsys is installed, whose report must be in the run folder with the engine's prefill and
decode NVTX ranges in it. Each runs `bench run` as a user would, in a child process started
through budget.run_child, so that the line's budget stops it and its engine with it."""

from __future__ import annotations

import csv
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.gpu_checks.budget import run_child
from benchmarks.gpu_checks.rows import Row, passed, skipped
from probes.nsys import NSYS_INSTALL
from results.folder.run_folder import load_run

SCENARIO = """
name = "gpu-check"
description = "benchmarks/gpu_check.py: a short probed run of Llama-3-8B shapes"
seed = 0
users = 8
num_requests = {requests}
ignore_eos = true
temperature = 0.0

[input_len]
kind = "uniform"
low = 128
high = 256

[output_len]
kind = "uniform"
low = 32
high = 64

[engine]
preset = "llama-3-8b"
device = "cuda"
dtype = "bfloat16"
max_model_len = 1024
kv_cache_memory_bytes = {kv_bytes}
"""
# The most one `bench run` may take; the line's own budget (runner.CHECKS) is shorter.
RUN_TIMEOUT_S = 240.0
# The probed run's KV cache: 8 GiB on the GPU (Llama-3-8B shapes). The CPU test of this check
# runs the tiny preset and sets it to what that needs, not 8 GiB of the host's memory.
KV_CACHE_BYTES = 8 * 2**30
# Requests of the probed run and of the --nsys run (8 users).
PROBED_REQUESTS, NSYS_REQUESTS = 64, 16


def _bench_run(work: Path, requests: int, ref: Any, *flags: str) -> tuple[Path | None, str]:
    """Run `bench run` on the scenario (its KV budget scaled to ``ref``'s target, a MIG
    instance's share); returns its run folder (None if it wrote none) and the tail of what it
    printed."""
    kv_bytes = ref.target.kv_bytes(KV_CACHE_BYTES) if ref.target else KV_CACHE_BYTES
    scenario = work / "gpu-check.toml"
    scenario.write_text(SCENARIO.format(requests=requests, kv_bytes=kv_bytes))
    runs = work / "runs"
    command = [sys.executable, "-m", "bench", "run", "--scenario", str(scenario),
               "--runs-dir", str(runs), "--no-live", *flags]  # fmt: skip
    done = run_child(command, RUN_TIMEOUT_S)
    printed = (done.stdout + done.stderr)[-2000:]
    folders = sorted(p.parent for p in runs.glob("*/run.json"))
    return (folders[-1] if folders else None), printed


def _summary(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "summary.json").read_text())


def check_probed_run(ref: Any, name: str) -> Row:
    why = ref.unfit("the probed run's 8B engine")
    if why:
        return skipped(name, why)
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        folder, printed = _bench_run(Path(tmp), PROBED_REQUESTS, ref)
        if folder is None:
            return Row(name, "MISS", detail=f"no run folder; bench run printed: {printed}")
        data = load_run(folder)
        summary = _summary(folder)
    samples = data.samples
    gpu_names = (
        set(samples.loc[samples["source"].isin(["nvml", "gpm"]), "name"])
        if samples is not None else set()
    )  # fmt: skip
    energy = (summary.get("probes") or {}).get("energy") or {}
    joules = energy.get("joules_per_output_token")
    attribution = summary.get("attribution") or {}
    mfu, mbu = attribution.get("mfu"), attribution.get("mbu")
    checks = {
        "GPU series": {"gpu_util_pct", "power_w", "energy_j"} <= gpu_names,
        "energy per token": bool(joules and joules > 0),
        "MFU": bool(mfu and 0 < mfu < 1),
        "MBU": bool(mbu and 0 < mbu < 1),
    }
    missing = [k for k, ok in checks.items() if not ok]
    figure = (
        f"{joules:.3f} J/token, MFU {mfu:.3f}, MBU {mbu:.3f}" if not missing
        else "missing: " + ", ".join(missing)
    )  # fmt: skip
    return passed(
        name, not missing, figure, f"{len(gpu_names)} GPU series",
        joules_per_output_token=joules, mfu=mfu, mbu=mbu, gpu_series=sorted(gpu_names),
    )  # fmt: skip


def nvtx_range_names(report_csv: str) -> set[str]:
    """The range names of an ``nsys stats --report nvtx_sum --format csv`` output, without
    their domain (nsys prints "llm-perf-lab:prefill", or ":prefill"); notices before the
    table's header are skipped."""
    lines = report_csv.splitlines()
    start = next((i for i, row in enumerate(csv.reader(lines)) if "Range" in row), None)
    if start is None:
        return set()
    return {
        row["Range"].rsplit(":", 1)[-1] for row in csv.DictReader(lines[start:]) if row.get("Range")
    }


def _nvtx_ranges(report: Path) -> tuple[set[str] | None, str]:
    """The NVTX range names in an nsys report (``nsys stats``), or None and why not."""
    nsys = shutil.which("nsys")
    assert nsys is not None
    why = ""
    for report_name in ("nvtx_sum", "nvtxsum"):  # renamed in nsys 2023.x
        done = run_child(
            [nsys, "stats", "--report", report_name, "--format", "csv", "--force-export=true",
             str(report)], 120,
        )  # fmt: skip
        names = nvtx_range_names(done.stdout) if done.returncode == 0 else set()
        if names:
            return names, ""
        why = (done.stderr or done.stdout)[-300:]
    return None, why


def check_nsys(ref: Any, name: str) -> Row:
    if shutil.which("nsys") is None:
        return skipped(name, f"nsys is not on PATH. {NSYS_INSTALL}")
    why = ref.unfit("the --nsys run's 8B engine")
    if why:
        return skipped(name, why)
    with tempfile.TemporaryDirectory(prefix="gpu-check-nsys-") as tmp:
        folder, printed = _bench_run(Path(tmp), NSYS_REQUESTS, ref, "--nsys", "--no-probes")
        report = folder / "engine.nsys-rep" if folder else None
        if report is None or not report.is_file():
            return Row(name, "MISS", detail=f"no engine.nsys-rep; bench run printed: {printed}")
        size = report.stat().st_size
        names, why = _nvtx_ranges(report)
    if names is None:
        return Row(name, "MISS", f"report {size / 1e6:.1f} MB", f"nsys stats failed: {why}")
    found = {"prefill", "decode"} & names
    return passed(
        name, found == {"prefill", "decode"}, f"report {size / 1e6:.1f} MB, ranges "
        f"{', '.join(sorted(found)) or 'none'} of prefill, decode",
        f"{len(names)} range names", report_bytes=size, nvtx_ranges=sorted(names),
    )  # fmt: skip
