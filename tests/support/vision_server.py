"""A stand-in for a vision-language model's server, on 127.0.0.1: it checks the shape of each
chat request's images and answers with the usage a vision server reports.

What it checks, per request (a request that fails a check is answered 400 with the reason, as
vLLM answers an image it cannot read, and the reason is kept in ``problems``): every content
part is ``text`` or ``image_url``; an ``image_url``'s URL is a base64 ``data:image/...`` URL
that Pillow decodes, of the media type it names and within ``max_side`` pixels, or an
``http(s)://`` URL (which it does not fetch: nothing leaves the machine). What it answers: a
stream of ``output`` content chunks, then usage whose ``prompt_tokens`` is the text's tokens
(under the tokenizer the client counts with), plus ``TEMPLATE_TOKENS``, plus each image's cost
(:func:`image_cost`: one token per 64 x 64 tile and one to open it, as a tiling vision encoder
counts; a fetched URL costs ``URL_IMAGE_TOKENS``). The sizes it decoded are kept in
``sizes`` (those of streamed requests, the load's) and ``checked`` (those of plain requests,
a pre-flight's), the bodies in ``bodies``.
"""

from __future__ import annotations

import base64
import io
import math
from dataclasses import dataclass, field
from typing import Any

from PIL import Image

from loadgen.protocols import TokenizerLike
from tests.support.http_server import Handler, HttpRequest, Response
from tests.support.sse_streams import chat_events

__all__ = ["TEMPLATE_TOKENS", "URL_IMAGE_TOKENS", "VisionServer", "image_cost"]

# The tokens the stand-in's "chat template" adds to every request's text.
TEMPLATE_TOKENS = 3
# What an image it would fetch costs (it fetches none).
URL_IMAGE_TOKENS = 5
_TILE = 64


def image_cost(width: int, height: int) -> int:
    """The prompt tokens one ``width`` x ``height`` image costs the stand-in (module docstring)."""
    return 1 + math.ceil(width / _TILE) * math.ceil(height / _TILE)


@dataclass
class VisionServer:
    """The handler's state (module docstring): what it was sent and what it refused."""

    tokenizer: TokenizerLike
    max_side: int = 4096
    output: int = 4
    bodies: list[dict[str, Any]] = field(default_factory=list)
    sizes: list[tuple[int, int]] = field(default_factory=list)
    checked: list[tuple[int, int]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def _image_tokens(self, url: str, sizes: list[tuple[int, int]]) -> int:
        if url.startswith(("http://", "https://")):
            return URL_IMAGE_TOKENS
        head, sep, payload = url.partition(",")
        if not (sep and head.startswith("data:image/") and head.endswith(";base64")):
            raise ValueError(f"not a base64 image data URL: {url[:40]!r}")
        with Image.open(io.BytesIO(base64.b64decode(payload, validate=True))) as image:
            image.load()
            kind, size = str(image.format).lower(), image.size
        if head != f"data:image/{kind};base64":
            raise ValueError(f"{head} holds a {kind} image")
        if max(size) > self.max_side:
            raise ValueError(f"an image of {size} pixels, over {self.max_side}")
        sizes.append(size)
        return image_cost(*size)

    def prompt_tokens(self, messages: list[dict[str, Any]], sizes: list[tuple[int, int]]) -> int:
        """The usage's prompt tokens of ``messages`` (module docstring), the images' sizes
        appended to ``sizes``; ValueError on a part it would refuse."""
        texts, images = [], 0
        for message in messages:
            content = message.get("content")
            if isinstance(content, str):
                texts.append(content)
                continue
            for part in content or []:
                if part.get("type") == "text":
                    texts.append(part["text"])
                elif part.get("type") == "image_url":
                    images += self._image_tokens(part["image_url"]["url"], sizes)
                else:
                    raise ValueError(f"a content part of type {part.get('type')!r}")
        text = "\n".join(texts)
        return len(self.tokenizer.encode(text, add_special_tokens=False)) + TEMPLATE_TOKENS + images

    def handler(self) -> Handler:
        """Lists one model; answers each chat request (module docstring)."""

        async def handle(request: HttpRequest, response: Response) -> None:
            if request.method == "GET":
                if request.path.startswith("/v1/models"):
                    data = [{"id": "vlm", "object": "model", "max_model_len": 4096}]
                    await response.send_json(200, {"object": "list", "data": data})
                else:
                    await response.send_json(404, {"detail": "Not Found"})
                return
            body = request.json()
            self.bodies.append(body)
            try:
                prompt = self.prompt_tokens(
                    body["messages"], self.sizes if body.get("stream") else self.checked
                )
            except (ValueError, OSError, KeyError, TypeError) as exc:
                self.problems.append(str(exc))
                error = {"message": str(exc), "type": "BadRequestError", "code": 400}
                await response.send_json(400, {"error": error})
                return
            if not body.get("stream"):
                await response.send_json(200, _answer(prompt, self.output))
                return
            usage = {"prompt_tokens": prompt, "completion_tokens": self.output,
                     "total_tokens": prompt + self.output}  # fmt: skip
            await response.start_stream()
            for event in chat_events([{"content": " kalo"}] * self.output, usage):
                await response.send(event)
            await response.end()

        return handle


def _answer(prompt: int, output: int) -> dict[str, Any]:
    """A plain (not streamed) chat answer of ``output`` tokens."""
    message = {"role": "assistant", "content": " kalo" * output}
    usage = {"prompt_tokens": prompt, "completion_tokens": output,
             "total_tokens": prompt + output}  # fmt: skip
    return {"object": "chat.completion", "model": "vlm", "usage": usage,
            "choices": [{"index": 0, "message": message, "finish_reason": "length"}]}  # fmt: skip
