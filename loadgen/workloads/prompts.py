"""Synthetic workloads: prompts of an exact token count, with optional shared prefixes.

Prompts are built from token ids, not from words, so that a request asks for exactly the prompt
length the scenario says: sample ids, decode, re-encode, and fix the ids up until the text
re-encodes to exactly ``prompt_tokens`` ids. Ids are drawn from a pool of "clean" tokens (ones
that decode to printable text and re-encode to themselves), which makes the fix-up converge in a
few rounds. Random ids also make prompts distinct, so no prefix cache can flatter a run.
"""

from __future__ import annotations

import numpy as np

from loadgen.protocols import BatchedTokenizerLike, TokenizerLike
from loadgen.request_spec import RequestSpec
from loadgen.workloads.spec import LengthDist, SharedPrefix, WorkloadError
from results.schema.api_kinds import API_KINDS, Api

__all__ = ["exact_length_prompt", "synthetic_requests"]

_MAX_FIXUP_ROUNDS = 64
_MAX_DRAWS = 8  # fresh draws of ids when one's fix-up does not converge
_POOL_CANDIDATES = 8192  # ids tried for the clean pool; enough variety, bounded cost on big vocabs


def _clean_token_pool(tokenizer: TokenizerLike, rng: np.random.Generator) -> np.ndarray:
    """Ids whose text is printable and re-encodes to exactly that one id."""
    if isinstance(tokenizer, BatchedTokenizerLike):
        candidates = list(tokenizer.candidate_ids(rng))
        texts = tokenizer.decode_each(candidates)
        printable = [(i, t) for i, t in zip(candidates, texts, strict=True) if _is_clean_text(t)]
        encoded = tokenizer.encode_batch([t for _, t in printable])
        pool = [i for (i, _), ids in zip(printable, encoded, strict=True) if ids == [i]]
    else:
        vocab = int(tokenizer.vocab_size)
        if vocab < 1:
            raise WorkloadError(f"tokenizer.vocab_size: expected >= 1, got {vocab}")
        if vocab <= _POOL_CANDIDATES:
            candidates = np.arange(vocab).tolist()
        else:
            candidates = rng.choice(vocab, size=_POOL_CANDIDATES, replace=False).tolist()
        pool = []
        for token_id in candidates:
            text = tokenizer.decode([token_id], skip_special_tokens=True)
            if not _is_clean_text(text):
                continue
            if tokenizer.encode(text, add_special_tokens=False) == [token_id]:
                pool.append(token_id)
    if not pool:
        raise WorkloadError(
            "tokenizer: no token decodes to printable text that re-encodes to itself; "
            "synthetic prompts need a text tokenizer (check encode/decode)"
        )
    return np.asarray(pool, dtype=np.int64)


def _is_clean_text(text: str) -> bool:
    """Printable text of complete characters: not a special token (empty), not a partial UTF-8
    sequence (U+FFFD)."""
    if not text or "\ufffd" in text:
        return False
    return all(ch.isprintable() or ch in " \n\t" for ch in text)


def exact_length_prompt(
    tokenizer: TokenizerLike, n_tokens: int, rng: np.random.Generator, pool: np.ndarray
) -> str:
    """A text that ``tokenizer.encode(text, add_special_tokens=False)`` maps to ``n_tokens`` ids.

    Raises:
        WorkloadError: no such text was found within a bounded number of fix-up rounds.
    """
    if n_tokens < 1:
        raise WorkloadError(f"prompt length: expected >= 1 tokens, got {n_tokens}")
    # A draw whose fix-up cycles (a truncation that re-merges, a top-up that merges again) is
    # rare, about one prompt in 12,000 with the tiny preset's tokenizer: a soak of many requests
    # meets it, so a fresh draw follows. The first draw is the same as ever, so every prompt
    # that converged before is unchanged.
    for _ in range(_MAX_DRAWS):
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
        f"could not build a prompt of exactly {n_tokens} tokens in {_MAX_DRAWS} draws of "
        f"{_MAX_FIXUP_ROUNDS} rounds; the tokenizer's decode/encode do not round-trip"
    )


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
