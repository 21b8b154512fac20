"""`bench run` killed with SIGKILL mid-load, as the OOM killer or a power cut would end it.

Nothing of the run's own runs after the signal, so only what the record stream flushed before
it is there: the test runs the real command against the reference engine it launches on
127.0.0.1, notes how many requests the engine has answered, waits more than one flush interval
(results.folder.parts.record_stream.FLUSH_S) and kills the whole process group. The folder must keep
at least those requests, each with all its chunks, and `bench report` must read it, saying it is
incomplete. The engine's steps, polled while the load went on (bench.run.step_follower), are
there too, in parts: every step from the run's first on, none missing.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from bench.cli.app import app
from results.folder.parts.writer import (
    FLUSH_S,
    REQUESTS_PARTS,
    SAMPLES_PARTS,
    STEPS_PARTS,
    part_files,
)
from results.folder.run_folder import STEPS_PARQUET, load_run
from tests.support.bench_process import BenchProcess, requests_succeeded

SCENARIO = """
name = "killed"
users = 4
num_requests = 400
ignore_eos = true
seed = 5

[input_len]
kind = "uniform"
low = 8
high = 32

[output_len]
kind = "uniform"
low = 32
high = 64

[engine]
preset = "tiny"
"""
pytestmark = pytest.mark.timeout(180)

ENGINE_READY = r"engine ready at (http://127\.0\.0\.1:\d+)"


@pytest.fixture
def bench_run() -> Iterator[list[BenchProcess]]:
    started: list[BenchProcess] = []
    yield started
    for proc in started:
        if proc.process.poll() is None:
            proc.kill()


def test_a_sigkilled_run_keeps_every_request_flushed_before_the_kill(
    tmp_path: Path, bench_run: list[BenchProcess]
) -> None:
    (tmp_path / "killed.toml").write_text(SCENARIO)
    proc = BenchProcess(
        ["run", "--scenario", "killed.toml", "--runs-dir", "runs", "--no-live"], tmp_path
    )
    bench_run.append(proc)
    url = proc.wait_for(ENGINE_READY, 90.0).group(1)
    proc.wait_engine_progress(url, 8, 60.0)
    answered = requests_succeeded(url)
    (folder,) = [p for p in (tmp_path / "runs").iterdir() if p.is_dir()]
    mark_ns, parts_at_mark = time.perf_counter_ns(), len(part_files(folder, SAMPLES_PARTS))
    # Every request answered by now is flushed within one interval (plus the part's write).
    time.sleep(2 * FLUSH_S + 2.0)
    # Two more parts of readings: the second holds only readings taken after the mark.
    deadline = time.monotonic() + 60.0
    while len(part_files(folder, SAMPLES_PARTS)) < parts_at_mark + 2:
        assert time.monotonic() < deadline, "the probes wrote no part of their readings"
        time.sleep(0.1)
    flushed = part_files(folder, SAMPLES_PARTS)
    assert proc.process.poll() is None, proc.output  # still mid-load: 400 requests take longer
    proc.note_children()  # the probe process too: it runs in a session of its own
    proc.kill()  # SIGKILL to bench, its engine and every process they started
    assert proc.process.returncode == -9

    assert not (folder / "requests.parquet").exists() and (folder / REQUESTS_PARTS).is_dir()
    assert not (folder / "summary.json").exists()
    run = load_run(folder)
    incomplete = run.run_json["incomplete"]
    assert incomplete["flush_s"] == FLUSH_S
    ok = run.requests[run.requests["status"] == "ok"]
    assert len(ok) >= answered >= 8 and incomplete["requests_flushed"] == len(run.requests)
    assert run.requests["request_id"].is_unique
    # Each flushed request has every chunk it received (tokens are written before requests).
    chunk_tokens = run.tokens.groupby("request_id")["n_tokens"].sum()
    assert (chunk_tokens.reindex(ok["request_id"]).to_numpy() == ok["output_tokens"]).all()
    # The steps polled before the kill, read from their parts: consecutive from the run's start,
    # and every request done by the last of them has all its decode steps there.
    assert not (folder / STEPS_PARQUET).exists() and (folder / STEPS_PARTS).is_dir()
    steps = run.steps
    assert steps is not None and len(steps) > 0 and steps["start_s"].min() >= 0
    assert steps["step"].diff().dropna().eq(1).all()
    done = ok[ok["done_s"] <= steps["end_s"].max()]
    assert len(done) > 0
    assert steps["num_decode_tokens"].sum() >= (done["output_tokens"] - 1).sum()
    # Every reading of the parts written before the kill, on the run's clock, in time order.
    samples = run.samples
    assert not (folder / "samples.parquet").exists() and samples is not None
    assert len(samples) >= sum(pq.read_metadata(p).num_rows for p in flushed) > 0
    assert incomplete["samples_flushed"] == len(samples)
    assert samples["t_s"].is_monotonic_increasing and "cpu" in set(samples["source"])
    mark_s = (mark_ns - run.run_json["client"]["t0_ns"]) / 1e9
    assert samples["t_s"].min() < 0 < mark_s < samples["t_s"].max()

    result = CliRunner().invoke(app, ["report", str(folder), "--html"])
    assert result.exit_code == 0, result.output
    assert "incomplete run" in result.output
    assert f"{len(run.requests)} requests flushed to disk" in " ".join(result.output.split())
    assert "incomplete run" in (folder / "report.html").read_text(encoding="utf-8")
    # Reading it changed nothing: it is still the killed run's folder.
    assert not (folder / "summary.json").exists() and (folder / REQUESTS_PARTS).is_dir()
    assert (folder / SAMPLES_PARTS).is_dir() and not (folder / "samples.parquet").exists()
