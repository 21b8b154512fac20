"""What a workload is made of: where its requests come from, their token lengths, shared prefixes.

These are the types a scenario's ``[workload]``, ``[input_len]``/``[output_len]`` and
``[shared_prefix]`` tables become; each checks itself when built. A parameter out of its range
raises :class:`ParameterError`, which names the parameter apart from the problem so that a
reader of a file can report both at the file's own key (``bench.scenario`` does).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any, Literal, get_args

import numpy as np

__all__ = [
    "LENGTH_BOUNDS",
    "LENGTH_KINDS",
    "LENGTH_PARAMS",
    "WORKLOAD_KINDS",
    "WORKLOAD_PARAMS",
    "LengthDist",
    "ParameterError",
    "SharedPrefix",
    "WorkloadError",
    "WorkloadSpec",
    "check_type",
]

LengthKind = Literal["fixed", "uniform", "normal", "pareto"]
LENGTH_KINDS: tuple[str, ...] = get_args(LengthKind)
# Per length kind, its parameters and their types: token counts are integers, the parameters of
# continuous distributions floats. Every kind also takes the bounds of LENGTH_BOUNDS.
LENGTH_PARAMS: dict[str, dict[str, type]] = {
    "fixed": {"value": int},
    "uniform": {"low": int, "high": int},
    "normal": {"mean": float, "std": float},
    "pareto": {"shape": float, "scale": float},
}
LENGTH_BOUNDS: dict[str, type] = {"min": int, "max": int}
_DEFAULT_MIN = 1
# Per kind, the parameters that must be positive (True: zero is allowed too).
_POSITIVE: dict[str, dict[str, bool]] = {
    "normal": {"mean": False, "std": True},
    "pareto": {"shape": False, "scale": False},
}

WorkloadKind = Literal["synthetic", "sharegpt", "multiturn", "trace", "dataset", "sessions"]
WORKLOAD_KINDS: tuple[str, ...] = get_args(WorkloadKind)
# Per workload kind, the parameters it takes and their types (WorkloadSpec's docstring).
WORKLOAD_PARAMS: dict[str, dict[str, type]] = {
    "synthetic": {},
    "sharegpt": {"path": str, "max_input_tokens": int, "max_output_tokens": int},
    "multiturn": {
        "turns": int,
        "path": str,
        "system_prompt_tokens": int,
        "max_context_tokens": int,
    },
    "trace": {"path": str, "time_scale": float},
    "dataset": {
        "path": str,
        "hub": str,
        "min_input_tokens": int,
        "max_input_tokens": int,
        "max_output_tokens": int,
    },
    "sessions": {
        "path": str,
        "time_scale": float,
        "system_prompt_tokens": int,
        "tool_result_tokens": int,
    },
}


class WorkloadError(ValueError):
    """A workload cannot be used: a parameter is invalid, a file unreadable, or a prompt of the
    asked length could not be built."""


class ParameterError(WorkloadError):
    """One parameter out of its range: the message is ``"<owner>.<field>: <problem>"``.

    ``field`` is the parameter's name and ``problem`` what it must be and what it was, e.g.
    ``"must be >= low, got 4"``.
    """

    def __init__(self, owner: str, field: str, problem: str) -> None:
        super().__init__(f"{owner}.{field}: {problem}")
        self.field = field
        self.problem = problem


def check_type(owner: str, name: str, value: Any, expected: type) -> None:
    """``value`` is of the declared type: a str, an integer, or a finite number (not a bool)."""
    if expected is str:
        if not isinstance(value, str):
            raise ParameterError(owner, name, f"expected a string, got {value!r}")
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ParameterError(owner, name, f"expected a finite number, got {value!r}")
    if expected is int and not isinstance(value, numbers.Integral):
        raise ParameterError(owner, name, f"expected an integer, got {value!r}")


def _check_params(owner: str, kind: str, values: Mapping[str, Any], takes: dict[str, type]) -> None:
    """Values the kind does not take are unset; those it takes have their declared types."""
    for name, value in values.items():
        if value is None:
            continue
        if name not in takes:
            raise ParameterError(owner, name, f"kind {kind!r} does not take it; drop it")
        check_type(owner, name, value, takes[name])


@dataclass(frozen=True)
class LengthDist:
    """A distribution of token lengths, sampled as ints clipped to ``[min, max]``.

    Kinds and their parameters (all lengths in tokens):
        * ``fixed``: ``value``.
        * ``uniform``: integers in ``[low, high]``, both inclusive.
        * ``normal``: ``mean``, ``std``; rounded to the nearest int.
        * ``pareto``: classical Pareto with ``shape`` (alpha > 0) and ``scale`` (the minimum,
          x_m > 0); heavy-tailed, so set ``max``.
    ``min`` (default 1) and ``max`` (default none) bound every kind. Bounds that miss the
    distribution's own range are rejected: they would turn (nearly) every sample into the bound,
    which is almost certainly a mistake rather than the workload meant.
    """

    kind: LengthKind
    value: int | None = None
    low: int | None = None
    high: int | None = None
    mean: float | None = None
    std: float | None = None
    shape: float | None = None
    scale: float | None = None
    min: int = _DEFAULT_MIN
    max: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in LENGTH_KINDS:
            problem = f"expected one of {list(LENGTH_KINDS)}, got {self.kind!r}"
            raise ParameterError("LengthDist", "kind", problem)
        owner = f"LengthDist(kind={self.kind!r})"
        takes = {**LENGTH_PARAMS[self.kind], **LENGTH_BOUNDS}
        values = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "kind"}
        _check_params(owner, self.kind, values, takes)
        for name in (*LENGTH_PARAMS[self.kind], "min"):
            if values[name] is None:
                raise ParameterError(owner, name, f"missing; kind {self.kind!r} needs it")
        for name, expected in takes.items():
            if expected is int and values[name] is not None and values[name] < 1:
                raise ParameterError(owner, name, f"must be at least 1 token, got {values[name]!r}")
        self._check_shape(owner)
        self._check_bounds(owner)

    def _check_shape(self, owner: str) -> None:
        """The kind's own parameters: low <= high; mean, shape and scale > 0; std >= 0."""
        if self.kind == "uniform" and self.high < self.low:  # type: ignore[operator]
            raise ParameterError(owner, "high", f"must be >= low, got {self.high!r}")
        for name, zero_ok in _POSITIVE.get(self.kind, {}).items():
            value = getattr(self, name)
            if value < 0 or (value == 0 and not zero_ok):
                problem = f"must be {'>= 0' if zero_ok else '> 0'}, got {value!r}"
                raise ParameterError(owner, name, problem)

    def _check_bounds(self, owner: str) -> None:
        """min <= max, and the bounds overlap the distribution's own range (class docstring)."""
        lo, hi = self.min, self.max
        if hi is not None and hi < lo:
            raise ParameterError(owner, "max", f"must be >= min ({lo}), got {hi!r}")
        bounds = f"[{lo}, {'inf' if hi is None else hi}]"
        if self.kind == "uniform":
            assert self.low is not None and self.high is not None
            if self.high < lo or (hi is not None and self.low > hi):
                problem = f"low..high must overlap min..max {bounds}, got {self.low!r}"
                raise ParameterError(owner, "low", problem)
        elif self.kind == "pareto":
            # Pareto samples are >= scale, so only a max below it loses the distribution.
            assert self.scale is not None
            if hi is not None and self.scale > hi:
                problem = f"must be <= max ({hi}), the smallest sample, got {self.scale!r}"
                raise ParameterError(owner, "scale", problem)
        else:
            name = "value" if self.kind == "fixed" else "mean"
            centre = getattr(self, name)
            if centre < lo or (hi is not None and centre > hi):
                problem = f"must lie within min..max {bounds}, got {centre!r}"
                raise ParameterError(owner, name, problem)

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
            raise WorkloadError(f"{where}.kind: required; one of {list(LENGTH_KINDS)}")
        return cls(**dict(data))

    def to_dict(self) -> dict[str, Any]:
        """``kind`` and the parameters that are set, as a scenario file writes them (``min``
        only when it is not its default, 1): the form run.json's scenario keeps."""
        return {
            f.name: value
            for f in fields(self)
            if (value := getattr(self, f.name)) is not None
            and not (f.name == "min" and value == _DEFAULT_MIN)
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


@dataclass(frozen=True)
class SharedPrefix:
    """A system prompt shared by some requests: ``num_prefixes`` distinct prefixes of ``tokens``
    tokens each; a request starts with one of them (uniformly) with probability ``share_ratio``
    (its input length is then the length of its own part, after the prefix).
    """

    tokens: int
    num_prefixes: int = 1
    share_ratio: float = 1.0

    def __post_init__(self) -> None:
        owner = "SharedPrefix"
        check_type(owner, "tokens", self.tokens, int)
        check_type(owner, "num_prefixes", self.num_prefixes, int)
        check_type(owner, "share_ratio", self.share_ratio, float)
        for name in ("tokens", "num_prefixes"):
            if getattr(self, name) < 1:
                raise ParameterError(owner, name, f"must be >= 1, got {getattr(self, name)!r}")
        if not 0.0 <= self.share_ratio <= 1.0:
            raise ParameterError(owner, "share_ratio", f"must be in 0..1, got {self.share_ratio!r}")

    def to_dict(self) -> dict[str, Any]:
        """All three parameters (run.json's scenario)."""
        return asdict(self)


@dataclass(frozen=True)
class WorkloadSpec:
    """Where a load's requests come from; parameters the kind does not take are None.

    * ``synthetic``: prompts of the scenario's input lengths, max_tokens its output lengths.
    * ``sharegpt``: ``path`` (a ShareGPT JSON file): first turns as prompts, answers' lengths as
      max_tokens (unless output lengths are given); ``max_input_tokens`` and
      ``max_output_tokens`` skip longer conversations and cap the answers.
    * ``multiturn``: sessions of ``turns`` turns, synthetic chats with a system prompt of
      ``system_prompt_tokens`` tokens; or ``path`` (a ShareGPT file: its conversations, capped at
      ``turns`` when set); ``max_context_tokens`` ends a session whose history outgrows it.
    * ``trace``: ``path`` (JSONL of timestamps and lengths) replayed open loop at the trace's
      times stretched by ``time_scale``.
    * ``dataset``: ``path`` (a JSONL, JSON, CSV or Parquet file, or a ``datasets`` folder) or
      ``hub`` (a dataset repository of the Hugging Face cache) of prompts or chat
      conversations (loadgen.workloads.dataset); ``min_input_tokens`` and ``max_input_tokens``
      refuse rows outside them, ``max_output_tokens`` caps the output lengths.
    * ``sessions``: agent sessions (loadgen.workloads.sessions): ``path`` (a JSONL trace, one
      turn a line) or generated from the scenario's ``[sessions]`` table and lengths, with a
      system prompt of ``system_prompt_tokens``; ``tool_result_tokens``, the length of a
      synthetic tool result; ``time_scale`` starts the trace's sessions at its timestamps
      stretched by it (open loop).
    """

    kind: WorkloadKind = "synthetic"
    path: str | None = None
    max_input_tokens: int | None = None
    max_output_tokens: int | None = None
    turns: int | None = None
    system_prompt_tokens: int | None = None
    max_context_tokens: int | None = None
    time_scale: float | None = None
    hub: str | None = None
    min_input_tokens: int | None = None
    tool_result_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in WORKLOAD_KINDS:
            problem = f"expected one of {list(WORKLOAD_KINDS)}, got {self.kind!r}"
            raise ParameterError("WorkloadSpec", "kind", problem)
        owner = f"WorkloadSpec(kind={self.kind!r})"
        values = self.to_dict()
        del values["kind"]
        _check_params(owner, self.kind, values, WORKLOAD_PARAMS[self.kind])
        if self.kind in ("sharegpt", "trace") and self.path is None:
            problem = f"missing; kind '{self.kind}' reads its requests from a file"
            raise ParameterError(owner, "path", problem)
        if self.kind == "dataset" and (self.path is None) == (self.hub is None):
            problem = "set one: path (a file or datasets folder) or hub (a Hub dataset id)"
            raise ParameterError(owner, "path" if self.hub is None else "hub", problem)
        if self.kind == "multiturn" and self.path is None and self.turns is None:
            problem = "missing; set turns (synthetic chats) or path (a ShareGPT file)"
            raise ParameterError(owner, "turns", problem)
        for name in (
            "max_input_tokens", "max_output_tokens", "turns", "max_context_tokens",
            "min_input_tokens", "tool_result_tokens",
        ):  # fmt: skip
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ParameterError(owner, name, f"must be >= 1, got {value!r}")
        if self.system_prompt_tokens is not None:
            if self.system_prompt_tokens < 0:
                problem = f"must be >= 0 tokens, got {self.system_prompt_tokens!r}"
                raise ParameterError(owner, "system_prompt_tokens", problem)
            if self.path is not None:
                problem = "is for generated chats; a file of chats has its own"
                raise ParameterError(owner, "system_prompt_tokens", problem)
        low, high = self.min_input_tokens, self.max_input_tokens
        if low is not None and high is not None and high < low:
            raise ParameterError(owner, "max_input_tokens", f"must be >= min_input_tokens ({low})")
        if self.time_scale is not None and self.time_scale <= 0:
            raise ParameterError(owner, "time_scale", f"must be > 0, got {self.time_scale!r}")

    def to_dict(self) -> dict[str, Any]:
        """``kind`` and the parameters that are set (run.json's scenario)."""
        return {k: v for k, v in asdict(self).items() if v is not None}

    @property
    def open_loop(self) -> bool:
        """A trace sets its own arrival times (a session trace, where time_scale is set)."""
        return self.kind == "trace" or (self.kind == "sessions" and self.time_scale is not None)
