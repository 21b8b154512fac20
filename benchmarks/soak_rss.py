"""Does the client's memory stay flat through a long run? `bench run` against the truth server.

    python benchmarks/soak_rss.py --minutes 30 --streams 100 --out soak

Starts benchmarks/truth_server.py on a free port of 127.0.0.1 (first chunk 50 ms after a
request arrives, then one every ``--itl-ms``), then `bench run` of a closed loop of
``--streams`` users for ``--minutes`` minutes, ``--tokens`` one-token chunks per request,
probes on (the CPU probe; the truth server exports no /metrics). Every ``--every-s`` seconds it
samples the RSS of the `bench run` process and of its children (the probe process;
psutil) into ``OUT/rss.csv``, the two together and apart.

Printed, and written to ``OUT/soak.json``: the RSS at minute ``--from-minute`` and when the load
ended (its ``load done`` line), the least and the most RSS between them (MiB), the spread (most
/ least - 1), of the two processes together and apart; the peak of the whole command, whose
end (sealing the tables, the summary, report.html) reads the run back; the requests the run
folder recorded and the chunks the truth server sent. The issue's target: a spread within
10% from minute 5 to 30.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pyarrow.parquet as pq
from truth_server import spawned

ROOT = Path(__file__).resolve().parents[1]

SCENARIO = """
name = "soak"
seed = 0
users = {streams}
duration_s = {duration_s}
num_requests = {num_requests}
think_time_s = 0.0
api = "completions"
ignore_eos = true
temperature = 0.0

[input_len]
kind = "fixed"
value = 100

[output_len]
kind = "fixed"
value = {tokens}
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rss(proc: psutil.Process) -> tuple[int, int]:
    """Resident bytes of ``proc`` and of its children (the probe process) together; (0, 0)
    once it has gone."""
    try:
        procs = [proc, *proc.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0, 0
    sizes = []
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            sizes.append(p.memory_info().rss)
    return (sizes[0], sum(sizes[1:])) if sizes else (0, 0)


def _sample(
    run: subprocess.Popen[bytes], every_s: float, csv: Path, log: Path
) -> tuple[list[tuple[float, int, int]], float | None]:
    """RSS samples (seconds since start, bytes of `bench run`, bytes of its children) of
    ``run`` until it exits, also to ``csv``; and when its load ended (its ``load done`` line
    in ``log``; None if it never printed one), after which it summarizes and draws the run."""
    proc = psutil.Process(run.pid)
    samples: list[tuple[float, int, int]] = []
    load_done_s = None
    t0 = time.monotonic()
    with csv.open("w") as f:
        f.write("t_s,rss_bytes,bench_bytes,children_bytes\n")
        while run.poll() is None:
            t, (own, children) = time.monotonic() - t0, _rss(proc)
            if load_done_s is None and "load done:" in log.read_text(errors="replace"):
                # The load ended after the sample before this one: the window ends there.
                load_done_s = samples[-1][0] if samples else t
            if own:
                samples.append((t, own, children))
                f.write(f"{t:.1f},{own + children},{own},{children}\n")
                f.flush()
            time.sleep(every_s)
    if load_done_s is None and samples and "load done:" in log.read_text(errors="replace"):
        load_done_s = samples[-1][0]  # the run ended before the next sample
    return samples, load_done_s


def _figures(samples: list[tuple[float, int, int]], from_s: float, to_s: float) -> dict[str, float]:
    """The RSS figures (MiB) from ``from_s`` to ``to_s``: of both processes together, and
    apart."""
    window = [(own, children) for t, own, children in samples if from_s <= t <= to_s]
    if not window:
        raise SystemExit(f"no RSS sample after {from_s:.0f} s: the run ended early")
    out: dict[str, float] = {}
    for what, pick in (("", lambda o, c: o + c), ("bench_", lambda o, c: o),
                       ("children_", lambda o, c: c)):  # fmt: skip
        series = [pick(own, children) for own, children in window]
        least, most = min(series), max(series)
        out |= {
            f"{what}rss_at_from_mib": series[0] / 2**20,
            f"{what}rss_at_end_mib": series[-1] / 2**20,
            f"{what}least_mib": least / 2**20,
            f"{what}most_mib": most / 2**20,
            f"{what}spread": most / least - 1 if least else float("nan"),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--from-minute", type=float, default=5.0)
    parser.add_argument("--streams", type=int, default=100)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--itl-ms", type=float, default=10.0)
    parser.add_argument("--every-s", type=float, default=5.0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    scenario = out / "soak.toml"
    # Enough requests to outlast the duration by a fifth (a duration-bound plan is capped at
    # bench.run.load_plan.DURATION_REQUESTS_CAP); the duration ends the run.
    request_s = 0.05 + args.tokens * args.itl_ms / 1000
    num_requests = math.ceil(args.streams * args.minutes * 60 / request_s * 1.2)
    scenario.write_text(SCENARIO.format(
        streams=args.streams, duration_s=args.minutes * 60, num_requests=num_requests,
        tokens=args.tokens,
    ))  # fmt: skip
    truth = ["--itl-ms", str(args.itl_ms)]
    with (
        spawned(_free_port(), out / "truth.json", truth) as url,
        (out / "bench-run.log").open("w") as log,
    ):
        run = subprocess.Popen(
            [sys.executable, "-m", "bench", "run", "--scenario", str(scenario), "--url", url,
             "--tokenizer", "tiny", "--no-live", "--runs-dir", str(out / "runs")],
            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        samples, load_done_s = _sample(run, args.every_s, out / "rss.csv", Path(log.name))
    if run.returncode != 0:
        raise SystemExit(f"bench run exited {run.returncode}: see {out / 'bench-run.log'}")
    # The run's folder; the run history (history.duckdb, .history.rows) sits beside it.
    (folder,) = [p for p in (out / "runs").iterdir() if p.is_dir() and not p.name.startswith(".")]
    if load_done_s is None:
        raise SystemExit(f"bench run printed no 'load done' line: see {out / 'bench-run.log'}")
    figures = {
        "minutes": args.minutes, "from_minute": args.from_minute, "streams": args.streams,
        "load_done_s": load_done_s, **_figures(samples, args.from_minute * 60, load_done_s),
        "end_of_run_peak_mib": max(own + kids for _, own, kids in samples) / 2**20,
        "requests_recorded": pq.ParquetFile(folder / "requests.parquet").metadata.num_rows,
        "chunks_recorded": pq.ParquetFile(folder / "tokens.parquet").metadata.num_rows,
        "chunks_sent": json.loads((out / "truth.json").read_text()).get("tokens"),
    }  # fmt: skip
    (out / "soak.json").write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
