"""Adapters by name, for `bench run --engine NAME`.

openai: any OpenAI-compatible URL (no metrics map, no vLLM extensions); reference: the built-in
engine; vllm, sglang, tgi, llamacpp, trtllm: the engines of the same names.
"""

from __future__ import annotations

from engine_adapters.base import EngineAdapter
from engine_adapters.llamacpp import LLAMACPP
from engine_adapters.reference import REFERENCE
from engine_adapters.sglang import SGLANG
from engine_adapters.tgi import TGI
from engine_adapters.trtllm import TRTLLM
from engine_adapters.vllm import VLLM

OPENAI = EngineAdapter(
    name="openai",
    # Some OpenAI-compatible servers take it, some refuse it: the pre-flight asks.
    accepts_ignore_eos=None,
    # Any OpenAI-compatible server answers /v1/models; few have /health.
    health_path="/v1/models",
    description="any OpenAI-compatible endpoint",
)

ADAPTERS: dict[str, EngineAdapter] = {
    a.name: a for a in (REFERENCE, VLLM, SGLANG, TGI, LLAMACPP, TRTLLM, OPENAI)
}


def get_adapter(name: str) -> EngineAdapter:
    try:
        return ADAPTERS[name]
    except KeyError:
        raise ValueError(
            f"unknown engine {name!r}; known engines: {', '.join(sorted(ADAPTERS))}"
        ) from None
