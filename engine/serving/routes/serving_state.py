"""What the server's routes share: the engine they serve, its async client, tokenizer, metrics
and prompt checks, kept on ``app.state.serving`` (``ServingState``) and reached through the
request (``serving_state``).

The routes are module-level functions that find it there rather than closures over it: FastAPI
keeps every route function it has classified in module-level caches for the life of the process,
and a closure would keep its engine (and the engine its KV cache) alive after its server stopped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fastapi import Request

from engine.core.request import SamplingParams
from engine.llm_engine import LLMEngine
from engine.serving.async_engine import AsyncLLM, RemoteAsyncLLM
from engine.serving.core_process import EngineCoreProcess
from engine.serving.errors import BadRequest
from engine.serving.metrics import EngineMetrics
from engine.serving.output_processor import TextDelta
from engine.serving.prompt_input import PromptInput
from engine.serving.reasoning import ReasoningPrefix
from engine.tokenizer.tokenizer import Tokenizer

__all__ = ["ServingState", "serving_state"]


@dataclass
class ServingState:
    """One app's engine (in-process or a core process) and what its routes need of it."""

    engine: LLMEngine | EngineCoreProcess
    llm: AsyncLLM | RemoteAsyncLLM
    metrics: EngineMetrics
    prompts: PromptInput
    prefix: ReasoningPrefix
    tokenizer: Tokenizer
    model_name: str

    @classmethod
    def over(
        cls, engine: LLMEngine | EngineCoreProcess, reasoning: ReasoningPrefix | None = None
    ) -> ServingState:
        """The state of an app serving ``engine``; ``reasoning`` labels a prefix of each chat
        answer as reasoning (none by default)."""
        metrics = EngineMetrics(engine.served_model_name)
        llm = (
            RemoteAsyncLLM(engine, metrics)
            if isinstance(engine, EngineCoreProcess)
            else AsyncLLM(engine, metrics)
        )
        tokenizer = engine.tokenizer
        prompts = PromptInput(tokenizer, engine.model_config.vocab_size, engine.max_model_len)
        return cls(
            engine=engine,
            llm=llm,
            metrics=metrics,
            prompts=prompts,
            prefix=reasoning or ReasoningPrefix(),
            tokenizer=tokenizer,
            model_name=engine.served_model_name,
        )

    @property
    def max_model_len(self) -> int:
        """The engine's context length (tokens)."""
        return self.engine.max_model_len

    def check_model(self, name: str) -> None:
        """Raise the 400 for a request that names another model than the one served."""
        if name != self.model_name:
            raise BadRequest(
                f"the model {name!r} does not exist; this server serves {self.model_name!r}",
                "model",
                "model_not_found",
            )

    def check_length(self, prompt_ids: list[int], max_tokens: int, prompt_field: str) -> None:
        """Raise the 400 for an empty prompt or one that, with ``max_tokens``, does not fit the
        engine; it names the field to fix (``prompt_field`` or ``max_tokens``)."""
        if not prompt_ids:
            raise BadRequest(f"{prompt_field} is empty; send at least one token", prompt_field)
        try:
            self.engine.check_request(len(prompt_ids), SamplingParams(max_tokens=max_tokens))
        except ValueError as e:
            # max_tokens alone past the context: no prompt could fit, so it is the field to fix.
            field = "max_tokens" if max_tokens >= self.max_model_len else prompt_field
            message = str(e) if field in str(e) else f"{field}: {e}"
            raise BadRequest(message, field, "context_length_exceeded") from e

    def usage(self, d: TextDelta, is_chat: bool) -> dict[str, Any]:
        """The OpenAI usage object of a request whose last output is ``d`` (token counts, and
        the reasoning tokens' details of a chat answer with a reasoning prefix)."""
        return {
            "prompt_tokens": d.num_prompt_tokens,
            "completion_tokens": d.num_output_tokens,
            "total_tokens": d.num_prompt_tokens + d.num_output_tokens,
            # vLLM's with --enable-prompt-tokens-details: the prompt tokens the cache held.
            "prompt_tokens_details": {"cached_tokens": d.num_cached_tokens},
            **self.prefix.usage_details(d.num_output_tokens, is_chat),
        }


def serving_state(request: Request) -> ServingState:
    """The ServingState of the app that received ``request``."""
    state: ServingState = request.app.state.serving
    return state
