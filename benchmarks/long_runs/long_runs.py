"""Runs of any length: peak RSS, wall time and size of a long run, its report and its gate.

For each request count, `bench simulate` makes a run of that many requests (llama-3-8b on a
simulated H100, 1,000 closed-loop users, 512 prompt and 256 output tokens each, as issue 32
measured), then `bench report --html` re-summarizes it and draws its page, and `bench gate`
gates it against a baseline saved from the first (smallest) run. Each command runs under
GNU time (``/usr/bin/time -v``), whose "Maximum resident set size" is the peak RSS. ``--code``
picks the checkout whose code runs (its folder goes first on PYTHONPATH), so the same script
measures two versions of the lab:

    python benchmarks/long_runs/long_runs.py --requests 10000 100000 --out /tmp/after
    python benchmarks/long_runs/long_runs.py --requests 10000 --code ../other --out /tmp/before
    python benchmarks/long_runs/long_runs.py --requests 10000 --tile 10 100 --out tiled

``--tile K ...`` also makes a folder of K copies of the first run (benchmarks/long_runs/tile_run.py:
10^6 requests without an hour of simulation) and times report and gate on it; the baseline is
always saved from the first run.

It prints one Markdown table (benchmarks/README.md keeps the measured ones) and writes it,
with every command line, to ``OUT/long_runs.md``.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

SCENARIO = """
name = "long-{n}"
seed = 0
users = 1000
num_requests = {n}
think_time_s = 0.0
api = "completions"
ignore_eos = true
temperature = 0.0

[input_len]
kind = "fixed"
value = 512

[output_len]
kind = "fixed"
value = 256

[engine]
preset = "llama-3-8b"
"""


class Timed(NamedTuple):
    """One command under GNU time: its output, peak RSS (bytes), wall and CPU (user + system)
    seconds. On a shared box the wall time is the box's load as much as the command's; the CPU
    seconds are the command's."""

    stdout: str
    rss: int
    wall_s: float
    cpu_s: float


def _timed(cmd: list[str], code: Path, cwd: Path, ok: tuple[int, ...] = (0,)) -> Timed:
    """Run ``cmd`` under GNU time. ``ok``: the exit statuses that count as having run (a gate's
    verdict is its status)."""
    env = {**os.environ, "PYTHONPATH": str(code)}
    proc = subprocess.run(
        ["/usr/bin/time", "-v", *cmd], cwd=cwd, env=env, capture_output=True, text=True
    )
    err = proc.stderr
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", err)
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)", err)
    cpu = [re.search(rf"{what} time \(seconds\): ([\d.]+)", err) for what in ("User", "System")]
    if proc.returncode not in ok or rss is None or wall is None or None in cpu:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}\n{err}")
    seconds = 0.0
    for part in wall.group(1).split(":"):
        seconds = seconds * 60 + float(part)
    cpu_s = sum(float(m.group(1)) for m in cpu if m is not None)
    return Timed(proc.stdout, int(rss.group(1)) * 1024, seconds, cpu_s)


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _row(what: str, n: int, timed: Timed | None, size: float | None) -> str:
    mb = f"{size / 1e6:.1f}" if size is not None else "-"
    if timed is None:
        return f"| {what} | {n:,} | - | - | - | {mb} |"
    mib = f"{timed.rss / 2**20:,.0f}"
    return f"| {what} | {n:,} | {mib} | {timed.wall_s:.1f} | {timed.cpu_s:.1f} | {mb} |"


def _report_and_gate(
    bench: list[str], folder: Path, n: int, baseline: Path, code: Path, out: Path
) -> tuple[list[str], list[str]]:
    """Time `bench report --html` and `bench gate` on ``folder`` (``n`` requests); the rows
    and the command lines."""
    rows, commands = [], []
    cmd = [*bench, "report", str(folder), "--html"]
    timed = _timed(cmd, code, out)
    commands.append(" ".join(cmd[1:]))
    rows.append(_row("bench report --html", n, timed, (folder / "report.html").stat().st_size))
    print(rows[-1], flush=True)
    cmd = [*bench, "gate", str(folder), "--baseline", str(baseline), "--force"]
    timed = _timed(cmd, code, out, ok=(0, 1, 2))  # pass, fail, inconclusive
    commands.append(" ".join(cmd[1:]))
    rows.append(_row("bench gate", n, timed, None))
    print(rows[-1], flush=True)
    return rows, commands


def _save_baseline(bench: list[str], folder: Path, code: Path, out: Path) -> Path:
    baseline = out / "baseline.json"
    _timed([*bench, "baseline", "save", str(folder), "--name", "long", "-o", str(baseline)],
           code, out)  # fmt: skip
    return baseline


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, nargs="+", required=True)
    parser.add_argument("--tile", type=int, nargs="*", default=[],
                        help="also tile the first run this many times (tile_run.py beside this)"
                        " and time report and gate on each tiled folder")  # fmt: skip
    parser.add_argument("--code", type=Path, default=Path(__file__).resolve().parents[2])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    out, code = args.out.resolve(), args.code.resolve()
    out.mkdir(parents=True, exist_ok=True)
    bench = [sys.executable, "-m", "bench"]
    rows = ["| command | requests | peak RSS MiB | wall s | CPU s | output MB |",
            "|---|---|---|---|---|---|"]  # fmt: skip
    commands: list[str] = []
    baseline: Path | None = None
    first: Path | None = None
    for n in args.requests:
        scenario = out / f"long-{n}.toml"
        scenario.write_text(SCENARIO.format(n=n))
        runs = out / f"runs-{n}"
        cmd = [*bench, "simulate", "--scenario", str(scenario), "--gpu", "h100-sxm",
               "--runs-dir", str(runs), "--no-html"]  # fmt: skip
        timed = _timed(cmd, code, out)
        # The run's folder; the run history (history.duckdb, .history.rows) sits beside it.
        (folder,) = [p for p in runs.iterdir() if p.is_dir() and not p.name.startswith(".")]
        commands.append(" ".join(cmd[1:]))
        rows.append(_row("bench simulate", n, timed, _size(folder)))
        print(rows[-1], flush=True)
        if baseline is None:
            first, baseline = folder, _save_baseline(bench, folder, code, out)
        more_rows, more_commands = _report_and_gate(bench, folder, n, baseline, code, out)
        rows += more_rows
        commands += more_commands
    assert first is not None and baseline is not None
    for times in args.tile:
        tiled = out / f"tiled-{times}"
        tile = Path(__file__).with_name("tile_run.py")
        cmd = [sys.executable, str(tile), str(first), "--times", str(times), "--out", str(tiled)]
        _timed(cmd, code, out)
        commands.append(" ".join(cmd[1:]))
        n = args.requests[0] * times
        rows.append(_row("tiled folder", n, None, _size(tiled)))
        more_rows, more_commands = _report_and_gate(bench, tiled, n, baseline, code, out)
        rows += more_rows
        commands += more_commands
    table = "\n".join(rows)
    (out / "long_runs.md").write_text(table + "\n\n" + "\n".join(commands) + "\n")
    print(table)


if __name__ == "__main__":
    main()
