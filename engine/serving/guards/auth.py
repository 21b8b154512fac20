"""`bench serve --api-key`: the OpenAI routes need ``Authorization: Bearer KEY``, as vLLM's do.

As vLLM's ``AuthenticationMiddleware`` (vllm/entrypoints/serve/middleware/authenticate.py): a
pure ASGI middleware guards every path under ``/v1`` (the OpenAI API: completions, chat,
models); OPTIONS requests, ``/health``, ``/metrics`` and ``/debug/*`` stay open, as vLLM keeps
everything outside its API prefixes open (health checks and Prometheus scrapers carry no key;
``/debug`` shows the engine's settings and step timings, no request content). The bearer token
is compared in constant time: both sides are hashed with SHA-256 first (equal lengths whatever
the guess) and compared with ``hmac.compare_digest``.

The answer differs from vLLM's in its body only: vLLM sends ``{"error": "Unauthorized"}``; this
server sends OpenAI's error shape (``{"error": {"message", "type", "param", "code"}}``, the shape
of every other error here and of OpenAI's own 401), with the same status 401.

The key lives in this middleware only: it is a server option, not an engine setting, so it is
in no EngineConfig, never reaches the engine core process, /debug/engine, or a log line.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

__all__ = ["API_KEY_ENV", "GUARDED_PREFIX", "ApiKeyMiddleware", "unauthorized_body"]

# bench serve reads its key from here when --api-key is not given (vLLM's is VLLM_API_KEY).
API_KEY_ENV = "LLM_PERF_LAB_API_KEY"
GUARDED_PREFIX = "/v1"


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


def unauthorized_body() -> dict[str, Any]:
    """The 401's body: OpenAI's error shape, saying what the server wants (never the key)."""
    # Imported here: the protocol pulls in engine.core and torch, and `bench serve --help` reads
    # API_KEY_ENV from this module without them.
    from engine.serving.protocol import error_body

    return error_body(
        "Unauthorized: this server needs the header 'Authorization: Bearer <key>' with the key "
        "it was started with (bench serve --api-key)",
        401,
        code="invalid_api_key",
    )


class ApiKeyMiddleware:
    """Answer 401 to a request under ``/v1`` whose bearer token is not ``api_key``."""

    def __init__(self, app: Any, api_key: str) -> None:
        if not api_key:
            raise ValueError("ApiKeyMiddleware: api_key is empty")
        self.app = app
        self._digest = _digest(api_key)
        self._body = json.dumps(unauthorized_body(), separators=(",", ":")).encode()

    def _authorized(self, scope: dict[str, Any]) -> bool:
        value = b""
        for name, raw in scope.get("headers", ()):
            if name.lower() == b"authorization":
                value = raw
                break
        scheme, _, token = value.decode("latin-1").partition(" ")
        if scheme.lower() != "bearer":
            return False
        return hmac.compare_digest(_digest(token.strip()), self._digest)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("method") == "OPTIONS":
            await self.app(scope, receive, send)
            return
        path = scope["path"].removeprefix(scope.get("root_path", ""))
        if path.startswith(GUARDED_PREFIX) and not self._authorized(scope):
            await send(
                {
                    "type": "http.response.start",
                    "status": 401,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(self._body)).encode()),
                        (b"www-authenticate", b"Bearer"),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": self._body})
            return
        await self.app(scope, receive, send)
