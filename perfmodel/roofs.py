"""The roofs a run is measured against: one lookup, for `bench run`, `bench roofline` and the
dashboards alike.

A roof pair is a peak FLOP/s (in one compute dtype) over a memory bandwidth, bytes/s, per GPU
(or for this CPU as a whole). Their ratio, the ridge point in FLOP/byte, separates memory-bound
from compute-bound work. Where they come from:

- a GPU: perfmodel.hardware's datasheet table, found by the name NVML reports; a near miss (an
  H100 NVL for an H100 SXM) finds nothing rather than borrowing another part's peaks;
- a CPU: `bench calibrate`'s measurement of this machine (perfmodel.calibration), used only when
  it was measured on a CPU of the same name (a quick one's source says so).

:class:`Roofs` is the one declaration of the roofs' fields; :meth:`Roofs.to_dict` is the dict
run.json's ``analytic.roofs`` and summary.json's ``attribution.roofs`` hold (keys ``name``,
``source``, ``compute_dtype``, ``flops_per_s``, ``bytes_per_s``, ``ridge_flop_per_byte``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from perfmodel import calibration
from perfmodel.files import JSONObject
from perfmodel.hardware import HardwareSpec, compute_dtype, find_by_nvml_name, spec_from_calibration

__all__ = ["Roofs", "find_roofs", "roofs_of", "table_roofs"]


@dataclass(frozen=True)
class Roofs:
    """Peak FLOP/s in ``compute_dtype`` and peak memory bytes/s of one device, per GPU.

    ``name`` is the device ("NVIDIA H100 80GB HBM3 SXM", or the CPU's model name), ``source``
    where the figures come from (the datasheet, or `bench calibrate` and when).
    """

    name: str
    source: str
    compute_dtype: str
    flops_per_s: float
    bytes_per_s: float

    def __post_init__(self) -> None:
        if not (self.flops_per_s > 0 and self.bytes_per_s > 0):
            raise ValueError(
                f"roofs of {self.name!r} must be positive: flops_per_s={self.flops_per_s}, "
                f"bytes_per_s={self.bytes_per_s}"
            )

    @property
    def ridge_flop_per_byte(self) -> float:
        """Arithmetic intensity where the memory roof meets the compute roof (FLOP/byte)."""
        return self.flops_per_s / self.bytes_per_s

    @property
    def label(self) -> str:
        """The device and the compute dtype, e.g. "NVIDIA A100 80GB bf16"."""
        return f"{self.name} {self.compute_dtype}".strip()

    def to_dict(self) -> JSONObject:
        """The roofs as run.json's ``analytic.roofs`` (module docstring)."""
        return {
            "name": self.name,
            "source": self.source,
            "compute_dtype": self.compute_dtype,
            "flops_per_s": self.flops_per_s,
            "bytes_per_s": self.bytes_per_s,
            "ridge_flop_per_byte": self.ridge_flop_per_byte,
        }

    @classmethod
    def from_dict(cls, data: object) -> Roofs | None:
        """The roofs a run folder recorded (:meth:`to_dict`'s keys), or None when ``data`` holds
        none: not a mapping, or a peak missing, not a finite positive number."""
        if not isinstance(data, Mapping):
            return None
        flops, moved = _positive(data.get("flops_per_s")), _positive(data.get("bytes_per_s"))
        if flops is None or moved is None:
            return None
        return cls(
            name=str(data.get("name") or ""),
            source=str(data.get("source") or ""),
            compute_dtype=str(data.get("compute_dtype") or ""),
            flops_per_s=flops,
            bytes_per_s=moved,
        )


def _positive(value: object) -> float | None:
    """``value`` as a float when it is a finite positive number (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) and number > 0 else None


def roofs_of(spec: HardwareSpec, dtype: str, source: str) -> Roofs:
    """``spec``'s roofs when computing in ``dtype`` (any spelling perfmodel.hardware knows).

    Raises ValueError naming the dtypes ``spec`` has a peak for.
    """
    return Roofs(
        name=spec.name,
        source=source,
        compute_dtype=compute_dtype(dtype),
        flops_per_s=spec.peak_for(dtype),
        bytes_per_s=spec.memory_bytes_per_s,
    )


def table_roofs(spec: HardwareSpec, dtype: str) -> Roofs:
    """:func:`roofs_of` a part of perfmodel.hardware's table, its datasheet named as source."""
    return roofs_of(spec, dtype, f"hardware table: {spec.source}")


def find_roofs(
    device: str,
    compute: str,
    gpu_names: list[str],
    cpu_name: str,
    calibration_path: Path | None = None,
) -> tuple[Roofs | None, str | None]:
    """The roofs of an engine on ``device`` ("cpu", "cuda", "cuda:N") computing in ``compute``.

    ``gpu_names`` are NVML's names of this host's GPUs (index order), ``cpu_name`` its CPU's
    model name; a CPU's roofs are read from the calibration at ``calibration_path`` (default:
    perfmodel.cache.calibration_path()). Returns (roofs, None), or (None, a sentence saying
    why there are none and what would give some).
    """
    if device.startswith("cuda"):
        index = int(device.partition(":")[2] or 0)
        if index >= len(gpu_names):
            return None, f"NVML lists no GPU {index}; no roofs"
        spec = find_by_nvml_name(gpu_names[index])
        if spec is None:
            return None, f"{gpu_names[index]} is not in perfmodel.hardware's table; no roofs"
        try:
            return table_roofs(spec, compute), None
        except ValueError as exc:
            return None, str(exc)
    saved, reason = calibration.for_cpu(cpu_name, calibration_path)
    if saved is None:
        return None, reason
    try:
        spec = spec_from_calibration(saved, "cpu")
        return roofs_of(spec, compute, calibration.source_of(saved)), None
    except ValueError as exc:
        return None, str(exc)
