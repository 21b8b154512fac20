"""Synthetic workloads: token-length distributions and prompts of an exact token count.

Prompts are built from token ids, not from words, so that a request asks for exactly the prompt
length the scenario says: sample ids, decode, re-encode, and fix the ids up until the text
re-encodes to exactly ``prompt_tokens`` ids. Ids are drawn from a pool of "clean" tokens (ones
that decode to printable text and re-encode to themselves), which makes the fix-up converge in a
few rounds. Random ids also make prompts distinct, so no prefix cache can flatter a run.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal, get_args

import numpy as np

from loadgen.protocols import TokenizerLike
from results.records import API_KINDS, Api, RequestSpec

__all__ = [
    "LengthDist",
    "SharedPrefix",
    "WorkloadError",
    "exact_length_prompt",
    "synthetic_requests",
]

DistKind = Literal["fixed", "uniform", "normal", "pareto"]
_KINDS: tuple[str, ...] = get_args(DistKind)
_REQUIRED: dict[str, tuple[str, ...]] = {
    "fixed": ("value",),
    "uniform": ("low", "high"),
    "normal": ("mean", "std"),
    "pareto": ("shape", "scale"),
}
_INT_PARAMS = ("value", "low", "high", "min", "max")
_MAX_FIXUP_ROUNDS = 64
_POOL_CANDIDATES = 8192  # ids tried for the clean pool; enough variety, bounded cost on big vocabs


class WorkloadError(ValueError):
    """A workload parameter is invalid, or a prompt of the asked length could not be built."""


@dataclass(frozen=True)
class LengthDist:
    """A distribution of token lengths, sampled as ints clipped to ``[min, max]``.

    Kinds and their parameters (all lengths in tokens):
        * ``fixed``: ``value``.
        * ``uniform``: integers in ``[low, high]``, both inclusive.
        * ``normal``: ``mean``, ``std``; rounded to the nearest int.
        * ``pareto``: classical Pareto with ``shape`` (alpha > 0) and ``scale`` (the minimum,
          x_m > 0); heavy-tailed, so set ``max``.
    ``min`` (default 1) and ``max`` (default none) bound every kind.
    """

    kind: DistKind
    value: int | None = None
    low: int | None = None
    high: int | None = None
    mean: float | None = None
    std: float | None = None
    shape: float | None = None
    scale: float | None = None
    min: int = 1
    max: int | None = None

    def __post_init__(self) -> None:
        where = f"LengthDist(kind={self.kind!r})"
        if self.kind not in _KINDS:
            raise WorkloadError(
                f"LengthDist.kind: expected one of {list(_KINDS)}, got {self.kind!r}"
            )
        for name in _REQUIRED[self.kind]:
            if getattr(self, name) is None:
                raise WorkloadError(f"{where}.{name}: required for this kind; set {name}")
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "kind" or value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise WorkloadError(f"{where}.{f.name}: expected a number, got {value!r}")
            if f.name in _INT_PARAMS and not isinstance(value, numbers.Integral):
                raise WorkloadError(f"{where}.{f.name}: expected an int (tokens), got {value!r}")
        for name in ("value", "low", "high"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise WorkloadError(f"{where}.{name}: expected an int >= 1 (tokens), got {value}")
        if self.min < 1:
            raise WorkloadError(f"{where}.min: expected an int >= 1, got {self.min}")
        if self.max is not None and self.max < self.min:
            raise WorkloadError(f"{where}.max: expected >= min ({self.min}), got {self.max}")
        if self.kind == "uniform" and self.low > self.high:  # type: ignore[operator]
            raise WorkloadError(f"{where}: low ({self.low}) > high ({self.high}); swap them")
        if self.kind == "normal" and self.std < 0:  # type: ignore[operator]
            raise WorkloadError(f"{where}.std: expected >= 0, got {self.std}")
        if self.kind == "pareto" and (self.shape <= 0 or self.scale <= 0):  # type: ignore[operator]
            raise WorkloadError(
                f"{where}: shape and scale must be > 0, got shape={self.shape}, scale={self.scale}"
            )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "LengthDist") -> LengthDist:
        """Build from a mapping (a TOML table); unknown keys are an error naming ``where``."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise WorkloadError(
                f"{where}: unknown key(s) {unknown}; expected some of {sorted(known)}"
            )
        if "kind" not in data:
            raise WorkloadError(f"{where}.kind: required; one of {list(_KINDS)}")
        return cls(**dict(data))

    def to_dict(self) -> dict[str, Any]:
        """The parameters that are set (for run.json)."""
        return {
            f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None
        }

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` lengths as an int64 array, each within ``[min, max]``."""
        if n < 0:
            raise WorkloadError(f"LengthDist.sample n: expected >= 0, got {n}")
        if self.kind == "fixed":
            raw = np.full(n, self.value, dtype=np.float64)
        elif self.kind == "uniform":
            raw = rng.integers(self.low, self.high, size=n, endpoint=True).astype(np.float64)
        elif self.kind == "normal":
            raw = np.rint(rng.normal(self.mean, self.std, size=n))
        else:
            # numpy's pareto is the Lomax form (x_m = 0): shift by 1 and scale for classical.
            raw = np.floor((rng.pareto(self.shape, size=n) + 1.0) * self.scale)
        upper = self.max if self.max is not None else np.iinfo(np.int32).max
        return np.clip(raw, self.min, upper).astype(np.int64)


def _clean_token_pool(tokenizer: TokenizerLike, rng: np.random.Generator) -> np.ndarray:
    """Ids whose text is printable and re-encodes to exactly that one id."""
    vocab = int(tokenizer.vocab_size)
    if vocab < 1:
        raise WorkloadError(f"tokenizer.vocab_size: expected >= 1, got {vocab}")
    if vocab <= _POOL_CANDIDATES:
        candidates = np.arange(vocab)
    else:
        candidates = rng.choice(vocab, size=_POOL_CANDIDATES, replace=False)
    pool = []
    for token_id in candidates.tolist():
        text = tokenizer.decode([token_id], skip_special_tokens=True)
        if not text or "\ufffd" in text:
            continue  # special token, or a partial UTF-8 sequence
        if not all(ch.isprintable() or ch in " \n\t" for ch in text):
            continue
        if tokenizer.encode(text, add_special_tokens=False) == [token_id]:
            pool.append(token_id)
    if not pool:
        raise WorkloadError(
            "tokenizer: no token decodes to printable text that re-encodes to itself; "
            "synthetic prompts need a text tokenizer (check encode/decode)"
        )
    return np.asarray(pool, dtype=np.int64)


def exact_length_prompt(
    tokenizer: TokenizerLike, n_tokens: int, rng: np.random.Generator, pool: np.ndarray
) -> str:
    """A text that ``tokenizer.encode(text, add_special_tokens=False)`` maps to ``n_tokens`` ids.

    Raises:
        WorkloadError: no such text was found within a bounded number of fix-up rounds.
    """
    if n_tokens < 1:
        raise WorkloadError(f"prompt length: expected >= 1 tokens, got {n_tokens}")
    ids = pool[rng.integers(0, len(pool), size=n_tokens)].tolist()
    for _ in range(_MAX_FIXUP_ROUNDS):
        text = tokenizer.decode(ids, skip_special_tokens=True)
        encoded = tokenizer.encode(text, add_special_tokens=False)
        if len(encoded) == n_tokens:
            return text
        if len(encoded) > n_tokens:
            ids = encoded[:n_tokens]
        else:
            # Merges across token boundaries shortened the text: top it up with fresh ids.
            extra = pool[rng.integers(0, len(pool), size=n_tokens - len(encoded))].tolist()
            ids = encoded + extra
    raise WorkloadError(
        f"could not build a prompt of exactly {n_tokens} tokens in {_MAX_FIXUP_ROUNDS} rounds; "
        "the tokenizer's decode/encode do not round-trip"
    )


@dataclass(frozen=True)
class SharedPrefix:
    """A system prompt shared by some requests: ``num_prefixes`` distinct prefixes of ``tokens``
    tokens each; a request starts with one of them (uniformly) with probability ``share_ratio``.
    """

    tokens: int
    num_prefixes: int = 1
    share_ratio: float = 1.0

    def __post_init__(self) -> None:
        if self.tokens < 1:
            raise WorkloadError(f"shared_prefix.tokens: expected >= 1, got {self.tokens}")
        if self.num_prefixes < 1:
            raise WorkloadError(
                f"shared_prefix.num_prefixes: expected >= 1, got {self.num_prefixes}"
            )
        if not 0.0 <= self.share_ratio <= 1.0:
            raise WorkloadError(f"shared_prefix.share_ratio: expected 0..1, got {self.share_ratio}")


def _with_prefix(
    tokenizer: TokenizerLike,
    prefix: str,
    prefix_tokens: int,
    n_tokens: int,
    rng: np.random.Generator,
    pool: np.ndarray,
) -> tuple[str, int]:
    """prefix + a tail of ``n_tokens``; returns the text and its exact token count.

    A merge across the boundary can change the count by one; a few fresh tails usually avoid
    it, and otherwise the true count is returned (a prompt is never mislabelled).
    """
    for _ in range(8):
        text = prefix + exact_length_prompt(tokenizer, n_tokens, rng, pool)
        count = len(tokenizer.encode(text, add_special_tokens=False))
        if count == prefix_tokens + n_tokens:
            break
    return text, count


def synthetic_requests(
    tokenizer: TokenizerLike,
    n: int,
    input_len: LengthDist,
    output_len: LengthDist,
    seed: int,
    api: Api = "completions",
    ignore_eos: bool = True,
    temperature: float = 0.0,
    *,
    id_prefix: str = "req",
    shared_prefix: SharedPrefix | None = None,
) -> list[RequestSpec]:
    """``n`` requests with sampled prompt and output lengths, deterministic in ``seed``.

    Contract: request ``i`` has id ``f"{id_prefix}-{i:06d}"``; its prompt re-encodes to exactly
    ``prompt_tokens`` ids (no special tokens); ``max_tokens`` is the sampled output length. The
    same arguments give the same list, independent streams drive lengths and prompt ids, so
    changing ``output_len`` does not change the prompts. With ``shared_prefix``, ``input_len``
    is the length of each prompt's own part, after the shared prefix it may start with.
    """
    if n < 0:
        raise WorkloadError(f"synthetic_requests n: expected >= 0, got {n}")
    if api not in API_KINDS:
        raise WorkloadError(
            f"synthetic_requests api: expected one of {list(API_KINDS)}, got {api!r}"
        )
    in_rng, out_rng, text_rng = (
        np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(3)
    )
    prompt_lens = input_len.sample(in_rng, n).tolist()
    output_lens = output_len.sample(out_rng, n).tolist()
    pool = _clean_token_pool(tokenizer, text_rng) if n else np.zeros(0, dtype=np.int64)
    prefixes: list[str] = []
    choice: list[int] = [-1] * n
    if shared_prefix is not None and n:
        prefix_rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(4)[3])
        prefixes = [
            exact_length_prompt(tokenizer, shared_prefix.tokens, prefix_rng, pool)
            for _ in range(shared_prefix.num_prefixes)
        ]
        shares = prefix_rng.random(n) < shared_prefix.share_ratio
        picks = prefix_rng.integers(0, shared_prefix.num_prefixes, size=n)
        choice = np.where(shares, picks, -1).tolist()
    specs = []
    for i in range(n):
        if choice[i] >= 0:
            assert shared_prefix is not None
            prompt, count = _with_prefix(
                tokenizer, prefixes[choice[i]], shared_prefix.tokens, prompt_lens[i], text_rng,
                pool,
            )  # fmt: skip
        else:
            prompt = exact_length_prompt(tokenizer, prompt_lens[i], text_rng, pool)
            count = prompt_lens[i]
        specs.append(
            RequestSpec(
                request_id=f"{id_prefix}-{i:06d}",
                prompt=prompt,
                prompt_tokens=count,
                max_tokens=output_lens[i],
                api=api,
                ignore_eos=ignore_eos,
                temperature=temperature,
            )
        )
    return specs
