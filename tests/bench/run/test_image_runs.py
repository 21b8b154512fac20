"""`bench run --scenario images` against a stand-in vision server on 127.0.0.1
(tests.support.vision_server), which decodes every image it is sent and reports usage with a
cost per image of its size: the images reach the server as the scenario says, each request's
image tokens are the server's count beyond the text, and the image figures (TTFT by image
count, tokens per image) reach summary.json, the terminal and report.html, read in a real
headless browser. The reference engine refuses the scenario before the load, saying why."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.run.endpoint.tokenizer_source import resolve_tokenizer
from results.folder.run_folder import load_run
from tests.support.browser import (
    BROWSER_MISSING,
    CHROMIUM,
    CHROMIUM_ARGS,
    FIGURES_JS,
    open_page,
    sync_playwright,
)
from tests.support.openai_fakes import serving
from tests.support.paths import REPO_ROOT
from tests.support.vision_server import TEMPLATE_TOKENS, VisionServer, image_cost

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
REQUESTS = 16


def _bench_run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "bench", "run", "--scenario", "images", "--no-live",
         "--no-calibrate", "--no-probes", "--runs-dir", str(tmp_path / "runs"), *args],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip


def test_an_image_run_sends_the_images_and_splits_ttft_by_their_count(tmp_path: Path) -> None:
    server = VisionServer(resolve_tokenizer("tiny").tokenizer, max_side=320)
    with serving(server.handler()) as http:
        proc = _bench_run(tmp_path, "--url", http.base_url, "--engine", "openai", "--tokenizer",
                          "tiny", "--num-requests", str(REQUESTS), "--users", "2")  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert server.problems == []
    (folder,) = (tmp_path / "runs").glob("*-images-*")
    run = load_run(folder)
    req = run.requests.sort_values("request_id")
    assert (req["status"] == "ok").all(), req["error"].tolist()
    streamed = sorted((b for b in server.bodies if b.get("stream")),
                      key=lambda b: b["messages"][-1]["content"][0]["text"]
                      if isinstance(b["messages"][-1]["content"], list)
                      else b["messages"][-1]["content"])  # fmt: skip
    assert len(streamed) == REQUESTS
    # The pre-flight sent one image of its own; the load the scenario's sizes, every image
    # decoded by the server.
    assert server.checked == [(32, 32)]
    assert server.sizes and all(160 <= w <= 320 and 120 <= h <= 240 for w, h in server.sizes)
    sent = sum(len(b["messages"][-1]["content"]) - 1 for b in streamed
               if isinstance(b["messages"][-1]["content"], list))  # fmt: skip
    assert sent == int(req["images"].sum()) > 0
    assert set(req["images"]) - {0} <= {1, 2, 3} and (req["images"] == 0).any()
    # The image tokens are what the server counted beyond the text: its template's and the
    # images' own.
    with_images = req[req["images"] > 0]
    excess = with_images["usage_prompt_tokens"] - with_images["client_prompt_tokens"]
    assert (with_images["image_tokens"] == excess).all()
    assert (excess > TEMPLATE_TOKENS + with_images["images"]).all()
    assert req.loc[req["images"] == 0, "image_tokens"].isna().all()
    section = run.summary["images"]
    assert section["requests"] == REQUESTS and section["images"] == sent
    assert section["requests_with_images"] == len(with_images)
    assert section["text_only_excess_tokens"] == TEMPLATE_TOKENS
    costs = sum(image_cost(w, h) for w, h in server.sizes)
    per_image = (costs + TEMPLATE_TOKENS * len(with_images)) / sent
    assert section["image_tokens_per_image"] == pytest.approx(per_image)
    rows = section["ttft_ms_by_images"]
    assert [r["images"] for r in rows] == sorted(set(req["images"]))
    assert sum(r["count"] for r in rows) == REQUESTS and all(r["p50"] > 0 for r in rows)
    assert run.run_json["scenario"]["images"]["share"] == 0.75
    out = " ".join(proc.stdout.split())
    assert f"images: {sent} sent by {len(with_images)} of {REQUESTS} requests" in out, out
    assert "TTFT by images per request" in out
    _check_report(folder / "report.html", sent)


def _check_report(path: Path, sent: int) -> None:
    """report.html: the headline's image tiles, and the Images section drawn in the browser."""
    if BROWSER_MISSING is not None:
        pytest.skip(f"report.html is not opened in a browser: {BROWSER_MISSING}")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page, errors = open_page(browser, path)
        headline = page.locator("#fig-headline").inner_text()
        assert "Images sent" in headline and "Prompt tokens per image" in headline, headline
        figures = {f["key"]: f for f in page.evaluate(FIGURES_JS)}
        assert "images" in figures, sorted(figures)
        images = figures["images"]
        # Two bar traces (TTFT p50, p99) and the requests' points, drawn.
        assert images["traces"] == 3 and images["drawn"] >= 3, images
        assert str(sent) in page.locator("#fig-images").inner_text()
        assert errors == []
        browser.close()


def test_the_reference_engine_refuses_the_images_before_the_load(tmp_path: Path) -> None:
    proc = _bench_run(tmp_path, "--num-requests", "2")
    out = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode == 2, out
    assert "a content part of type 'image_url'" in out, out
    assert "the reference engine serves text only and sees no images" in out
    assert "Traceback" not in out


def test_locusts_workers_send_the_images_as_the_asyncio_client_does(tmp_path: Path) -> None:
    server = VisionServer(resolve_tokenizer("tiny").tokenizer, max_side=320)
    with serving(server.handler()) as http:
        proc = _bench_run(tmp_path, "--url", http.base_url, "--engine", "openai", "--tokenizer",
                          "tiny", "--num-requests", "8", "--users", "2", "--driver", "locust",
                          "--workers", "1")  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert server.problems == []
    (folder,) = (tmp_path / "runs").glob("*-images-*")
    req = load_run(folder).requests
    assert len(req) == 8 and (req["status"] == "ok").all(), req["error"].tolist()
    streamed = [b for b in server.bodies if b.get("stream")]
    sent = sum(len(b["messages"][-1]["content"]) - 1 for b in streamed
               if isinstance(b["messages"][-1]["content"], list))  # fmt: skip
    assert sent == int(req["images"].sum()) > 0 and len(server.sizes) >= sent
