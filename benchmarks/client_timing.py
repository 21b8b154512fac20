"""How right and how cheap is a load generator? Ours, AIPerf and `vllm bench serve`, one run.

    python benchmarks/client_timing.py --streams 100 --requests 500 --tokens 100 \
        [--aiperf PATH/aiperf] [--vllm-python PATH/python] [--tokenizer HF_DIR] [--out FILE]

For each client, a fresh benchmarks/truth_server.py (pinned to CPU 0 with taskset) streams
``--tokens`` one-token chunks per request, the first 50 ms after arrival and then one every
10 ms, and records when it truly sent each chunk. The client (pinned to CPU 1) runs
``--requests`` requests at ``--streams`` concurrency. Reported: the client's own TTFT and ITL
p50/p99 beside the truth's (the difference is the client's timing error) and the client's CPU
seconds per 1,000 tokens (its whole process tree, start-up included, from rusage; for ours also
the CPU of the load alone). Clients that are not installed are skipped. Prints a table; with
``--out`` writes the figures as JSON.

`ours` runs this project's client in a subprocess: `python benchmarks/client_timing.py --ours
URL STREAMS REQUESTS TOKENS OUT [user]` (closed loop, no tokenizer: tokens from the server's
usage), with kernel receive stamps (`ours`) or user-space ones only (`ours-user`); `locust`
and `locust-user` run the same plan with the Locust driver (one local worker, its users reading
through the blocking raw client; appended ``locust`` to the command above). Each of its
prompts starts with its request id, and the truth server keeps every stream's send times
(``--per-stream``), so its error is also measured chunk by chunk (:func:`chunk_errors`): TTFT,
ITL and arrival (chunk time - true send) errors p50/p99/max, for the chunk times the run used
(``t_s``: the kernel's stamps in `ours`) and for the user-space read times of the same chunks
(``read_s``), and the share of chunks read together with a later segment (their kernel stamps
are equal: the kernel merges queued segments and keeps the last one's stamp).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import pickle
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from truth_server import spawned

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SERVER_CPU, CLIENT_CPU = "0", "1"


def _cpu_children_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_ours(
    url: str, streams: int, requests: int, tokens: int, out: Path, kernel: bool = True,
    locust: bool = False,
) -> None:  # fmt: skip
    """This project's client: closed loop, ``streams`` users; pickles its records to ``out``.
    ``locust``: the Locust driver, one local worker (its master and worker processes are this
    one's children, so their CPU counts in the arm's), else the asyncio driver.

    Only loadgen is imported here (no pandas), so the CPU measured is the client's own.
    """
    sys.path.insert(0, str(ROOT))
    from loadgen.clock import RunClock
    from loadgen.drivers.driver import ClientConfig, LoadPlan, run_plan
    from loadgen.request_spec import RequestSpec

    specs = [
        RequestSpec(f"r{i:06d}", f"r{i:06d} " + "hello " * 99, 100, tokens, ignore_eos=True)
        for i in range(requests)
    ]
    plan = LoadPlan("closed", [[s] for s in specs], users=streams)
    gc.collect()
    gc.freeze()
    clock = RunClock()
    cpu0 = time.process_time()
    config = ClientConfig(url, "truth", kernel_stamps=kernel)
    if locust:
        from loadgen.drivers.locust.driver import run_locust

        result = run_locust(plan, config, clock, 1, run_time_s=1200)
    else:
        result = asyncio.run(run_plan(plan, config, clock))
    # Locust's load runs in its worker process: its CPU is the arm's (rusage), not this one's.
    load_cpu_s = None if locust else time.process_time() - cpu0
    out.write_bytes(
        pickle.dumps({"records": result.records, "load_cpu_s": load_cpu_s, "t0_ns": clock.t0_ns,
                      "stamps": result.stamps})
    )  # fmt: skip


def _stats(values: list[float]) -> dict[str, float | None]:
    import numpy as np

    arr = np.asarray(values, dtype=np.float64)
    if not arr.size:
        return {"p50": None, "p99": None, "max": None}
    return {"p50": float(np.percentile(arr, 50)), "p99": float(np.percentile(arr, 99)),
            "max": float(arr.max())}  # fmt: skip


def chunk_errors(records: list[Any], t0_ns: int, truth: dict[str, Any]) -> dict[str, Any]:
    """Per-chunk errors (ms) against the truth server's per-stream send times: for ``t_s`` (the
    chunk times the run used) and ``read_s`` (the user-space read times of the same chunks),
    TTFT error per request, ITL error per gap and arrival error per chunk (time - true send);
    ``merged_share``: chunks whose kernel stamp equals the next chunk's (read together);
    ``request_to_server_ms``: the truth server's arrival stamp - the client's sent stamp, which
    the TTFT error includes (the server stamps a request when its loop reads it)."""
    sends = {key: (arrival, sent) for key, arrival, sent in truth.get("streams", [])}
    out: dict[str, Any] = {}
    merged = counted = 0
    to_server: list[float] = []
    for column in ("t_s", "read_s"):
        ttft, itl, late, late_alone = [], [], [], []
        for r in records:
            key = r.request_id
            if r.status != "ok" or key not in sends or not r.chunks:
                continue
            arrival, sent = sends[key]
            ns = [t0_ns + round(getattr(c, column) * 1e9) for c in r.chunks]
            stamps = [c.t_s for c in r.chunks]
            if len(ns) != len(sent):
                continue
            sent_ns = t0_ns + round(r.sent_s * 1e9)
            if column == "t_s":
                to_server.append((arrival - sent_ns) / 1e6)
            ttft.append(((ns[0] - sent_ns) - (sent[0] - arrival)) / 1e6)
            for i in range(len(ns)):
                late.append((ns[i] - sent[i]) / 1e6)
                alone = i + 1 == len(ns) or stamps[i + 1] != stamps[i]
                if alone:
                    late_alone.append((ns[i] - sent[i]) / 1e6)
                if i:
                    itl.append(((ns[i] - ns[i - 1]) - (sent[i] - sent[i - 1])) / 1e6)
                if column == "t_s":
                    counted += 1
                    merged += not alone
        out[column] = {"ttft_error_ms": _stats(ttft), "itl_error_ms": _stats(itl),
                       "arrival_error_ms": _stats(late),
                       "arrival_error_unmerged_ms": _stats(late_alone)}  # fmt: skip
    out["merged_share"] = merged / counted if counted else None
    out["request_to_server_ms"] = _stats(to_server)
    out["chunks"] = counted
    return out


def _summarize_ours(path: Path, truth: dict[str, Any]) -> dict[str, Any]:
    from results.figures.summary import compute_summary
    from results.folder.run_folder import requests_frame, tokens_frame

    data = pickle.loads(path.read_bytes())
    records = data["records"]
    summary = compute_summary(requests_frame(records), tokens_frame(records))
    return {
        "ttft_ms": [summary["ttft_ms"]["p50"], summary["ttft_ms"]["p99"]],
        "itl_ms": [summary["itl_ms"]["p50"], summary["itl_ms"]["p99"]],
        "ok": summary["counts"]["all"]["ok"],
        "load_cpu_s": data["load_cpu_s"],
        "kernel_requests": sum(r.stamps == "kernel" for r in records),
        "chunk_errors": chunk_errors(records, data["t0_ns"], truth),
    }


def _aiperf(exe: str, url: str, args: argparse.Namespace, work: Path) -> tuple[list[str], Any]:
    cmd = [
        exe, "profile", "--model", "truth", "--url", url, "--endpoint-type", "completions",
        "--streaming", "--tokenizer", args.tokenizer, "--concurrency", str(args.streams),
        "--request-count", str(args.requests), "--synthetic-input-tokens-mean", "100",
        "--output-tokens-mean", str(args.tokens), "--extra-inputs", "ignore_eos:true",
        "--artifact-dir", str(work / "aiperf"), "--ui-type", "none",
    ]  # fmt: skip

    def parse(truth: dict[str, Any]) -> dict[str, Any]:
        found = sorted((work / "aiperf").rglob("profile_export_aiperf.json"))
        data = json.loads(found[-1].read_text())
        pick = lambda key: [data[key]["p50"], data[key]["p99"]]  # noqa: E731
        return {"ttft_ms": pick("time_to_first_token"), "itl_ms": pick("inter_token_latency")}

    return cmd, parse


def _vllm(python: str, url: str, args: argparse.Namespace, work: Path) -> tuple[list[str], Any]:
    cmd = [
        python, "-m", "vllm.entrypoints.cli.main", "bench", "serve", "--backend", "openai",
        "--base-url", url, "--endpoint", "/v1/completions", "--model", "truth",
        "--tokenizer", args.tokenizer, "--dataset-name", "random", "--random-input-len", "100",
        "--random-output-len", str(args.tokens), "--num-prompts", str(args.requests),
        "--max-concurrency", str(args.streams), "--ignore-eos", "--save-result",
        "--result-dir", str(work), "--result-filename", "vllm.json", "--percentile-metrics",
        "ttft,itl", "--metric-percentiles", "50,99",
    ]  # fmt: skip

    def parse(truth: dict[str, Any]) -> dict[str, Any]:
        data = json.loads((work / "vllm.json").read_text())
        return {"ttft_ms": [data["p50_ttft_ms"], data["p99_ttft_ms"]],
                "itl_ms": [data["p50_itl_ms"], data["p99_itl_ms"]]}  # fmt: skip

    return cmd, parse


def _ours(
    url: str, args: argparse.Namespace, work: Path, kernel: bool = True, locust: bool = False
) -> tuple[list[str], Any]:
    out = work / "ours.pkl"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--ours", url, str(args.streams),
           str(args.requests), str(args.tokens), str(out)]  # fmt: skip
    cmd += ([] if kernel else ["user"]) + (["locust"] if locust else [])
    return cmd, lambda truth: _summarize_ours(out, truth)


def measure(name: str, build: Any, args: argparse.Namespace, port: int) -> dict[str, Any]:
    """One client against a fresh truth server; its figures beside the truth's."""
    work = Path(tempfile.mkdtemp(prefix=f"timing-{name}-"))
    truth_path = work / "truth.json"
    args_ = ["--ttft-ms", str(args.ttft_ms), "--itl-ms", str(args.itl_ms), "--per-stream"]
    with spawned(port, truth_path, args_, prefix=["taskset", "-c", SERVER_CPU]) as url:
        cmd, parse = build(url, args, work)
        cpu0, t0 = _cpu_children_s(), time.monotonic()
        done = subprocess.run(["taskset", "-c", CLIENT_CPU, *cmd], capture_output=True,
                              text=True, timeout=1800)  # fmt: skip
        cpu_s, wall_s = _cpu_children_s() - cpu0, time.monotonic() - t0
        if done.returncode != 0:
            return {"client": name, "error": (done.stderr or done.stdout)[-1500:]}
    truth = json.loads(truth_path.read_text())
    figures = parse(truth)
    truth.pop("streams", None)
    shutil.rmtree(work, ignore_errors=True)
    tokens = truth["tokens"]
    return {
        "client": name, "streams": args.streams, "requests": truth["requests"], "tokens": tokens,
        "reported": figures, "wall_s": wall_s, "cpu_s": cpu_s,
        "cpu_s_per_1k_tokens": cpu_s / tokens * 1000 if tokens else None,
        "truth": {k: truth[k] for k in ("ttft_ms", "itl_ms", "lateness_ms")},
    }  # fmt: skip


def _row(r: dict[str, Any]) -> str:
    if "error" in r:
        return f"{r['client']:>10}  failed: {r['error'][-300:]!r}"
    rep, tru = r["reported"], r["truth"]
    err = [
        rep[key][i] - tru[key][stat]
        for key in ("ttft_ms", "itl_ms")
        for i, stat in enumerate(("p50", "p99"))
    ]
    load = (
        f" (load {r['reported']['load_cpu_s'] / r['tokens'] * 1000:.3f})"
        if rep.get("load_cpu_s") is not None
        else ""
    )
    ttft, itl = rep["ttft_ms"], rep["itl_ms"]
    truth = f"truth {tru['ttft_ms']['p50']:.1f}/{tru['ttft_ms']['p99']:.1f}"
    per_chunk = ""
    if "chunk_errors" in rep:
        errors = rep["chunk_errors"]

        def three(d: dict[str, Any]) -> str:
            return "/".join(
                f"{d[k]:+.2f}" if d[k] is not None else "-" for k in ("p50", "p99", "max")
            )

        for column, what in (("t_s", "recorded"), ("read_s", "user-space")):
            e = errors[column]
            per_chunk += (
                f"\n{'':>17}{what:>10} per chunk p50/p99/max: TTFT error "
                f"{three(e['ttft_error_ms'])}  ITL error {three(e['itl_error_ms'])}  arrival "
                f"{three(e['arrival_error_ms'])} "
                f"(unmerged {three(e['arrival_error_unmerged_ms'])}) ms"
            )
        per_chunk += (
            f"\n{'':>17}read with a later segment: {errors['merged_share']:.2%} of chunks; "
            f"request to the server's stamp {three(errors['request_to_server_ms'])} ms"
        )
    return (
        f"{r['client']:>10} {r['streams']:>5}  TTFT p50/p99 {ttft[0]:7.1f}/{ttft[1]:7.1f} "
        f"({truth}, error {err[0]:+.1f}/{err[1]:+.1f})  ITL p50/p99 {itl[0]:5.2f}/{itl[1]:6.2f} "
        f"(error {err[2]:+.2f}/{err[3]:+.2f})  CPU s/1k tok {r['cpu_s_per_1k_tokens']:.3f}{load}"
        f"  server late p99 {tru['lateness_ms']['p99']:.2f} ms{per_chunk}"
    )


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--ours":
        url, streams, requests, tokens, out = sys.argv[2:7]
        kernel, locust = "user" not in sys.argv[7:], "locust" in sys.argv[7:]
        run_ours(url, int(streams), int(requests), int(tokens), Path(out), kernel, locust)
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=100)
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--tokens", type=int, default=100)
    parser.add_argument("--ttft-ms", type=float, default=50.0, help="the server's TTFT")
    parser.add_argument("--itl-ms", type=float, default=10.0, help="the server's ITL")
    parser.add_argument("--aiperf", default=None, help="the aiperf executable (its own venv)")
    parser.add_argument("--vllm-python", default=None, help="a python with vllm installed")
    parser.add_argument(
        "--tokenizer", default=None, help="a local HF tokenizer dir (peers need one)"
    )
    parser.add_argument("--port", type=int, default=8191)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--only", default="ours,ours-user,locust,locust-user,vllm,aiperf")
    args = parser.parse_args()
    clients: list[tuple[str, Any]] = [
        ("ours", _ours),
        ("ours-user", lambda u, a, w: _ours(u, a, w, kernel=False)),
        ("locust", lambda u, a, w: _ours(u, a, w, locust=True)),
        ("locust-user", lambda u, a, w: _ours(u, a, w, kernel=False, locust=True)),
    ]
    if args.vllm_python and args.tokenizer:
        clients.append(("vllm", lambda u, a, w: _vllm(args.vllm_python, u, a, w)))
    if args.aiperf and args.tokenizer and os.path.exists(args.aiperf):
        clients.append(("aiperf", lambda u, a, w: _aiperf(args.aiperf, u, a, w)))
    results = []
    for name, build in clients:
        if name not in args.only.split(","):
            continue
        result = measure(name, build, args, args.port)
        results.append(result)
        print(_row(result), flush=True)
    if args.out:
        args.out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
