"""How fast an open-loop schedule this machine sends through `bench worker`s: achieved send rate
against the planned one, and each worker's schedule lag, at rising Poisson rates.

    python benchmarks/open_loop_workers.py [--workers 1 4] [--rates 25 50 100 200]
                                           [--seconds 10] [--out DIR]

A simulated Llama-3-8B on an H100 (`bench serve --device sim`, real time, 4-token answers, 256
sequences a step) serves on 127.0.0.1; for each worker count and rate, one `bench run --driver
locust --expect-workers W` replays Poisson arrivals for ``--seconds`` while W `bench worker`
processes join it on 127.0.0.1, as on other hosts. A rate is held when every request is ok,
the achieved send rate ((n - 1) / the span of sent_s) is within 2% of the planned one (the same
over scheduled_s) and no worker is behind (its schedule lag p99 within the client check's
20 ms). Everything runs on this machine: the server, the master and the workers share its
cores, so the figures are this machine's, not a fleet's.
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pandas as pd

SCENARIO = """name = "open-loop-workers"
seed = 0
users = 64
num_requests = {n}
ignore_eos = true

[arrival]
kind = "poisson"
rate_rps = {rate}

[input_len]
kind = "fixed"
value = 32

[output_len]
kind = "fixed"
value = 4
"""
HELD_RATIO = 0.98
BENCH = [sys.executable, "-m", "bench"]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve() -> tuple[subprocess.Popen[bytes], str]:
    port = _port()
    server = subprocess.Popen(
        [*BENCH, "serve", "--device", "sim", "--model", "llama-3-8b", "--gpu", "h100-sxm",
         "--max-num-seqs", "256", "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    for _ in range(240):
        try:
            urllib.request.urlopen(url + "/health", timeout=1)
            return server, url
        except OSError:
            time.sleep(0.5)
    server.kill()
    raise SystemExit("bench serve did not answer /health within 120 s")


def measure(url: str, workers: int, rate: float, seconds: float, work: Path) -> dict:
    """One run of ``rate`` requests/s for ``seconds`` over ``workers`` `bench worker`s."""
    n = max(2, round(rate * seconds))
    scenario = work / f"w{workers}-r{rate:g}.toml"
    scenario.write_text(SCENARIO.format(n=n, rate=rate))
    runs = work / f"runs-w{workers}-r{rate:g}"
    address = f"127.0.0.1:{_port()}"
    run = subprocess.Popen(
        [*BENCH, "run", "--scenario", str(scenario), "--url", url, "--tokenizer", "tiny",
         "--driver", "locust", "--expect-workers", str(workers), "--master-bind", address,
         "--no-live", "--no-probes", "--runs-dir", str(runs)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    time.sleep(3.0)  # the master binds before the workers call it (they retry anyway)
    joined = [subprocess.Popen([*BENCH, "worker", "--master", address],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
              for _ in range(workers)]  # fmt: skip
    run.wait(timeout=seconds * 4 + 180)
    for w in joined:
        w.wait(timeout=60)
    (folder,) = runs.iterdir()
    req = pd.read_parquet(folder / "requests.parquet")
    load = json.loads((folder / "run.json").read_text())["load"]
    planned = float((n - 1) / (req["scheduled_s"].max() - req["scheduled_s"].min()))
    achieved = float((n - 1) / (req["sent_s"].max() - req["sent_s"].min()))
    lags = [w["schedule_lag"] for w in load["locust_workers"]]
    ok = bool((req["status"] == "ok").all())
    behind = [w["index"] for w in load["locust_workers"] if w["schedule_lag"]["behind"]]
    return {
        "workers": workers, "rate_rps": rate, "requests": n, "planned_rps": planned,
        "achieved_rps": achieved, "all_ok": ok, "behind": behind,
        "lag_p99_ms_max": max(lag["p99_s"] for lag in lags) * 1e3,
        "lag_max_ms": max(lag["max_s"] for lag in lags) * 1e3,
        "held": bool(ok and not behind and achieved >= HELD_RATIO * planned),
    }  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--rates", type=float, nargs="+", default=[25, 50, 100, 200])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--out", type=Path, help="also write the rows as JSON here")
    args = parser.parse_args()
    server, url = _serve()
    rows = []
    try:
        with tempfile.TemporaryDirectory(prefix="open-loop-workers-") as tmp:
            for workers in args.workers:
                for rate in args.rates:
                    row = measure(url, workers, rate, args.seconds, Path(tmp))
                    rows.append(row)
                    print(
                        f"{workers} worker(s), {rate:g} req/s planned {row['planned_rps']:.1f}, "
                        f"achieved {row['achieved_rps']:.1f}, worst p99 lag "
                        f"{row['lag_p99_ms_max']:.1f} ms, max {row['lag_max_ms']:.1f} ms, behind "
                        f"{row['behind'] or 'none'}, {'held' if row['held'] else 'NOT held'}",
                        flush=True,
                    )
    finally:
        server.terminate()
        server.wait(timeout=30)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
