"""The server's error answers: OpenAI's error body, one-line messages that name the field, and
never more than a short prefix of what the client sent.

Every error leaves as ``{"error": {"message", "type", "param", "code"}}`` (``error_body``). A
message may quote the client's value, but only through ``quote``: at most ``QUOTE_CHARS``
characters, ASCII-escaped, so that a 50 MiB field is not echoed back (pydantic's own validation
errors carry the whole ``input``, which FastAPI's default handler returns, twice) and a lone
surrogate in it cannot break the response's UTF-8 encoding.
"""

from __future__ import annotations

import itertools
import json
import reprlib
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from engine.serving.protocol import error_body

# Characters of a client's value an error message may quote.
QUOTE_CHARS = 40


class _ShortRepr(reprlib.Repr):
    """reprlib, which looks at a few items of a container, never at all of them; but a dict's
    first keys in its own order: reprlib sorts them all, which a million keys make slow."""

    def repr_dict(self, x: dict[Any, Any], level: int) -> str:
        if not x:
            return "{}"
        if level <= 0:
            return "{...}"
        items = [
            f"{self.repr1(k, level - 1)}: {self.repr1(v, level - 1)}"
            for k, v in itertools.islice(x.items(), self.maxdict)
        ]
        return "{" + ", ".join(items) + (", ...}" if len(x) > self.maxdict else "}")


_REPR = _ShortRepr()
_REPR.maxlevel, _REPR.maxdict, _REPR.maxlist, _REPR.maxtuple = 2, 3, 3, 3
_REPR.maxstring = _REPR.maxother = QUOTE_CHARS


class BadRequest(Exception):
    """A request the server refuses with a 400 naming ``param``, the field to fix."""

    def __init__(self, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.param = param
        self.code = code


class ErrorResponse(JSONResponse):
    """A JSON response rendered with ASCII escapes: a message that quotes client text (which may
    hold a lone surrogate, valid in a Python str, not in UTF-8) always encodes."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def error_response(
    message: str,
    status: int,
    param: str | None = None,
    code: str | None = None,
    err_type: str = "invalid_request_error",
) -> ErrorResponse:
    """``status`` with OpenAI's error body (protocol.error_body)."""
    return ErrorResponse(error_body(message, status, param, code, err_type), status_code=status)


def quote(value: object, limit: int = QUOTE_CHARS) -> str:
    """``value``'s repr cut to ``limit`` characters ("..." and the full length marked when cut),
    ASCII-escaped: what an error message may show of a client's value."""
    text = _REPR.repr(value).encode("ascii", "backslashreplace").decode("ascii")
    if isinstance(value, str) and len(value) > limit:
        return f"{text[: limit + 2]} ({len(value)} characters)"
    return text[: limit + 8] + ("..." if len(text) > limit + 8 else "")


def validation_message(exc: RequestValidationError) -> tuple[str, str | None]:
    """A one-line message for pydantic's errors, naming each field (dotted, ``messages.0.role``)
    and quoting at most a prefix of each value; and the first field, OpenAI's ``param``."""
    parts: list[str] = []
    param: str | None = None
    errors = exc.errors()
    for err in errors[:3]:
        loc = [str(x) for x in err.get("loc", ()) if x != "body" and not _is_union_tag(x)]
        field = ".".join(loc) or "body"
        param = param or field
        if err.get("type") == "json_invalid":
            return "the request body is not valid JSON: " + str(err.get("msg")), None
        got = f" (got {quote(err['input'])})" if "input" in err and loc else ""
        parts.append(f"{field}: {err.get('msg')}{got}")
    more = f"; and {len(errors) - 3} more" if len(errors) > 3 else ""
    return "invalid request: " + "; ".join(parts) + more, param


def _is_union_tag(part: object) -> bool:
    # pydantic names the branch of a union that failed ("str", "list[int]", "TextContentPart")
    # in the location, between field names; the field is what the client needs.
    return isinstance(part, str) and (
        part[:1].isupper() or "[" in part or part in ("str", "int", "float", "bool", "none")
    )


def install_error_handlers(app: FastAPI) -> None:
    """Answer validation errors, BadRequest and HTTP errors (404, 405) in OpenAI's shape."""

    @app.exception_handler(RequestValidationError)
    async def _on_validation(_: Request, exc: RequestValidationError) -> ErrorResponse:
        message, param = validation_message(exc)
        return error_response(message, 400, param)

    @app.exception_handler(BadRequest)
    async def _on_bad_request(_: Request, exc: BadRequest) -> ErrorResponse:
        return error_response(str(exc), 400, exc.param, exc.code)

    @app.exception_handler(StarletteHTTPException)
    async def _on_http(_: Request, exc: StarletteHTTPException) -> ErrorResponse:
        if exc.status_code == 400:
            # FastAPI's answer to a body it cannot decode at all (bytes in no JSON encoding).
            message = f"the request body is not valid JSON: {exc.detail}"
            return error_response(message, 400)
        return error_response(str(exc.detail), exc.status_code, err_type="http_error")
