"""The pre-flight check against real servers on 127.0.0.1: `bench serve`'s app, a plain HTTP
server, and OpenAI-compatible servers answering as vLLM and llama.cpp's server do."""

from __future__ import annotations

import functools
import http.server
import io
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from rich.console import Console

from bench.run.endpoint.preflight import PreflightError, models_document, preflight, served_models
from bench.run.load_plan import build_plan
from bench.run.orchestrate import RunOptions, RunRefused, run_benchmark
from bench.scenario.scenario import Scenario, load_scenario
from engine.config import EngineConfig
from engine.llm_engine import load_tokenizer
from engine.model.weights import load_model_spec
from engine_adapters.llamacpp import LLAMACPP
from engine_adapters.reference import REFERENCE
from engine_adapters.vllm import VLLM
from tests.support.hf_fixtures import make_hf_model_dir
from tests.support.openai_fakes import openai_handler, serving
from tests.support.paths import REPO_ROOT
from tests.support.server_fixture import running_server

# The tiny preset, at its own context (max_position_embeddings 2,048).
SERVER_CONFIG = EngineConfig.from_flat(dict(model="tiny", dtype="float32", device="cpu"))

# The README's example scenario as it was: a 2,000-token shared prefix before prompts of up to
# 160 tokens and 128 output tokens, on the tiny model's 2,048 tokens: every request got a 400.
OLD_README_EXAMPLE = """
name = "my-scenario"
users = 8
num_requests = 40
ignore_eos = true

[input_len]
kind = "uniform"
low = 96
high = 160

[output_len]
kind = "fixed"
value = 128

[shared_prefix]
tokens = 2000
num_prefixes = 1
share_ratio = 1.0
"""

SMALL = """
name = "small"
users = 2
num_requests = 4
ignore_eos = true

[input_len]
kind = "uniform"
low = {low}
high = {high}

[output_len]
kind = "uniform"
low = 4
high = {out}
"""


@functools.cache
def tiny_tokenizer() -> object:
    config, _ = load_model_spec("tiny")
    return load_tokenizer("tiny", config)


def scenario(tmp_path: Path, text: str, name: str = "s.toml") -> Scenario:
    path = tmp_path / name
    path.write_text(text)
    return load_scenario(path)


def check(
    spec: Scenario, url: str, model: str | None = None, adapter=REFERENCE, tokenizer=None
) -> object:
    plan = build_plan(spec, tokenizer or tiny_tokenizer())
    return preflight(spec, plan, url, adapter, model)


def scenarios_page_example() -> str:
    """The example scenario of docs/scenarios.md's Scenarios section, as the page shows it now
    (it was the README's)."""
    text = (REPO_ROOT / "docs" / "scenarios.md").read_text()
    (block,) = re.findall(r"```toml\n(name = \"my-scenario\".*?)```", text, re.S)
    return block


def test_bench_serve_states_its_context_and_a_fitting_scenario_passes(
    tmp_path: Path, base_url: str
) -> None:
    (model,) = served_models(httpx.get(base_url + "/v1/models").json())
    assert model.max_model_len == 2048 and model.context_source == "/v1/models max_model_len"
    found = check(scenario(tmp_path, SMALL.format(low=8, high=16, out=8)), base_url)
    assert found.model == model.id and found.max_model_len == 2048 and found.notes == []
    assert 8 + 4 <= found.longest_tokens <= 16 + 8


def test_an_unknown_model_is_refused_listing_the_served_ones(tmp_path: Path, base_url: str) -> None:
    spec = scenario(tmp_path, SMALL.format(low=8, high=16, out=8))
    with pytest.raises(PreflightError) as info:
        check(spec, base_url, model="llama-9000")
    assert str(info.value) == (
        f"--model 'llama-9000': {base_url} does not serve it; it serves 'tiny'"
    )


def test_the_old_readme_example_is_refused_before_any_request(
    tmp_path: Path, base_url: str
) -> None:
    path = tmp_path / "old.toml"
    path.write_text(OLD_README_EXAMPLE)
    opts = RunOptions(load_scenario(path), base_url, "reference", None, "tiny", tmp_path / "r")
    with pytest.raises(RunRefused) as info:
        run_benchmark(opts, Console(file=io.StringIO()))
    assert info.value.exit_code == 2
    message = str(info.value)
    # The prefix's 2,000 tokens and the longest own part drawn (at most 160).
    found = re.search(
        r"longest prompt (\d+) tokens \+ output 128 = (\d+) > max_model_len 2048", message
    )
    assert found and 2096 <= int(found[1]) <= 2160 and int(found[2]) == int(found[1]) + 128
    assert "lower shared_prefix.tokens, input_len.high, output_len.value" in message
    # Refused before the load: no run folder was created.
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir())


def test_the_scenarios_page_example_fits_the_model_it_names(tmp_path: Path, base_url: str) -> None:
    spec = scenario(tmp_path, scenarios_page_example())
    assert spec.engine.engine_settings()["model"] == "tiny"
    found = check(spec, base_url)
    assert found.longest_tokens <= found.max_model_len == 2048


def test_a_model_with_a_small_context_names_the_keys_and_figures(tmp_path: Path) -> None:
    model_dir = make_hf_model_dir(tmp_path / "m", max_position_embeddings=64)
    config = EngineConfig.from_flat(dict(model=str(model_dir), dtype="float32", device="cpu"))
    config_spec, _ = load_model_spec(str(model_dir))
    tokenizer = load_tokenizer(str(model_dir), config_spec)
    spec = scenario(tmp_path, SMALL.format(low=50, high=60, out=20))
    with running_server(config) as url, pytest.raises(PreflightError) as info:
        check(spec, url, tokenizer=tokenizer)
    message = str(info.value)
    assert re.search(
        r"longest prompt (\d+) tokens \+ output (\d+) = (\d+) > max_model_len 64", message
    )
    assert message.endswith("lower input_len.high, output_len.high")
    assert message.startswith(str(tmp_path / "s.toml"))


@contextmanager
def plain_http_server(folder: Path) -> Iterator[str]:
    """Python's own static file server: no /v1 route at all."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    handler.log_message = lambda *a: None  # type: ignore[method-assign]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_plain_http_server_is_said_to_be_no_llm_server(tmp_path: Path) -> None:
    spec = scenario(tmp_path, SMALL.format(low=8, high=16, out=8))
    with plain_http_server(tmp_path) as url:
        with pytest.raises(PreflightError) as info:
            check(spec, url)
        opts = RunOptions(spec, url, "openai", None, "tiny", tmp_path / "runs", live=False)
        with pytest.raises(RunRefused):
            run_benchmark(opts, Console(file=io.StringIO()))
    assert str(info.value) == (
        f"{url} answered 404 on /v1/models: not an OpenAI-compatible server? check --url"
    )


def test_a_server_wanting_a_key_is_said_so(tmp_path: Path) -> None:
    async def handler(request, response) -> None:  # type: ignore[no-untyped-def]
        await response.send_json(401, {"error": {"message": "Unauthorized"}})

    spec = scenario(tmp_path, SMALL.format(low=8, high=16, out=8))
    with (
        serving(handler) as server,
        pytest.raises(PreflightError, match=r"HTTP 401: Unauthorized; no key was sent.*--api-key"),
    ):
        check(spec, server.base_url)


def test_a_refused_key_is_said_refused_not_missing(tmp_path: Path) -> None:
    async def handler(request, response) -> None:  # type: ignore[no-untyped-def]
        await response.send_json(403, {"error": {"message": "Forbidden"}})

    with serving(handler) as server, pytest.raises(PreflightError) as info:
        models_document(server.base_url, {"X-Api-Key": "k-123"})
    message = str(info.value)
    assert "HTTP 403: Forbidden; the server refused the key sent in X-Api-Key" in message
    assert "k-123" not in message and "--tokenizer" not in message


def test_vllm_cards_lora_adapters_take_their_base_models_context(tmp_path: Path) -> None:
    # vLLM 0.32's ModelCard: max_model_len on the base model, None on a LoRA adapter's card.
    models = [
        {"id": "base", "object": "model", "root": "/m", "max_model_len": 100, "parent": None},
        {"id": "lora", "object": "model", "root": "/l", "max_model_len": None, "parent": "base"},
    ]
    spec = scenario(tmp_path, SMALL.format(low=90, high=95, out=10))
    with (
        serving(openai_handler(models)) as server,
        pytest.raises(PreflightError, match=r"cannot fit 'lora'.* > max_model_len 100"),
    ):
        check(spec, server.base_url, model="lora", adapter=VLLM)


def test_llama_server_context_comes_from_props_per_slot(tmp_path: Path) -> None:
    # llama-server: /v1/models states the trained context, /props the context of one slot.
    models = [{"id": "m.gguf", "object": "model", "meta": {"n_ctx_train": 4096, "n_vocab": 512}}]
    props = {"default_generation_settings": {"n_ctx": 512, "params": {}}, "total_slots": 4}
    spec = scenario(tmp_path, SMALL.format(low=500, high=520, out=8))
    with serving(openai_handler(models, {"/props": props})) as server:
        with pytest.raises(PreflightError) as info:
            check(spec, server.base_url, adapter=LLAMACPP)
        assert "> max_model_len 512 (/props default_generation_settings.n_ctx)" in str(info.value)
    with serving(openai_handler(models)) as server:
        found = check(spec, server.base_url, adapter=LLAMACPP)
    assert (found.max_model_len, found.context_source) == (4096, "/v1/models meta.n_ctx_train")


def test_an_endpoint_stating_no_context_is_noted_and_the_run_goes_on(tmp_path: Path) -> None:
    spec = scenario(tmp_path, SMALL.format(low=8, high=16, out=8))
    with serving(openai_handler([{"id": "gpt", "object": "model"}])) as server:
        found = check(spec, server.base_url)
    assert found.model == "gpt" and found.max_model_len is None
    (note,) = found.notes
    assert "states no context length for 'gpt'" in note
