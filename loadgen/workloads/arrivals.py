"""Open-loop arrival schedules: when each request is due, precomputed from a seed.

A schedule is an array of send times in seconds from the load's start, non-decreasing, fixed
before the first request goes out. Precomputing it is what makes open-loop latency honest: a
request's latency is also counted from its planned time, so a slow server (or a slow client)
cannot push later arrivals back and hide its queueing (coordinated omission).

Inter-arrival gaps:
    * ``poisson``: exponential with mean ``1 / rate_rps`` (memoryless arrivals).
    * ``gamma``: gamma with shape ``burstiness`` and scale ``1 / (rate_rps * burstiness)``, so the
      mean rate is still ``rate_rps``; shape 1 is Poisson, < 1 burstier, > 1 more regular (the
      same parametrisation as vLLM's ``bench serve --burstiness``).
    * ``constant``: exactly ``1 / rate_rps`` apart.

Ramp-up (a parameter of :meth:`ArrivalProcess.schedule`, as the spread of user starts is of
the closed loop, not a property of the process): with ``ramp_up_s > 0`` the rate grows linearly
from 0 to ``rate_rps`` over the first ``ramp_up_s`` seconds. The full-rate schedule is
time-changed through the inverse of the cumulative rate Λ(t) (Λ(t) = r t² / 2R for t <= R,
r R / 2 + r (t - R) after), which keeps the arrival process's shape while thinning its start.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, get_args

import numpy as np

from loadgen.workloads.spec import ParameterError, check_type

__all__ = ["ARRIVAL_KINDS", "ArrivalKind", "ArrivalProcess", "ramp_time_change"]

ArrivalKind = Literal["poisson", "gamma", "constant"]
ARRIVAL_KINDS: tuple[str, ...] = get_args(ArrivalKind)


def ramp_time_change(full_rate_s: np.ndarray, ramp_up_s: float) -> np.ndarray:
    """Map arrival times of a constant-rate process onto a linear ramp of ``ramp_up_s`` seconds.

    ``full_rate_s`` are arrival times (s) of a process at the target rate; the result has the
    same arrivals in order with the rate rising linearly from 0 over ``ramp_up_s`` seconds.
    """
    if ramp_up_s <= 0:
        return full_rate_s
    u = np.asarray(full_rate_s, dtype=np.float64)
    half = ramp_up_s / 2.0
    # Λ(t) / r = u: t = sqrt(2 R u) inside the ramp, u + R / 2 after it.
    return np.where(u <= half, np.sqrt(2.0 * ramp_up_s * np.maximum(u, 0.0)), u + half)


@dataclass(frozen=True)
class ArrivalProcess:
    """An open-loop arrival process at its full rate (module docstring); a scenario's
    ``[arrival]`` table.

    Attributes:
        kind: ``"poisson"``, ``"gamma"`` or ``"constant"``.
        rate_rps: mean arrival rate, requests per second, > 0.
        burstiness: the gamma shape (only for ``gamma``; 1.0 equals Poisson), > 0.

    Raises:
        ParameterError: a parameter out of its range, naming it.
    """

    kind: ArrivalKind
    rate_rps: float
    burstiness: float = 1.0

    def __post_init__(self) -> None:
        owner = "ArrivalProcess"
        if self.kind not in ARRIVAL_KINDS:
            problem = f"expected one of {list(ARRIVAL_KINDS)}, got {self.kind!r}"
            raise ParameterError(owner, "kind", problem)
        for name in ("rate_rps", "burstiness"):
            check_type(owner, name, getattr(self, name), float)
        if self.rate_rps <= 0:
            raise ParameterError(
                owner, "rate_rps", f"must be > 0 requests/s, got {self.rate_rps!r}"
            )
        if self.burstiness <= 0:
            problem = f"must be > 0 (the gamma shape), got {self.burstiness!r}"
            raise ParameterError(owner, "burstiness", problem)
        if self.kind != "gamma" and self.burstiness != 1.0:
            problem = (
                f"only kind 'gamma' takes burstiness (kind is {self.kind!r}); drop it or use "
                f"kind 'gamma', got {self.burstiness!r}"
            )
            raise ParameterError(owner, "burstiness", problem)

    def gaps_s(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` inter-arrival gaps (s) at the full rate."""
        mean_s = 1.0 / self.rate_rps
        if self.kind == "constant":
            return np.full(n, mean_s)
        if self.kind == "poisson":
            return rng.exponential(mean_s, size=n)
        return rng.gamma(self.burstiness, mean_s / self.burstiness, size=n)

    def schedule(self, n: int, seed: int, ramp_up_s: float = 0.0) -> np.ndarray:
        """Send times (s from the load's start) of ``n`` requests; the same seed, the same plan.

        ``ramp_up_s`` (seconds, >= 0) ramps the rate up from 0 (module docstring). The first
        request is due at the first gap's end (not at 0), as a process that was already running
        would deliver it; with a ramp it is due later still.
        """
        if n < 0:
            raise ValueError(f"ArrivalProcess.schedule n: expected >= 0, got {n}")
        if not ramp_up_s >= 0:
            problem = f"must be >= 0 seconds, got {ramp_up_s!r}"
            raise ParameterError("ArrivalProcess.schedule", "ramp_up_s", problem)
        rng = np.random.default_rng(np.random.SeedSequence([seed, 0x4A11]))
        times = np.cumsum(self.gaps_s(n, rng))
        if self.kind == "constant":
            times -= times[0] if n else 0.0  # a metronome starts on its first beat
        return ramp_time_change(times, ramp_up_s)

    def to_dict(self) -> dict[str, Any]:
        """The parameters (run.json's scenario ``arrival``)."""
        return {
            "kind": self.kind,
            "rate_rps": float(self.rate_rps),
            "burstiness": float(self.burstiness),
        }
