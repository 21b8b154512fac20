"""Which requests the workload abandons: a scenario's ``[abandon]`` table.

``share`` of the requests (0..1, each drawn independently from the seed, so the same seed
abandons the same ones) carry a :class:`loadgen.request_spec.Abandon` rule: the client closes
the stream after ``after_tokens`` tokens or ``after_s`` seconds, as a user who stopped reading
(loadgen.client.abandon does it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from loadgen.request_spec import Abandon, RequestSpec
from loadgen.workloads.spec import ParameterError, check_type

__all__ = ["AbandonShare"]


@dataclass(frozen=True)
class AbandonShare:
    """``share`` (0..1) of the requests are abandoned after ``after_tokens`` content tokens or
    ``after_s`` seconds, whichever comes first (at least one is set).

    Raises:
        ParameterError: a value out of its range, or neither bound set.
    """

    share: float
    after_tokens: int | None = None
    after_s: float | None = None

    def __post_init__(self) -> None:
        owner = "AbandonShare"
        check_type(owner, "share", self.share, float)
        if not 0.0 <= self.share <= 1.0:
            raise ParameterError(owner, "share", f"must be in 0..1, got {self.share!r}")
        if self.after_tokens is None and self.after_s is None:
            raise ParameterError(
                owner, "after_tokens", "missing; set after_tokens, after_s or both"
            )
        if self.after_tokens is not None:
            check_type(owner, "after_tokens", self.after_tokens, int)
            if self.after_tokens < 1:
                problem = f"must be >= 1 token, got {self.after_tokens!r}"
                raise ParameterError(owner, "after_tokens", problem)
        if self.after_s is not None:
            check_type(owner, "after_s", self.after_s, float)
            if self.after_s <= 0:
                raise ParameterError(owner, "after_s", f"must be > 0 seconds, got {self.after_s!r}")

    @property
    def rule(self) -> Abandon:
        return Abandon(self.after_tokens, self.after_s)

    def apply(
        self, sessions: Sequence[Sequence[RequestSpec]], seed: int
    ) -> list[list[RequestSpec]]:
        """``sessions`` with the drawn requests carrying the rule (the same seed, the same ones)."""
        rng = np.random.default_rng(np.random.SeedSequence([seed, 0xAB4D]))
        rule = self.rule
        out: list[list[RequestSpec]] = []
        for session in sessions:
            drawn = rng.random(len(session)) < self.share
            out.append([
                dataclasses.replace(spec, abandon=rule) if pick else spec
                for spec, pick in zip(session, drawn, strict=True)
            ])  # fmt: skip
        return out

    def to_dict(self) -> dict[str, Any]:
        """The parameters (run.json's scenario ``abandon``)."""
        return dataclasses.asdict(self)
