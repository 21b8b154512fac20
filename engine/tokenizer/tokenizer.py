"""Tokenizer: Hugging Face `tokenizer.json` files via the `tokenizers` library, chat templates via
sandboxed Jinja, streaming detokenization, and a deterministic synthetic tokenizer for presets.

No transformers import: tokenizer_config.json is read directly (bos/eos tokens, chat_template)
and templates render in the same kind of environment HF uses (ImmutableSandboxedEnvironment,
trim_blocks, lstrip_blocks, `raise_exception`, `tojson`, `strftime_now`).
"""

from __future__ import annotations

import datetime
import itertools
import json
import logging
import random
from collections.abc import Iterator, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

import jinja2
import tokenizers
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import decoders, models, pre_tokenizers, processors, trainers

from perfmodel.cache import tokenizers_dir
from perfmodel.files import atomic_write

log = logging.getLogger(__name__)

BOS, EOS = "<s>", "</s>"  # ids 0 and 1 in synthetic tokenizers (trainer puts specials first)
# Bump when the corpus or the training recipe changes, so stale cached files are not reused.
SYNTHETIC_VERSION = 1
SYNTHETIC_CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% if message['role'] not in ['system', 'developer', 'user', 'assistant', 'tool'] %}"
    "{{ raise_exception('unknown role: ' + message['role']) }}"
    "{% endif %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}{{ eos_token }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


class TokenizerError(ValueError):
    """A tokenizer directory or template that cannot be used (names the file or token)."""


class Tokenizer:
    """A `tokenizers.Tokenizer` plus the special tokens and chat template of its model."""

    def __init__(
        self,
        backend: tokenizers.Tokenizer,
        name: str,
        bos_token: str | None,
        eos_tokens: Sequence[str],
        chat_template: str | None,
        extra_eos_token_ids: Sequence[int] = (),
    ) -> None:
        self.backend = backend
        self.name = name
        self.bos_token = bos_token
        self.eos_token = eos_tokens[0] if eos_tokens else None
        self.chat_template = chat_template
        self.bos_token_id = None if bos_token is None else self._token_id(bos_token)
        eos_ids = [self._token_id(t) for t in eos_tokens] + [int(i) for i in extra_eos_token_ids]
        self.eos_token_ids: tuple[int, ...] = tuple(dict.fromkeys(eos_ids))  # ordered, unique

    def _token_id(self, token: str) -> int:
        token_id = self.backend.token_to_id(token)
        if token_id is None:
            raise TokenizerError(f"{self.name}: special token {token!r} is not in the vocabulary")
        return token_id

    @property
    def vocab_size(self) -> int:
        """Number of token ids, added tokens included."""
        return self.backend.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """Token ids of `text`; add_special_tokens applies the tokenizer's post-processor (BOS)."""
        return self.backend.encode(text, add_special_tokens=add_special_tokens).ids

    def encode_releasing_gil(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """As encode, for a worker thread: the Rust side runs without holding the GIL (the
        batch entry point releases it, the single one does not), so the event loop keeps
        running while a long prompt is tokenized."""
        [encoding] = self.backend.encode_batch([text], add_special_tokens=add_special_tokens)
        return encoding.ids

    def max_token_bytes(self) -> int:
        """The most UTF-8 bytes any one token id decodes to, special tokens included: a text
        of more than ``n * max_token_bytes()`` bytes encodes to more than ``n`` tokens (where
        no normalizer shortens it). U+FFFD, which a partial byte sequence decodes to, counts
        its 3 bytes, which only loosens the bound."""
        ids = [[i] for i in range(self.vocab_size)]
        pieces = self.backend.decode_batch(ids, skip_special_tokens=False)
        return max((len(p.encode("utf-8", "surrogatepass")) for p in pieces), default=1)

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return self.backend.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def apply_chat_template(
        self, messages: list[dict[str, Any]], add_generation_prompt: bool = True, **kwargs: Any
    ) -> str:
        """Render `messages` ([{"role": ..., "content": ...}]) to the prompt text.

        The text already holds any BOS the template adds: encode it with add_special_tokens=False.
        Extra keyword arguments (tools, date_string, ...) are passed to the template.
        """
        if self.chat_template is None:
            raise TokenizerError(
                f"{self.name}: no chat_template; add one to tokenizer_config.json or use the "
                "completions API"
            )
        try:
            return self._compiled_template.render(
                messages=messages,
                add_generation_prompt=add_generation_prompt,
                bos_token=self.bos_token or "",
                eos_token=self.eos_token or "",
                **kwargs,
            )
        except jinja2.TemplateError as exc:
            raise TokenizerError(f"{self.name}: chat template failed: {exc}") from exc

    @cached_property
    def _compiled_template(self) -> jinja2.Template:
        env = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
        )
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise_exception
        env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
        try:
            return env.from_string(self.chat_template or "")
        except jinja2.TemplateSyntaxError as exc:
            raise TokenizerError(f"{self.name}: chat template does not parse: {exc}") from exc

    @classmethod
    def from_dir(cls, path: str | Path) -> Tokenizer:
        """Load tokenizer.json, tokenizer_config.json (bos/eos, chat_template; optional) and, when
        present, chat_template.jinja and generation_config.json (extra eos ids) from `path`."""
        directory = Path(path)
        file = directory / "tokenizer.json"
        if not file.is_file():
            raise TokenizerError(f"{directory}: no tokenizer.json (a fast tokenizer is required)")
        backend = tokenizers.Tokenizer.from_file(str(file))
        config = _read_json(directory / "tokenizer_config.json")
        template = config.get("chat_template")
        if isinstance(template, list):  # HF's named-template form
            template = next((t["template"] for t in template if t.get("name") == "default"), None)
        if template is None and (directory / "chat_template.jinja").is_file():
            template = (directory / "chat_template.jinja").read_text(encoding="utf-8")
        eos = _token_content(config.get("eos_token"))
        generation_eos = _read_json(directory / "generation_config.json").get("eos_token_id")
        if isinstance(generation_eos, int):
            generation_eos = [generation_eos]
        return cls(
            backend,
            name=directory.name,
            bos_token=_token_content(config.get("bos_token")),
            eos_tokens=[eos] if eos else [],
            chat_template=template,
            extra_eos_token_ids=generation_eos or (),
        )

    @classmethod
    def for_preset(cls, vocab_size: int, use_cache: bool = True) -> Tokenizer:
        """A byte-level BPE of exactly `vocab_size` ids (<s>=0, </s>=1) trained on a seeded
        synthetic corpus: the same vocab_size always gives the same tokenizer.json. Cached under
        cache_root()/tokenizers unless use_cache is False."""
        cached = tokenizers_dir() / f"synthetic-bpe-v{SYNTHETIC_VERSION}-{vocab_size}.json"
        backend = None
        if use_cache and cached.is_file():
            try:
                backend = tokenizers.Tokenizer.from_file(str(cached))
            except Exception:  # a torn or foreign file: retrain and overwrite it
                log.warning("ignoring unreadable cached tokenizer %s", cached)
        if backend is None or backend.get_vocab_size() != vocab_size:
            backend = train_synthetic_bpe(vocab_size)
            if use_cache:
                _save_atomically(backend, cached)
        return cls(backend, f"synthetic-bpe-{vocab_size}", BOS, [EOS], SYNTHETIC_CHAT_TEMPLATE)

    def save(self, directory: str | Path) -> None:
        """Write tokenizer.json and an HF-style tokenizer_config.json into `directory`."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.backend.save(str(directory / "tokenizer.json"))
        config = {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "bos_token": self.bos_token,
            "eos_token": self.eos_token,
            "chat_template": self.chat_template,
            "clean_up_tokenization_spaces": False,
        }
        (directory / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")


_MAX_UTF8_BYTES = 4


class IncrementalDetokenizer:
    """Turns one request's token stream into text deltas, never splitting a UTF-8 character.

    Decodes a short window [prefix_offset, end) and emits what extends the window's already
    emitted part [prefix_offset, read_offset) (the prefix/read-offset scheme of HF TGI and vLLM):
    decoding a window rather than single tokens keeps the spaces and merges that depend on the
    previous token, and a window ending in U+FFFD (an incomplete character) is held back.
    Concatenated feeds plus flush() equal tokenizer.decode(all output ids).
    """

    def __init__(
        self, tokenizer: Tokenizer, prompt_ids: Sequence[int] = (), skip_special_tokens: bool = True
    ) -> None:
        self._tokenizer = tokenizer
        self._skip = skip_special_tokens
        self._ids = list(prompt_ids[-5:])  # a little prompt context for the first output token
        self._prefix_offset = 0
        self._read_offset = len(self._ids)
        self._text_parts: list[str] = []

    @property
    def text(self) -> str:
        """All text emitted so far."""
        return "".join(self._text_parts)

    def feed(self, new_token_ids: Sequence[int]) -> str:
        """Add output tokens; return the newly completed text ("" while a character is partial)."""
        self._ids.extend(new_token_ids)
        return self._advance(final=False)

    def flush(self) -> str:
        """At the end of a request: emit whatever is held back, even an incomplete character."""
        return self._advance(final=True)

    def _advance(self, final: bool) -> str:
        decode = self._tokenizer.decode
        prefix_text = decode(self._ids[self._prefix_offset : self._read_offset], self._skip)
        window_text = decode(self._ids[self._prefix_offset :], self._skip)
        held = len(self._ids) - self._read_offset
        # A UTF-8 character has at most 4 bytes, so 4 held tokens still ending in U+FFFD are
        # invalid bytes, not a character in progress: emit them (random-weight models make such
        # junk) rather than hold the stream until the request ends.
        partial = window_text.endswith("\ufffd") and held < _MAX_UTF8_BYTES and not final
        if len(window_text) <= len(prefix_text) or partial:
            return ""
        new_text = window_text[len(prefix_text) :]
        # Keep only the ids still needed as context, so per-token cost does not grow with length.
        self._ids = self._ids[self._read_offset :]
        self._prefix_offset, self._read_offset = 0, len(self._ids)
        self._text_parts.append(new_text)
        return new_text


def train_synthetic_bpe(vocab_size: int, seed: int = 0) -> tokenizers.Tokenizer:
    """Train a byte-level BPE with exactly `vocab_size` ids on `synthetic_corpus(vocab_size)`."""
    minimum = 2 + len(pre_tokenizers.ByteLevel.alphabet()) + 1
    if vocab_size < minimum:
        raise TokenizerError(f"vocab_size {vocab_size} is too small; need at least {minimum}")
    backend = tokenizers.Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[BOS, EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(synthetic_corpus(vocab_size, seed), trainer=trainer)
    backend.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, 0)]
    )
    if backend.get_vocab_size() != vocab_size:
        raise TokenizerError(
            f"synthetic corpus yields only {backend.get_vocab_size()} tokens, not {vocab_size}; "
            "enlarge synthetic_corpus for this vocab_size"
        )
    return backend


def synthetic_corpus(vocab_size: int, seed: int = 0) -> Iterator[str]:
    """Seeded pseudo-language lines: a Zipf-weighted lexicon of syllable words (some accented,
    Greek, Cyrillic or CJK, so multi-byte characters get merges), digits and punctuation."""
    rng = random.Random(seed)
    onsets = ["", "b", "k", "d", "f", "g", "h", "l", "m", "n", "p", "r", "s", "t", "v", "st", "tr"]
    vowels = ["a", "e", "i", "o", "u", "ai", "ou", "é", "ü", "ñ", "α", "ω", "д", "я", "中", "文"]
    codas = ["", "", "n", "s", "r", "l", "t", "ng"]
    lexicon_size = 4 * vocab_size  # enough distinct words that BPE never runs out of merges
    lexicon = [
        "".join(
            rng.choice(onsets) + rng.choice(vowels) + rng.choice(codas)
            for _ in range(rng.randint(1, 4))
        )
        for _ in range(lexicon_size)
    ]
    # Cumulative weights computed once: rng.choices(weights=...) would redo it on every call.
    cumulative = list(itertools.accumulate(1.0 / (rank + 1) for rank in range(lexicon_size)))
    for _ in range(2 * vocab_size):
        words = rng.choices(lexicon, cum_weights=cumulative, k=rng.randint(4, 16))
        if rng.random() < 0.3:
            words.insert(rng.randrange(len(words)), str(rng.randint(0, 10 ** rng.randint(1, 4))))
        line = " ".join(words)
        yield line[0].upper() + line[1:] + rng.choice([".", ",", "!", "?", ";", ":"])


def _save_atomically(backend: tokenizers.Tokenizer, path: Path) -> None:
    """Write via a temporary file and rename, so concurrent processes never read a torn file."""
    try:
        atomic_write(path, lambda tmp: backend.save(str(tmp)))
    except OSError as exc:  # a read-only home must not stop the engine
        log.warning("could not cache tokenizer at %s: %s", path, exc)


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise TokenizerError(f"{path}: not valid JSON ({exc})") from exc


def _token_content(token: str | dict[str, Any] | None) -> str | None:
    """tokenizer_config.json stores special tokens as a string or an AddedToken-style dict."""
    return token.get("content") if isinstance(token, dict) else token


def _tojson(value: Any, indent: int | None = None) -> str:
    return json.dumps(value, ensure_ascii=False, indent=indent)


def _raise_exception(message: str) -> None:
    raise jinja2.TemplateError(message)
