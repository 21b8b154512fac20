"""The quick calibration `bench run` makes by itself the first time a CPU run needs roofs.

A CPU has no datasheet roofs: MFU and MBU of a CPU run are measured against `bench calibrate`'s
figures (perfmodel.calibration). So that a first run is not left without them, `bench run`
measures a quick calibration (`bench calibrate --quick`, perfmodel.calibration.QUICK_BUDGET_S per
figure, a few seconds with torch's import) when all of these hold:

- the engine runs on this host (its roofs are this machine's; never for a remote --url);
- it describes itself on /debug/engine with a model shape, on the CPU device (the reference
  engine: the one whose steps MFU and MBU are computed from), not the simulated device;
- no calibration of this CPU is cached (perfmodel.calibration.for_cpu);
- the run was not started with --no-calibrate.

It runs after the engine is up and idle and before the probes and the load start, never during
the load (it would take the CPU the measurement is of). It runs as `bench calibrate --quick` in a
child process, so torch and the measurement's buffers never load into the load generator's
process. The calibration is cached in the one cache (perfmodel.cache.calibration_path), so later
runs find it; `bench calibrate` replaces it with a full one. What happened is returned as notes
for run.json's analytic section; a failed calibration leaves the run without roofs, never stops it.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Mapping

from rich.console import Console

from bench.run.endpoint.environment import cpu_name
from bench.run.messages import print_note
from perfmodel import calibration
from perfmodel.cache import calibration_path
from perfmodel.files import JSONView

__all__ = ["CALIBRATE_TIMEOUT_S", "calibrate_before_load", "needs_calibration"]

# A quick calibration takes a few seconds; a machine so loaded that it takes minutes would give
# roofs worth little, so the run goes on without them.
CALIBRATE_TIMEOUT_S = 120.0


def needs_calibration(description: JSONView | None, local: bool, cpu: str) -> bool:
    """Whether a run of the engine ``description`` describes (/debug/engine; None for one that
    does not) on a ``local`` host whose CPU is named ``cpu`` needs a calibration it lacks
    (module docstring)."""
    if not local or not isinstance(description, Mapping) or not description.get("model_config"):
        return False
    if description.get("simulated") or str(description.get("device") or "") != "cpu":
        return False
    saved, _ = calibration.for_cpu(cpu)
    return saved is None


def calibrate_before_load(
    enabled: bool, description: JSONView | None, local: bool, console: Console
) -> list[str]:
    """Make the quick calibration when the run needs one (module docstring); returns the notes
    for run.json's analytic section (empty when none was needed)."""
    cpu = cpu_name()
    if not needs_calibration(description, local, cpu):
        return []
    path = calibration_path()
    if not enabled:
        return ["no automatic calibration (--no-calibrate)"]
    console.print(
        f"calibrating this CPU's roofs once (a few seconds), cached in {path}; "
        "`bench calibrate` measures them fully"
    )
    command = [sys.executable, "-m", "bench", "calibrate", "--quick", "--no-gpu"]
    command += ["--output", str(path)]
    started = time.monotonic()
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=CALIBRATE_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        failure = f"it took over {CALIBRATE_TIMEOUT_S:.0f} s"
    except OSError as exc:
        failure = str(exc)
    else:
        lines = (done.stderr or done.stdout).strip().splitlines() or [f"exit {done.returncode}"]
        failure = "" if done.returncode == 0 else lines[-1]
    elapsed = time.monotonic() - started
    if failure or calibration.for_cpu(cpu)[0] is None:
        why = failure or f"{path} holds no calibration of {cpu!r} after it"
        print_note(console, f"the automatic calibration failed ({why}); this run has no roofs")
        return [f"the automatic calibration failed: {why}"]
    return [
        f"roofs from an automatic quick calibration before the load ({elapsed:.1f} s, "
        f"`bench calibrate --quick`)"
    ]
