"""The images a request sends, in the one form the load generator holds them: image URLs.

An image is held as the URL that an OpenAI chat ``image_url`` part carries: a ``data:`` URL
(``data:image/png;base64,...``, the image's own bytes, which every vision server takes) or an
``http(s)://`` URL that the server fetches itself. loadgen.client.image_bodies writes them in
each chat API's own form (chat's ``image_url`` parts, the Responses API's ``input_image``,
Anthropic's ``image`` blocks). :func:`as_image_url` takes what a dataset's cell holds: such a
URL, the image's bytes (a binary column, or the ``{"bytes", "path"}`` struct Hugging Face
datasets write for an ``Image`` feature), or a file's path (relative to the dataset's folder).

A request's image cost is the server's to count: requests.parquet's ``image_tokens`` is
:func:`image_tokens`, the server's ``usage.prompt_tokens`` beyond the text's own tokens.
"""

from __future__ import annotations

import base64
import io
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "IMAGE_FORMATS",
    "ImageError",
    "as_image_url",
    "as_images",
    "data_url",
    "image_tokens",
    "split_data_url",
]

# The encodings synthetic images are written in (Pillow's format names, lower case).
IMAGE_FORMATS = ("png", "jpeg")
_URL_SCHEMES = ("http://", "https://")
_BASE64 = re.compile(r"[A-Za-z0-9+/=]+")


class ImageError(ValueError):
    """An image that cannot be sent; the message says which and why."""


def data_url(data: bytes) -> str:
    """``data`` (an encoded image: PNG, JPEG, WebP, GIF, ...) as a base64 ``data:`` URL, its
    media type the one Pillow reads in the bytes.

    Raises:
        ImageError: bytes that Pillow does not read as an image.
    """
    from PIL import Image, UnidentifiedImageError  # only runs with images load Pillow

    try:
        with Image.open(io.BytesIO(data)) as image:
            kind = str(image.format or "").lower()
    except (UnidentifiedImageError, OSError) as exc:
        raise ImageError(f"not an image ({len(data):,} bytes): {str(exc)[:60]}") from None
    return f"data:image/{kind};base64,{base64.b64encode(data).decode('ascii')}"


def split_data_url(url: str) -> tuple[str, str] | None:
    """(media type, base64 data) of a base64 ``data:`` URL, None for any other URL."""
    if not url.startswith("data:"):
        return None
    head, _, payload = url[5:].partition(",")
    media, _, encoding = head.partition(";")
    if encoding != "base64" or not media.startswith("image/"):
        raise ImageError(f"data URL {url[:40]!r}...: expected data:image/<type>;base64,<data>")
    return media, payload


def _check_url(url: str) -> str:
    if url.startswith(_URL_SCHEMES):
        return url
    if (parts := split_data_url(url)) is None:
        raise ImageError(f"image URL {url[:60]!r}: expected http(s):// or data:image/...")
    if not parts[1] or not _BASE64.fullmatch(parts[1][:256]):
        raise ImageError(f"data URL {url[:40]!r}...: its data is not base64")
    return url


def as_image_url(raw: Any, folder: Path | None = None) -> str:
    """``raw`` (module docstring: a URL, bytes, a ``{"bytes", "path"}`` struct or a path,
    relative to ``folder``) as the held form, an image URL.

    Raises:
        ImageError: nothing usable, a file that is missing or not an image.
    """
    if isinstance(raw, bytes | bytearray | memoryview):
        return data_url(bytes(raw))
    if isinstance(raw, Mapping):
        if raw.get("bytes"):
            return data_url(bytes(raw["bytes"]))
        if raw.get("url"):  # OpenAI's {"url": ...} of an image_url part
            return as_image_url(raw["url"], folder)
        if raw.get("path"):
            return as_image_url(str(raw["path"]), folder)
        raise ImageError("an image object without bytes, url or path")
    if not isinstance(raw, str) or not raw.strip():
        raise ImageError(f"an image must be a URL, a path or bytes, got {type(raw).__name__}")
    text = raw.strip()
    if text.startswith((*_URL_SCHEMES, "data:")):
        return _check_url(text)
    path = Path(text)
    if not path.is_absolute() and folder is not None:
        path = folder / path
    try:
        return data_url(path.read_bytes())
    except OSError as exc:
        raise ImageError(f"image file {text[:60]!r}: {exc.strerror or exc}") from None


def as_images(raw: Any, folder: Path | None = None) -> tuple[str, ...]:
    """A cell's images (one image, a list of them, or a JSON list of URLs or paths) in the
    held form; () for none (None, "" or an empty list)."""
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return ()
    if isinstance(raw, str) and raw.lstrip().startswith("["):
        try:
            raw = json.loads(raw)
        except ValueError as exc:
            raise ImageError(f"images: not a JSON list ({exc.msg})") from None
    if hasattr(raw, "tolist") and not isinstance(raw, bytes | bytearray):
        raw = raw.tolist()  # a parquet list cell read as a numpy array
    if isinstance(raw, Sequence) and not isinstance(raw, str | bytes | bytearray):
        return tuple(as_image_url(item, folder) for item in raw)
    return (as_image_url(raw, folder),)


def image_tokens(images: int, usage_prompt_tokens: int | None, text_tokens: int) -> int | None:
    """The prompt tokens the server counted beyond the text's own ``text_tokens`` (the
    workload tokenizer's count of the request's text, RequestSpec.prompt_tokens): the
    images' cost, with the chat template's few tokens in it. None without images or without
    the server's usage; never below 0."""
    if not images or usage_prompt_tokens is None:
        return None
    return max(0, usage_prompt_tokens - text_tokens)
