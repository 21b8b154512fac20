"""The scenario's ``[images]`` table: the images the requests send beside their text.

::

    [images]
    share = 0.5                  # the part of the requests that carry images (default 1)
    format = "png"               # png | jpeg: how synthetic images are encoded
    count = { kind = "uniform", low = 1, high = 3 }   # images per request (default: 1)
    width = { kind = "fixed", value = 320 }            # pixels (default: 224)
    height = { kind = "normal", mean = 240, std = 40, min = 64, max = 480 }
    # urls = ["http://images.local/cat.png"]  # sent instead, for a server that fetches them

``count``, ``width`` and ``height`` are length distributions, written as ``[input_len]`` is
(loadgen.workloads.spec.LengthDist). The images are made with Pillow from the scenario's seed
(loadgen.workloads.images) and sent as base64 ``data:`` URLs in the last user turn, in each
chat API's own form (loadgen.client.image_bodies); with ``urls`` each image is one of them,
and ``width``, ``height`` and ``format`` are not taken. Only the chat APIs (``api`` chat,
responses, messages) take images; a dataset row's own images (its ``images`` column) win over
the table.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench.scenario.toml_table import Table
from loadgen.request_images import IMAGE_FORMATS
from loadgen.workloads.images import ImageShape
from results.schema.api_kinds import CHAT_APIS

__all__ = ["read_images"]


def read_images(
    table: Table, api: str, read_length: Callable[[Table, str], Any]
) -> ImageShape | None:
    """The ``[images]`` table (module docstring), or None when absent; ``read_length`` reads
    its ``count``, ``width`` and ``height`` as length tables."""
    sub = table.table("images")
    if sub is None:
        return None
    values: dict[str, Any] = {"share": sub.get("share", float, 1.0)}
    if (count := read_length(sub, "count")) is not None:
        values["count"] = count
    urls = sub.get("urls", list, None)
    if urls is None:
        values["format"] = sub.choice("format", IMAGE_FORMATS, "png")
        for side in ("width", "height"):
            if (length := read_length(sub, side)) is not None:
                values[side] = length
    else:
        sub.check("urls", bool(urls) and all(isinstance(u, str) for u in urls),
                  "expected a non-empty list of image URLs", urls)  # fmt: skip
        values["urls"] = tuple(urls)
    sub.finish("(with urls, the images are the files' own: no width, height or format)"
               if urls is not None else "")  # fmt: skip
    if api not in CHAT_APIS:
        raise table.error("images", f"only api {sorted(CHAT_APIS)} takes images, not {api!r}")
    try:
        return ImageShape(**values)
    except ValueError as exc:
        name, _, problem = str(exc).partition(": ")
        raise sub.error(name, problem) from None
