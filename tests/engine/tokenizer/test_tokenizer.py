"""Tokenizer: the synthetic preset tokenizer, HF directories, chat templates, streaming decode."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from transformers import AutoTokenizer

import engine.tokenizer.tokenizer as tokenizer_module
from engine.tokenizer.tokenizer import IncrementalDetokenizer, Tokenizer, TokenizerError
from tests.support.hf_fixtures import make_hf_model_dir

TEXTS = [
    "Hello, world! The quick brown fox jumps over 13 lazy dogs.",
    "  leading spaces,\ttabs\nand new lines\n\n",
    "naïve café, Grüße, ñandú, Ελληνικά, русский, 中文字符, 日本語のテキスト",
    "emoji 🎉🚀 and a family 👨‍👩‍👧 and flags 🇫🇷 mid-word: a🙂b",
]


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return Tokenizer.for_preset(4096, use_cache=False)


def test_preset_tokenizer_is_exact_and_deterministic(tok: Tokenizer) -> None:
    assert tok.vocab_size == 4096
    assert (tok.bos_token_id, tok.eos_token_ids) == (0, (1,))
    assert tok.name == "synthetic-bpe-4096"
    again = Tokenizer.for_preset(4096, use_cache=False)
    assert again.backend.to_str() == tok.backend.to_str()  # same tokenizer.json


def test_preset_tokenizer_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLM_PERF_LAB_CACHE", str(tmp_path))
    first = Tokenizer.for_preset(300)
    (cached,) = (tmp_path / "tokenizers").glob("*300.json")

    def no_training(vocab_size: int, seed: int = 0) -> None:
        raise AssertionError("retrained although a cached tokenizer exists")

    monkeypatch.setattr(tokenizer_module, "train_synthetic_bpe", no_training)
    assert Tokenizer.for_preset(300).backend.to_str() == first.backend.to_str()
    monkeypatch.undo()
    monkeypatch.setenv("LLM_PERF_LAB_CACHE", str(tmp_path))
    cached.write_text("{torn")  # an unreadable cache file is replaced, not fatal
    assert Tokenizer.for_preset(300).vocab_size == 300
    assert json.loads(cached.read_text())["model"]["type"] == "BPE"


def test_too_small_vocab_is_refused() -> None:
    with pytest.raises(TokenizerError, match="too small"):
        Tokenizer.for_preset(100, use_cache=False)


@pytest.mark.parametrize("text", TEXTS)
def test_encode_decode_round_trip(tok: Tokenizer, text: str) -> None:
    ids = tok.encode(text)
    assert all(0 <= i < tok.vocab_size for i in ids)
    assert tok.decode(ids) == text
    with_bos = tok.encode(text, add_special_tokens=True)
    assert with_bos == [tok.bos_token_id, *ids]
    assert tok.decode(with_bos) == text
    assert tok.decode(with_bos, skip_special_tokens=False) == "<s>" + text


@pytest.mark.parametrize("text", TEXTS)
def test_incremental_detokenizer_matches_decode(tok: Tokenizer, text: str) -> None:
    ids = tok.encode(text)
    stream = IncrementalDetokenizer(tok, prompt_ids=tok.encode("A prompt before it: "))
    deltas = [stream.feed([token]) for token in ids]
    deltas.append(stream.flush())
    assert "".join(deltas) == stream.text == tok.decode(ids)
    assert not any("\ufffd" in d for d in deltas)  # never a partial character
    if any(len(ch.encode()) > 1 for ch in text):
        assert "" in deltas[:-1]  # some character really did span several tokens


def test_incremental_detokenizer_skips_specials_and_flushes_partials(tok: Tokenizer) -> None:
    ids = [*tok.encode("ok 🎉"), tok.eos_token_ids[0], *tok.encode(" done")]
    stream = IncrementalDetokenizer(tok)
    text = "".join(stream.feed(ids[i : i + 2]) for i in range(0, len(ids), 2)) + stream.flush()
    assert text == tok.decode(ids) == "ok 🎉 done"
    partial = IncrementalDetokenizer(tok)
    emoji = tok.encode("🎉")
    assert len(emoji) > 1 and partial.feed(emoji[:-1]) == ""
    assert partial.flush() == tok.decode(emoji[:-1])  # the held-back bytes, as decode shows them


def test_chat_template(tok: Tokenizer) -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi 👋"},
    ]
    prompt = tok.apply_chat_template(messages)
    assert prompt == "<s><|system|>\nBe brief.</s>\n<|user|>\nHi 👋</s>\n<|assistant|>\n"
    assert not tok.apply_chat_template(messages, add_generation_prompt=False).endswith(
        "<|assistant|>\n"
    )
    assert tok.encode(prompt)[0] == tok.bos_token_id  # specials in the text are matched
    # Every role of OpenAI's chat API renders (a replayed conversation's tool turns too).
    tool = tok.apply_chat_template([{"role": "tool", "content": "x"}], add_generation_prompt=False)
    assert tool == "<s><|tool|>\nx</s>\n"
    with pytest.raises(TokenizerError, match="unknown role: robot"):
        tok.apply_chat_template([{"role": "robot", "content": "x"}])


def test_hf_directory_matches_transformers(tmp_path: Path) -> None:
    path = make_hf_model_dir(tmp_path)
    ours = Tokenizer.from_dir(path)
    assert (ours.bos_token_id, ours.eos_token_ids, ours.vocab_size) == (0, (1,), 512)
    hf = AutoTokenizer.from_pretrained(path)
    messages = [{"role": "user", "content": "naïve 中文?"}]
    rendered = hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert ours.apply_chat_template(messages) == rendered
    for text in TEXTS:
        assert ours.encode(text) == hf.encode(text, add_special_tokens=False)
        assert ours.encode(text, add_special_tokens=True) == hf.encode(text)


def test_from_dir_variants_and_errors(tmp_path: Path) -> None:
    path = make_hf_model_dir(tmp_path / "model")
    config_file = path / "tokenizer_config.json"
    config = json.loads(config_file.read_text())
    config["eos_token"] = {"content": "</s>", "special": True}  # AddedToken-style entry
    template = config.pop("chat_template")
    config_file.write_text(json.dumps(config))
    (path / "chat_template.jinja").write_text(template)
    (path / "generation_config.json").write_text(json.dumps({"eos_token_id": [1, 7]}))
    tok = Tokenizer.from_dir(path)
    assert tok.eos_token_ids == (1, 7)
    assert tok.apply_chat_template([{"role": "user", "content": "x"}]).startswith("<s><|user|>")

    (path / "chat_template.jinja").unlink()
    with pytest.raises(TokenizerError, match="no chat_template"):
        Tokenizer.from_dir(path).apply_chat_template([{"role": "user", "content": "x"}])
    config["bos_token"] = "<|begin_of_text|>"
    config_file.write_text(json.dumps(config))
    unknown = re.escape("'<|begin_of_text|>' is not in the vocabulary")
    with pytest.raises(TokenizerError, match=unknown):
        Tokenizer.from_dir(path)
    (path / "tokenizer.json").unlink()
    with pytest.raises(TokenizerError, match=r"no tokenizer\.json"):
        Tokenizer.from_dir(path)


def test_invalid_bytes_are_not_held_until_the_end() -> None:
    # Random-weight models emit lone byte tokens that never form a character. After four such
    # tokens (the longest UTF-8 character) the detokenizer must stream them, not wait for flush.
    tok = Tokenizer.for_preset(4096)
    lone = next(i for i in range(tok.vocab_size) if tok.decode([i]) == "\ufffd")
    detok = IncrementalDetokenizer(tok)
    emitted = [detok.feed([lone]) for _ in range(6)]
    assert emitted[:3] == ["", "", ""]
    assert "".join(emitted) != ""
    assert detok.text + detok.flush() == tok.decode([lone] * 6)
