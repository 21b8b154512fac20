"""The GPU the check uses, and whether it can: torch's reason where no CUDA device is usable,
the NVML device (or MIG instance) behind this process's ``cuda:0``, and what fits on it.

The check runs on ``cuda:0`` of this process, which CUDA_VISIBLE_DEVICES may map to any GPU
of the node, or to a MIG instance. NVML is scoped the way the probes scope an engine
(probes.gpu_scope): by this process's own compute context, else CUDA_VISIBLE_DEVICES' UUIDs,
never NVML's GPU 0 by assumption. A MIG instance's share of the SMs and memory scales the
roofs (results.figures.analytic.scale_to_slice, through the scope the engine runs are given),
and a line whose engine does not fit in the instance's memory is skipped with what it needs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import torch

from perfmodel.presets import get_preset
from probes.gpu_scope import GpuScopeError, ScopedGpu, resolve_scope

GIB = 2**30
# What an engine needs beyond its weights and KV cache: activations, the CUDA context and
# the allocator's slack, bytes (a round allowance, not a measurement).
ENGINE_OVERHEAD_BYTES = 4 * GIB


def no_cuda_reason() -> str | None:
    """Why this process has no usable CUDA device, in torch's own words, or None: the
    device is initialised and one tensor is allocated on it, which is what fails on a node
    whose torch wheel does not match its driver."""
    build = "a CPU build" if torch.version.cuda is None else f"CUDA {torch.version.cuda}"
    try:
        torch.cuda.init()
        torch.zeros(1, device="cuda:0")
    except Exception as exc:  # torch says why: no driver, too old a driver, a CPU build, ...
        return f"no usable CUDA device: {exc} (torch {torch.__version__}, {build})"
    return None


@dataclass(frozen=True)
class Target:
    """The device the lines run on: torch's name and memory for ``cuda:0`` (a MIG instance's
    own), and NVML's view of it (``gpu``: None where NVML could not say which it is;
    ``scope``: probes.gpu_scope's JSON, which the engine runs scale their roofs by)."""

    name: str
    memory_bytes: int
    gpu: ScopedGpu | None = None
    scope: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def mig(self) -> bool:
        return self.gpu is not None and self.gpu.mig is not None

    def fits(self, need_bytes: float, what: str) -> str | None:
        """None when ``need_bytes`` fit in the device's memory, else the reason to skip."""
        if need_bytes <= self.memory_bytes:
            return None
        where = "MIG instance" if self.mig else "GPU"
        return (
            f"{what} needs {need_bytes / GIB:.0f} GiB, the {where} has "
            f"{self.memory_bytes / GIB:.0f} GiB"
        )

    def kv_bytes(self, wanted: int) -> int:
        """A KV budget of ``wanted`` bytes, scaled to a MIG instance's share of the memory."""
        if self.gpu is None or self.gpu.mig is None:
            return wanted
        return int(wanted * self.gpu.mig.memory_fraction)


def engine_bytes(settings: dict[str, Any], weight_copies: int = 1) -> float:
    """What an engine of ``settings`` (a preset, a bf16/fp16 dtype) holds on the device, bytes:
    its weights ``weight_copies`` times, its KV budget and :data:`ENGINE_OVERHEAD_BYTES`."""
    config = get_preset(str(settings["model"]))
    width = 4 if settings.get("dtype") == "float32" else 2
    kv = int(settings.get("kv_cache_memory_bytes") or 0)
    return config.num_params() * width * weight_copies + kv + ENGINE_OVERHEAD_BYTES


def find_target(nvml: ModuleType | None = None, pid: int | None = None,
                visible: str | None = None) -> Target:  # fmt: skip
    """The Target of this process's ``cuda:0`` (a CUDA context must exist already, so that NVML
    lists this process on its device); ``nvml``, ``pid`` and ``visible`` default to pynvml,
    this process and its CUDA_VISIBLE_DEVICES (tests give a fake NVML)."""
    props = torch.cuda.get_device_properties(0)
    name, memory = str(props.name), int(props.total_memory)
    if nvml is None:
        try:
            import pynvml as nvml
        except ImportError as exc:
            return Target(name, memory, notes=[f"no NVML ({exc}): the GPU is not scoped"])
    return scoped_target(
        nvml,
        name,
        memory,
        os.getpid() if pid is None else pid,
        os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible,
    )


def scoped_target(nvml: ModuleType, name: str, memory: int, pid: int,
                  visible: str | None) -> Target:  # fmt: skip
    """The Target of a device torch calls ``name`` with ``memory`` bytes, NVML-scoped (module
    docstring) from an NVML module (pynvml's interface)."""
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        return Target(name, memory, notes=[f"NVML is unavailable ({exc}): the GPU is not scoped"])
    try:
        scope = resolve_scope(nvml, {pid}, visible or None)
    except GpuScopeError as exc:
        return Target(name, memory, notes=[f"NVML scope: {exc}"])
    finally:
        nvml.nvmlShutdown()
    if scope.how == "all" and len(scope.gpus) > 1:
        return Target(name, memory, scope=scope.to_json(), notes=[scope.reason])
    gpu = scope.gpus[0] if scope.gpus else None
    if gpu is not None and gpu.mig is not None:
        memory = min(memory, gpu.mig.memory_bytes)
    return Target(name, memory, gpu, scope.to_json(), [scope.reason, *scope.notes])
