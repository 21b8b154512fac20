"""A request's images in each chat API's own form, in its last user turn.

The load generator holds images as URLs (loadgen.request_images: a base64 ``data:`` URL, or an
``http(s)://`` URL the server fetches). The last user turn's content becomes a list: its text
as a text part, then one part per image, in the request's order. Sent:

    chat       ``{"type": "text", "text"}`` then ``{"type": "image_url", "image_url": {"url"}}``;
    responses  ``{"type": "input_text", "text"}`` then ``{"type": "input_image", "image_url"}``;
    messages   ``{"type": "text", "text"}`` then ``{"type": "image", "source": {"type":
               "base64", "media_type", "data"}}`` for a data URL, ``{"type": "url", "url"}``
               for one the server fetches.

A turn whose content is already a list (a dataset's multi-part message) keeps its parts and
gets the images after them; a conversation without a user turn gets one holding the images.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from loadgen.request_images import split_data_url
from perfmodel.files import JSONObject

__all__ = ["ANTHROPIC_IMAGES", "CHAT_IMAGES", "RESPONSES_IMAGES", "ImageForm", "with_images"]


@dataclass(frozen=True)
class ImageForm:
    """How one API sends images: the type of its text parts, and an image URL as its part."""

    text_type: str
    part: Callable[[str], JSONObject]


def _chat_image(url: str) -> JSONObject:
    return {"type": "image_url", "image_url": {"url": url}}


def _responses_image(url: str) -> JSONObject:
    return {"type": "input_image", "image_url": url}


def _anthropic_image(url: str) -> JSONObject:
    parts = split_data_url(url)
    if parts is None:
        return {"type": "image", "source": {"type": "url", "url": url}}
    media_type, data = parts
    return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}


CHAT_IMAGES = ImageForm("text", _chat_image)
RESPONSES_IMAGES = ImageForm("input_text", _responses_image)
ANTHROPIC_IMAGES = ImageForm("text", _anthropic_image)


def with_images(
    form: ImageForm, turns: list[JSONObject], images: Sequence[str]
) -> list[JSONObject]:
    """``turns`` (an API's messages or input items) with ``images`` in the last user turn, in
    that API's ``form`` (module docstring); ``turns`` as they are without images. The turns
    are not changed in place: the last user turn is a new object."""
    if not images:
        return turns
    parts = [form.part(url) for url in images]
    last = next((i for i in range(len(turns) - 1, -1, -1) if turns[i].get("role") == "user"), None)
    if last is None:
        return [*turns, {"role": "user", "content": parts}]
    content = turns[last].get("content")
    if isinstance(content, list):
        head = list(content)
    else:
        text = content if isinstance(content, str) else ""
        head = [{"type": form.text_type, "text": text}] if text else []
    out = list(turns)
    out[last] = {**turns[last], "content": [*head, *parts]}
    return out
