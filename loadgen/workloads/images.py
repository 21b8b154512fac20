"""Synthetic images for a run's requests: how many each request sends, their sizes, their bytes.

A scenario's ``[images]`` table (bench.scenario.images_table) gives an :class:`ImageShape`:
``share`` of the requests carry images; each of those sends ``count`` of them (a length
distribution, loadgen.workloads.spec.LengthDist), each ``width`` x ``height`` pixels (length
distributions too), encoded as ``format`` (png or jpeg) and sent as a base64 ``data:`` URL.
Or, with ``urls``, each image is one of those URLs (drawn in turn by the seed), for a server
that fetches its images; the sizes are then the files' own.

The images are made with Pillow from the run's seed: a colour gradient with a few filled
shapes, a different picture for every image of the run, so that no server's image cache
(vLLM's multimodal processor cache keys images by their bytes) answers one from another; the
same seed makes the same bytes. Shapes compress as photographs do, roughly: a 256 x 256 PNG
is some kilobytes, not the 192 KiB of raw pixels that noise would make.
"""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from loadgen.request_images import IMAGE_FORMATS, data_url
from loadgen.request_spec import RequestSpec
from loadgen.workloads.spec import LengthDist

__all__ = ["ImageShape", "synthetic_image"]

# The images' sizes, pixels, when [images] gives none: a common vision encoder's input.
_DEFAULT_SIDE = LengthDist(kind="fixed", value=224)
_ONE = LengthDist(kind="fixed", value=1)
# Filled shapes a picture gets, at most.
_MAX_SHAPES = 6


def synthetic_image(width: int, height: int, fmt: str, rng: np.random.Generator) -> bytes:
    """One ``width`` x ``height`` picture encoded as ``fmt`` (module docstring), drawn from
    ``rng``."""
    from PIL import Image, ImageDraw  # only a run with images loads Pillow

    start, end = rng.integers(0, 256, size=(2, 3))
    ramp = np.linspace(0.0, 1.0, width, dtype=np.float64)[None, :, None]
    pixels = start + (end - start) * ramp  # a left-to-right gradient, every row alike
    image = Image.fromarray(np.broadcast_to(pixels, (height, width, 3)).astype(np.uint8))
    draw = ImageDraw.Draw(image)
    for _ in range(int(rng.integers(1, _MAX_SHAPES + 1))):
        x0, x1 = sorted(rng.integers(0, width, size=2).tolist())
        y0, y1 = sorted(rng.integers(0, height, size=2).tolist())
        colour = tuple(int(c) for c in rng.integers(0, 256, size=3))
        shape = draw.ellipse if rng.random() < 0.5 else draw.rectangle
        shape((x0, y0, x1, y1), fill=colour)
    out = io.BytesIO()
    image.save(out, format=fmt.upper())
    return out.getvalue()


@dataclass(frozen=True)
class ImageShape:
    """The images of a run's requests (module docstring). ``share``: the part of the requests
    that carry images, 0 < share <= 1; ``count``, ``width``, ``height``: distributions of the
    images a request sends and of their pixels; ``format``: one of :data:`IMAGE_FORMATS`;
    ``urls``: image URLs the server fetches, sent instead of synthetic images."""

    count: LengthDist = _ONE
    width: LengthDist = _DEFAULT_SIDE
    height: LengthDist = _DEFAULT_SIDE
    share: float = 1.0
    format: str = "png"
    urls: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        if not 0 < self.share <= 1:
            raise ValueError(f"share: expected a fraction in (0, 1], got {self.share!r}")
        if self.format not in IMAGE_FORMATS:
            raise ValueError(f"format: expected one of {list(IMAGE_FORMATS)}, got {self.format!r}")
        for url in self.urls:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"urls: expected http(s):// URLs, got {url[:60]!r}")

    def draw(self, n: int, seed: int) -> list[tuple[str, ...]]:
        """The images of each of ``n`` requests, in order, as image URLs (loadgen.request_images);
        () for a request without images. The same ``seed`` gives the same images."""
        rng = np.random.default_rng([seed, 0x1A6E])  # a stream of its own: lengths keep theirs
        carry = rng.random(n) < self.share
        counts = np.where(carry, self.count.sample(rng, n), 0)
        total = int(counts.sum())
        if self.urls:
            picks = rng.integers(0, len(self.urls), size=total)
            flat = [self.urls[int(i)] for i in picks]
        else:
            widths, heights = self.width.sample(rng, total), self.height.sample(rng, total)
            flat = [
                data_url(synthetic_image(int(w), int(h), self.format, rng))
                for w, h in zip(widths, heights, strict=True)
            ]
        out: list[tuple[str, ...]] = []
        at = 0
        for k in counts.tolist():
            out.append(tuple(flat[at : at + k]))
            at += k
        return out

    def apply(
        self, sessions: Sequence[Sequence[RequestSpec]], seed: int
    ) -> list[list[RequestSpec]]:
        """``sessions`` with every request that brings no images of its own (a dataset row's)
        carrying its drawn ones (:meth:`draw`, one draw per request in order)."""
        drawn = iter(self.draw(sum(len(s) for s in sessions), seed))
        out: list[list[RequestSpec]] = []
        for session in sessions:
            turns = [(spec, next(drawn)) for spec in session]
            out.append([
                spec if spec.images or not images else dataclasses.replace(spec, images=images)
                for spec, images in turns
            ])  # fmt: skip
        return out

    def to_dict(self) -> dict[str, Any]:
        """run.json's ``scenario.images``: the ``[images]`` table as it reads back."""
        data: dict[str, Any] = {"share": self.share, "count": self.count.to_dict()}
        if self.urls:
            data["urls"] = list(self.urls)
        else:
            data.update(width=self.width.to_dict(), height=self.height.to_dict(),
                        format=self.format)  # fmt: skip
        return data
