"""The engine's NVTX ranges: every step that computes pushes a prefill, decode or mixed range
inside its execute range, the ranges nsys shows (docs/gpus.md: "Checking a GPU node")."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from engine.core.request import SamplingParams
from engine.core.telemetry import NvtxRanges, step_phase
from tests.support.engine_fixtures import make_engine


class RecordingRanges(NvtxRanges):
    """The real NVTX ranges (pushed through the nvtx package, no profiler needed), each also
    recorded as (name, payload, the names of the ranges open around it)."""

    def __init__(self) -> None:
        super().__init__()
        self.pushed: list[tuple[str, int | None, tuple[str, ...]]] = []
        self._open: list[str] = []

    @contextmanager
    def range(self, name: str, payload: int | None = None) -> Iterator[None]:
        self.pushed.append((name, payload, tuple(self._open)))
        self._open.append(name)
        try:
            with super().range(name, payload):
                yield
        finally:
            self._open.pop()


def test_step_phase_names_what_the_forward_computes() -> None:
    assert step_phase(40, 0) == ("prefill", 40)
    assert step_phase(0, 3) == ("decode", 3)
    assert step_phase(16, 2) == ("mixed", 16)


def test_each_computing_step_pushes_its_phase_inside_execute() -> None:
    # A token budget of 16 splits the 40-token prompt into chunks, which run beside the first
    # request's decodes: prefill-only, mixed and decode-only steps all occur.
    engine = make_engine(max_num_batched_tokens=16, max_num_seqs=4)
    ranges = RecordingRanges()
    engine.nvtx = ranges
    params = SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True)
    engine.add_request("a", list(range(3, 13)), params)
    engine.step()
    engine.add_request("b", list(range(20, 60)), params)
    while engine.has_unfinished_requests():
        engine.step()

    phases = [(n, p, o) for n, p, o in ranges.pushed if n in ("prefill", "decode", "mixed")]
    steps = [p for n, p, _ in ranges.pushed if n == "step"]
    assert len(phases) == len(steps) == engine.steps.num_steps
    assert all(outer == ("step", "execute") for _, _, outer in phases)
    names = [n for n, _, _ in phases]
    assert {"prefill", "decode", "mixed"} <= set(names)
    # The phase payloads of prefill and mixed steps add up to every prompt token computed.
    assert sum(p for n, p, _ in phases if n in ("prefill", "mixed")) == 10 + 40
    # Each recorded step agrees with the range it pushed.
    records = engine.steps.since(0)
    for (name, payload, _), pre, dec in zip(
        phases, records["num_prefill_tokens"], records["num_decode_tokens"], strict=True
    ):
        assert (name, payload) == step_phase(pre, dec)
