"""--tokenizer as a folder, a preset or a Hub id: resolved from a Hub cache the test lays out,
offline, so nothing is ever downloaded."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from bench.run.endpoint.tokenizer_source import (
    HUB_TOKENIZER_FILES,
    TokenizerNotFoundError,
    resolve_tokenizer,
    tokenizer_for_endpoint,
)
from engine.tokenizer.tokenizer import Tokenizer
from perfmodel.presets import PRESETS
from tests.support.hf_hub_cache import lay_out_hub_repo, tokenizer_repo_files
from tests.support.threaded_http import Reply, SeenRequest, threaded_server

COMMIT = "0123456789abcdef0123456789abcdef01234567"
COMMIT_V2 = "fedcba9876543210fedcba9876543210fedcba98"
TEXT = "Streaming tokens, 42 of them: a probe of the tokenizer."


@pytest.fixture
def hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An offline Hub cache (HF_HUB_CACHE) holding acme/tiny-chat at main and at tag v2."""
    cache = tmp_path / "hub"
    monkeypatch.delenv("HF_HOME", raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    files = tokenizer_repo_files(tmp_path / "repo")
    lay_out_hub_repo(cache, "acme/tiny-chat", files, COMMIT)
    lay_out_hub_repo(cache, "acme/tiny-chat", files, COMMIT_V2, revision="v2")
    return cache


def test_a_hub_id_resolves_from_the_cache_offline(hub_cache: Path, tmp_path: Path) -> None:
    resolved = resolve_tokenizer("acme/tiny-chat")
    assert (resolved.source, resolved.name, resolved.revision) == ("hub", "acme/tiny-chat", COMMIT)
    expected = Tokenizer.from_dir(tmp_path / "repo")
    assert resolved.tokenizer.encode(TEXT) == expected.encode(TEXT)
    assert resolved.to_json() == {
        "source": "hub",
        "name": "acme/tiny-chat",
        "revision": COMMIT,
        "prompt_lengths": "client tokenizer",
    }
    # The model's shape for run.json's analytic section comes from the snapshot's config.json.
    assert resolved.shape_spec == str(hub_cache / "models--acme--tiny-chat" / "snapshots" / COMMIT)


def test_a_revision_names_a_tag_or_a_commit(hub_cache: Path) -> None:
    assert resolve_tokenizer("acme/tiny-chat@v2").revision == COMMIT_V2
    assert resolve_tokenizer(f"acme/tiny-chat@{COMMIT}").revision == COMMIT


def test_hf_home_places_the_cache_under_hub(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    lay_out_hub_repo(
        tmp_path / "home" / "hub", "acme/x", tokenizer_repo_files(tmp_path / "r"), COMMIT
    )
    assert resolve_tokenizer("acme/x").revision == COMMIT


def test_an_uncached_id_offline_is_one_line_naming_each_attempt_and_the_fix(
    hub_cache: Path,
) -> None:
    with pytest.raises(TokenizerNotFoundError) as info:
        resolve_tokenizer("acme/absent")
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("--tokenizer 'acme/absent': folder acme/absent: no such directory")
    assert f"hub acme/absent: not in the Hugging Face cache ({hub_cache})" in message
    assert "HF_HUB_OFFLINE is set" in message and "unset HF_HUB_OFFLINE" in message
    assert message.endswith(
        "pass --tokenizer with a local folder, a preset or a Hugging Face Hub id (org/name)"
    )


def test_a_cached_repo_without_tokenizer_json_is_refused(hub_cache: Path, tmp_path: Path) -> None:
    only_config = tmp_path / "config-only"
    only_config.mkdir()
    (only_config / "config.json").write_text((tmp_path / "repo" / "config.json").read_text())
    lay_out_hub_repo(hub_cache, "acme/no-fast", only_config, COMMIT)
    with pytest.raises(TokenizerNotFoundError, match="hub acme/no-fast: the repository has no "
                       r"tokenizer\.json \(a fast tokenizer is required\)"):  # fmt: skip
        resolve_tokenizer("acme/no-fast")


def test_a_folder_wins_over_a_hub_id_of_the_same_spelling(
    hub_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    tokenizer_repo_files(tmp_path / "acme" / "tiny-chat", vocab_size=300)
    resolved = resolve_tokenizer("acme/tiny-chat")
    assert resolved.source == "folder" and resolved.tokenizer.vocab_size == 300


def test_folder_and_preset_forms(tmp_path: Path) -> None:
    folder = resolve_tokenizer(str(tokenizer_repo_files(tmp_path / "m")))
    assert folder.source == "folder" and folder.to_json()["prompt_lengths"] == "client tokenizer"
    # A model folder without tokenizer.json gets the synthetic tokenizer of its vocabulary, as
    # the reference engine serving that folder would.
    config_only = tmp_path / "c"
    config_only.mkdir()
    (config_only / "config.json").write_text((tmp_path / "m" / "config.json").read_text())
    assert resolve_tokenizer(str(config_only)).tokenizer.vocab_size == 512
    preset = resolve_tokenizer("tiny")
    assert (preset.source, preset.name, preset.shape_spec) == ("preset", "tiny", "tiny")


def test_a_spec_that_is_nothing_says_what_was_tried(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(TokenizerNotFoundError) as info:
        resolve_tokenizer(str(tmp_path / "empty"))
    assert "no tokenizer.json (nor a config.json for a synthetic vocabulary)" in str(info.value)
    with pytest.raises(TokenizerNotFoundError) as info:
        resolve_tokenizer("no such thing")
    assert "folder no such thing: no such directory; preset: not one of " in str(info.value)
    assert "hub: not an id of the form org/name[@revision]" in str(info.value)


# Resolves one spec in a fresh interpreter: huggingface_hub reads HF_ENDPOINT when imported.
RESOLVE = """
import json, sys
from bench.run.endpoint.tokenizer_source import TokenizerNotFoundError, resolve_tokenizer
try:
    print(json.dumps(resolve_tokenizer(sys.argv[1]).to_json()))
except TokenizerNotFoundError as e:
    print("ERROR", e)
"""
CANARY = "hf_canary_d41d8cd98f00b204e9800998ecf8427e"


def _fake_hub(files: dict[str, bytes]) -> Callable[[SeenRequest], Reply]:
    """The Hub's API, as huggingface_hub calls it, for acme/big at COMMIT; every other
    repository answers 401 RepoNotFound, as the Hub does for a private one without a token."""

    def route(request: SeenRequest) -> Reply:
        path = request.path.split("?")[0]
        as_json = {"Content-Type": "application/json"}
        if path.startswith("/api/models/acme/big/revision/"):
            siblings = [{"rfilename": name} for name in files]
            return (
                200,
                as_json,
                json.dumps({"id": "acme/big", "sha": COMMIT, "siblings": siblings}).encode(),
            )
        if path == f"/api/models/acme/big/tree/{COMMIT}":
            tree = [
                {"type": "file", "path": n, "size": len(b), "oid": hashlib.sha1(b).hexdigest()}
                for n, b in files.items()
            ]
            return 200, as_json, json.dumps(tree).encode()
        if path.startswith(f"/acme/big/resolve/{COMMIT}/"):
            body = files[path.rsplit("/", 1)[1]]
            etag = f'"{hashlib.sha1(body).hexdigest()}"'
            return 200, {"X-Repo-Commit": COMMIT, "ETag": etag}, body
        return (
            401,
            {**as_json, "X-Error-Code": "RepoNotFound"},
            b'{"error": "Repository not found"}',
        )

    return route


def test_from_a_hub_only_tokenizer_files_are_fetched_with_the_token_never_shown(
    tmp_path: Path,
) -> None:
    source = tokenizer_repo_files(tmp_path / "repo")
    files = {f.name: f.read_bytes() for f in source.iterdir()}
    files |= {"model.safetensors": b"\0" * 4096, "pytorch_model.bin": b"\0" * 4096}
    cache = tmp_path / "cache"
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env |= {"HF_HUB_CACHE": str(cache), "HF_TOKEN": CANARY, "HF_HUB_DISABLE_TELEMETRY": "1"}

    def resolve(spec: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", RESOLVE, spec], env={**env, **extra},
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip

    with threaded_server(_fake_hub(files)) as (url, seen):
        env["HF_ENDPOINT"] = url
        fetched = resolve("acme/big")
        refused = resolve("acme/private")
        asked = [r.path.split("?")[0] for r in seen]
        n_online = len(seen)
        offline = resolve("acme/big", HF_HUB_OFFLINE="1")
        assert len(seen) == n_online  # offline: the cache alone, not one request
    assert json.loads(fetched.stdout) == {
        "source": "hub",
        "name": "acme/big",
        "revision": COMMIT,
        "prompt_lengths": "client tokenizer",
    }
    assert json.loads(offline.stdout) == json.loads(fetched.stdout)
    downloads = sorted(p.rsplit("/", 1)[1] for p in asked if "/resolve/" in p)
    assert downloads and set(downloads) <= set(HUB_TOKENIZER_FILES)
    assert not [p for p in asked if p.endswith((".safetensors", ".bin"))]
    snapshot = cache / "models--acme--big" / "snapshots" / COMMIT
    assert sorted(p.name for p in snapshot.iterdir()) == [
        name for name in sorted(files) if name in HUB_TOKENIZER_FILES
    ]
    # The token went to the Hub, and nowhere else: not printed, not in the cache.
    assert all(
        r.headers.get("authorization") == f"Bearer {CANARY}" for r in seen if "/acme/" in r.path
    )
    (message,) = refused.stdout.splitlines()
    assert message == (
        "ERROR --tokenizer 'acme/private': folder acme/private: no such directory; preset: not one "
        f"of {', '.join(sorted(PRESETS))}; hub acme/private: not found on the Hub "
        "(HTTP 401); check the id, or set HF_TOKEN for a private one; pass --tokenizer with a "
        "local folder, a preset or a Hugging Face Hub id (org/name)"
    )
    for proc in (fetched, refused, offline):
        assert CANARY not in proc.stdout + proc.stderr
    assert not [p for p in cache.rglob("*") if p.is_file() and CANARY.encode() in p.read_bytes()]


def _wants_a_key(on: str) -> Callable[[SeenRequest], Reply]:
    """A server whose ``on`` route ("/v1/models" or "/tokenize") answers 401, the rest as a
    server with a model of no resolvable tokenizer."""

    def route(request: SeenRequest) -> Reply:
        if request.path.startswith(on):
            return 401, {"Content-Type": "application/json"}, b'{"error": "Unauthorized"}'
        body = {"object": "list", "data": [{"id": "nowhere/none", "object": "model"}]}
        return 200, {"Content-Type": "application/json"}, json.dumps(body).encode()

    return route


@pytest.mark.parametrize("on", ["/v1/models", "/tokenize"])
@pytest.mark.parametrize("key", [None, "sk-refused-1"])
def test_a_401_names_the_key_and_not_the_tokenizer(
    on: str, key: str | None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    with (
        threaded_server(_wants_a_key(on)) as (url, _),
        pytest.raises(TokenizerNotFoundError) as info,
    ):
        tokenizer_for_endpoint(url, None, headers)
    message = str(info.value)
    assert "HTTP 401: Unauthorized" in message and "--tokenizer" not in message
    said = "the server refused the key sent in Authorization" if key else "no key was sent"
    assert said in message and (key is None or key not in message)


def test_a_folder_of_a_model_the_engine_does_not_run_lends_its_tokenizer(tmp_path: Path) -> None:
    """A vision-language model's folder: its tokenizer.json counts the text, its config names
    no shape; without a tokenizer.json the folder is refused, saying why."""
    folder = tmp_path / "vlm"
    Tokenizer.for_preset(512, use_cache=False).save(folder)
    (folder / "config.json").write_text(json.dumps({"model_type": "idefics3"}))
    resolved = resolve_tokenizer(str(folder))
    assert resolved.source == "folder" and resolved.model_dir is None
    assert resolved.tokenizer.encode(TEXT, add_special_tokens=False)
    (folder / "tokenizer.json").unlink()
    with pytest.raises(TokenizerNotFoundError, match=r"model_type 'idefics3' is not supported"):
        resolve_tokenizer(str(folder))
