"""A tokenizer backed by the endpoint's own /tokenize and /detokenize (vLLM's API; SGLang's too).

Where no client-side tokenizer resolves (bench.run.endpoint.tokenizer_source), prompts of exact
token
lengths can still be built: every length is checked by the server's own tokenizer, so a prompt
is never mislabelled. The shapes:

- vLLM: POST /tokenize ``{"model", "prompt", "add_special_tokens"}`` ->
  ``{"tokens": [...], "count", "max_model_len"}``; POST /detokenize ``{"model", "tokens"}`` ->
  ``{"prompt": ...}``.
- SGLang: the same /tokenize; its /detokenize answers ``{"text": ...}``.

Each call is a round trip, so the object is built for few of them: it offers the load
generator's batched protocol (loadgen.protocols.BatchedTokenizerLike), whose pool needs one
/tokenize of a sample text and two calls per candidate id, sent ``concurrency`` at a time; its
candidates are word-initial tokens where there are enough, which rarely merge with their
neighbours; and when decoding is additive for this tokenizer (checked once on the pool),
``decode`` of pool ids is done locally from the cached text of each id. A prompt then costs
about one /tokenize: the shipped 100-users scenario (300 prompts) took 532 calls, 1.1 s, against
a local `bench serve`. It is used before the load only: during the load no call is made from the
event loop (the run counts output tokens from the server's usage instead).
"""

from __future__ import annotations

import string
import threading
from collections import OrderedDict
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import numpy as np

from loadgen.client.answers import auth_refusal
from loadgen.client.readers.openai_stream import error_message_from_body
from perfmodel.files import JSONObject

__all__ = ["ServerTokenizer", "ServerTokenizerError", "ServerTokenizerRefused"]

# Distinct ids tried for the prompt pool: ~2 round trips each, enough variety for random prompts.
_POOL_CANDIDATES = 192
# Characters of the sample text tokenized once for the candidates (pseudo-words, seeded).
_SAMPLE_CHARS = 4000
_ENCODE_CACHE_ENTRIES = 1024
# Word-initial candidates enough for varied prompts; with fewer, every candidate is kept.
_MIN_WORD_INITIAL = 32


class ServerTokenizerError(RuntimeError):
    """A /tokenize or /detokenize call that failed; the message names the route and status."""


class ServerTokenizerRefused(ServerTokenizerError):
    """The route answered 401/403: a key to fix (the message says whether one was sent)."""


class ServerTokenizer:
    """The loadgen tokenizer protocols over ``base_url``'s /tokenize and /detokenize for
    ``model``. ``headers`` (e.g. an Authorization header) go with every call and are never
    printed; ``timeout_s`` bounds each call (seconds)."""

    def __init__(
        self,
        base_url: str,
        model: str,
        headers: Mapping[str, str] | None = None,
        timeout_s: float = 10.0,
        concurrency: int = 16,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.name = model
        self._client = httpx.Client(
            base_url=self.base_url, headers=dict(headers or {}), timeout=timeout_s
        )
        self._header_names = list(headers or {})  # as given, for a 401's message
        self._concurrency = concurrency
        self._max_id = -1
        self._id_text: dict[int, str] = {}
        self._encoded: OrderedDict[str, list[int]] = OrderedDict()
        # Whether the text of a sequence of cached ids is the join of their texts; learnt on the
        # pool (candidate_ids), until then every multi-id decode asks the server.
        self._additive = False
        self.calls = 0  # round trips made, for the report and the tests
        self._lock = threading.Lock()  # encode_batch and decode_each call from threads

    @classmethod
    def probe(
        cls, base_url: str, model: str, headers: Mapping[str, str] | None = None
    ) -> ServerTokenizer | str:
        """A ServerTokenizer when ``base_url`` answers /tokenize and /detokenize in one of the
        shapes above, else the reason it does not (one line, for the caller's error); raises
        ServerTokenizerRefused when the server wants a key it was not given."""
        tok = cls(base_url, model, headers)
        try:
            ids = tok.encode("Hello, world", add_special_tokens=False)
            if not ids:
                raise ServerTokenizerError("POST /tokenize returned no tokens for a short text")
            tok.decode(ids)
        except ServerTokenizerRefused:
            tok.close()
            raise
        except (ServerTokenizerError, httpx.HTTPError) as e:
            tok.close()
            return str(e) or type(e).__name__
        return tok

    def close(self) -> None:
        self._client.close()

    def __getstate__(self) -> dict[str, Any]:
        raise TypeError("a ServerTokenizer holds a connection; it is not sent to other processes")

    # -- TokenizerLike -----------------------------------------------------------------------

    @property
    def vocab_size(self) -> int:
        """One past the largest id the server has returned: a lower bound (the API does not say
        the vocabulary's size)."""
        return self._max_id + 1

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        if not add_special_tokens:
            with self._lock:
                cached = self._encoded.get(text)
                if cached is not None:
                    self._encoded.move_to_end(text)
                    return list(cached)
        ids = self._tokenize(text, add_special_tokens)
        if not add_special_tokens:
            with self._lock:
                self._encoded[text] = ids
                if len(self._encoded) > _ENCODE_CACHE_ENTRIES:
                    self._encoded.popitem(last=False)
        return list(ids)

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        # skip_special_tokens is the server's choice (vLLM's /detokenize takes no such field);
        # the prompt pool holds no special tokens, and lengths are checked by encode alone.
        ids = [int(i) for i in ids]
        if len(ids) == 1 and ids[0] in self._id_text:
            return self._id_text[ids[0]]
        if self._additive and all(i in self._id_text for i in ids):
            return "".join(self._id_text[i] for i in ids)
        return self._detokenize(ids)

    # -- BatchedTokenizerLike ----------------------------------------------------------------

    def candidate_ids(self, rng: np.random.Generator) -> list[int]:
        """Distinct ids of a seeded sample of pseudo-words, as the server tokenizes it (one
        call); also learns whether decoding is additive on them (one more)."""
        letters = np.array(list(string.ascii_lowercase))
        words: list[str] = []
        size = 0
        while size < _SAMPLE_CHARS:
            word = "".join(rng.choice(letters, size=int(rng.integers(2, 9))).tolist())
            words.append(word)
            size += len(word) + 1
        sample = " ".join(words) + '. 0123456789, ?! (a) - "b"\n'
        ids = list(dict.fromkeys(self._tokenize(sample, False)))
        if len(ids) > _POOL_CANDIDATES:
            ids = rng.choice(np.asarray(ids), size=_POOL_CANDIDATES, replace=False).tolist()
        texts = self.decode_each(ids)
        probe = ids[: min(len(ids), 64)]
        self._additive = bool(probe) and self._detokenize(probe) == "".join(texts[: len(probe)])
        # Word-initial tokens (" word") seldom merge with their neighbours, so a prompt of them
        # re-encodes to its own length at the first try: about one /tokenize per prompt.
        spaced = [i for i, t in zip(ids, texts, strict=True) if len(t) > 1 and t[0] == " "]
        return [int(i) for i in (spaced if len(spaced) >= _MIN_WORD_INITIAL else ids)]

    def decode_each(self, ids: list[int]) -> list[str]:
        missing = list(dict.fromkeys(i for i in ids if i not in self._id_text))
        with ThreadPoolExecutor(max_workers=self._concurrency) as pool:
            texts = list(pool.map(lambda i: self._detokenize([i]), missing))
        self._id_text.update(zip(missing, texts, strict=True))
        return [self._id_text[i] for i in ids]

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        with ThreadPoolExecutor(max_workers=self._concurrency) as pool:
            return list(pool.map(self.encode, texts))

    # -- the two routes ----------------------------------------------------------------------

    def _post(self, route: str, body: JSONObject) -> JSONObject:
        try:
            response = self._client.post(route, json=body)
        except httpx.TransportError:
            # Once more on a fresh connection: a server may close an idle keep-alive one just
            # as it is reused. Both routes only read, so a repeat is harmless.
            try:
                response = self._client.post(route, json=body)
            except httpx.HTTPError as e:
                raise ServerTokenizerError(f"POST {route}: {type(e).__name__}: {e}") from e
        except httpx.HTTPError as e:
            raise ServerTokenizerError(f"POST {route}: {type(e).__name__}: {e}") from e
        with self._lock:
            self.calls += 1
        if response.status_code in (401, 403):
            message = error_message_from_body(response.content)
            refusal = auth_refusal(response.status_code, message, self._header_names)
            raise ServerTokenizerRefused(f"POST {route} answered {refusal}")
        if response.status_code != 200:
            raise ServerTokenizerError(f"POST {route} answered HTTP {response.status_code}")
        try:
            data = response.json()
        except ValueError as e:
            raise ServerTokenizerError(f"POST {route}: the answer is not JSON") from e
        if not isinstance(data, dict):
            raise ServerTokenizerError(f"POST {route}: the answer is not a JSON object")
        return data

    def _tokenize(self, text: str, add_special_tokens: bool) -> list[int]:
        body = {"model": self.model, "prompt": text, "add_special_tokens": add_special_tokens}
        tokens = self._post("/tokenize", body).get("tokens")
        if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
            raise ServerTokenizerError("POST /tokenize: no list of token ids under 'tokens'")
        if tokens:
            with self._lock:
                self._max_id = max(self._max_id, max(tokens))
        return tokens

    def _detokenize(self, ids: list[int]) -> str:
        data = self._post("/detokenize", {"model": self.model, "tokens": ids})
        text = data.get("prompt", data.get("text"))  # vLLM's key, then SGLang's
        if not isinstance(text, str):
            raise ServerTokenizerError("POST /detokenize: no text under 'prompt' (or 'text')")
        return text
