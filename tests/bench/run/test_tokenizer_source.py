"""--tokenizer as a folder, a preset or a Hub id: resolved from a Hub cache the test lays out,
offline, so nothing is ever downloaded."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.run.tokenizer_source import (
    HUB_TOKENIZER_FILES,
    TokenizerNotFoundError,
    resolve_tokenizer,
)
from engine.tokenizer.tokenizer import Tokenizer
from tests.support.hf_hub_cache import lay_out_hub_repo, tokenizer_repo_files

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


def test_only_tokenizer_files_are_asked_of_the_hub() -> None:
    assert "tokenizer.json" in HUB_TOKENIZER_FILES and "config.json" in HUB_TOKENIZER_FILES
    assert not [f for f in HUB_TOKENIZER_FILES if f.endswith((".safetensors", ".bin", ".gguf"))]
