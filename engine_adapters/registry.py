"""Adapters by name, for `bench run --engine NAME`."""

from __future__ import annotations

from engine_adapters.base import EngineAdapter
from engine_adapters.reference import REFERENCE
from engine_adapters.vllm import VLLM

OPENAI = EngineAdapter(name="openai", accepts_ignore_eos=False)

ADAPTERS: dict[str, EngineAdapter] = {a.name: a for a in (REFERENCE, VLLM, OPENAI)}


def get_adapter(name: str) -> EngineAdapter:
    try:
        return ADAPTERS[name]
    except KeyError:
        raise ValueError(
            f"unknown engine {name!r}; known engines: {', '.join(sorted(ADAPTERS))}"
        ) from None
