"""Which GPUs a run measures: the engine's, found by NVML UUID, never by assuming index = index.

In order, the first that answers:
1. **engine processes**: the GPUs (or MIG instances) on which NVML lists a compute process of
   the engine's process tree (``nvmlDeviceGetComputeRunningProcesses``, every device);
2. **CUDA_VISIBLE_DEVICES** of the engine (read from its environment, else the one bench gave
   the engine it launched): ``GPU-``/``MIG-`` UUIDs (or unique prefixes, as CUDA takes them)
   matched to NVML's; plain indices only when ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` or every GPU is
   the same part, since CUDA's default order (fastest first) need not be NVML's (PCI bus order);
3. **--gpus**: NVML indices or UUIDs, as the user gave them;
4. **all** GPUs of the host, said plainly with why (a ``--url`` engine whose processes cannot be
   seen, an engine on the CPU).
The order of the result is the engine's CUDA order where CUDA_VISIBLE_DEVICES gives it, so that
the engine's ``cuda:N`` is entry N.

A GPU in MIG mode is measured per instance where the engine runs on one: its share of the SMs
(the instance's SM count over the full GPU profile's) and of the memory scale the roofs, and
NVML's device readings (power, energy, clocks) stay whole-GPU.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import asdict, dataclass, field
from types import ModuleType
from typing import Any

import psutil

from perfmodel.files import JSONObject

MIB = 2**20
NOT_ON_AN_INSTANCE = 0xFFFFFFFF  # NVML's gpuInstanceId of a process outside MIG


class GpuScopeError(ValueError):
    """A --gpus or CUDA_VISIBLE_DEVICES entry that names no GPU here; the message names it."""


@dataclass(frozen=True)
class MigSlice:
    """One MIG instance: its UUID, GPU instance id, SMs and memory, and its shares of the GPU."""

    uuid: str
    gpu_instance_id: int
    sm_count: int
    memory_bytes: int
    compute_fraction: float  # sm_count / the full GPU profile's SM count
    memory_fraction: float  # memory_bytes / the GPU's total


@dataclass(frozen=True)
class ScopedGpu:
    """One GPU of the scope: the physical device (NVML index, UUID, name, NVML's total memory in
    bytes) and, for a MIG instance, the slice."""

    index: int
    uuid: str
    name: str
    memory_total_bytes: int
    mig: MigSlice | None = None


@dataclass(frozen=True)
class GpuProcess:
    """A compute process NVML lists on a GPU (``gpu``: NVML index)."""

    gpu: int
    pid: int
    used_bytes: int
    gpu_instance_id: int | None


@dataclass
class GpuScope:
    """The GPUs a run measures, how they were found (``how``: "engine processes",
    "CUDA_VISIBLE_DEVICES", "--gpus" or "all") and why, in one sentence (``reason``)."""

    gpus: list[ScopedGpu]
    how: str
    reason: str
    notes: list[str] = field(default_factory=list)

    @property
    def indices(self) -> list[int]:
        return sorted({g.index for g in self.gpus})

    def to_json(self) -> JSONObject:
        """run.json's probes.samplers.nvml.scope."""
        return {"how": self.how, "reason": self.reason, "notes": list(self.notes),
                "gpus": [asdict(g) for g in self.gpus]}  # fmt: skip


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass
class _Device:
    index: int
    handle: Any
    uuid: str
    name: str
    total: int
    migs: list[tuple[Any, MigSlice]]
    processes: list[GpuProcess]

    def whole(self) -> ScopedGpu:
        return ScopedGpu(self.index, self.uuid, self.name, self.total)

    def on(self, mig: MigSlice) -> ScopedGpu:
        return ScopedGpu(self.index, self.uuid, self.name, self.total, mig)


def _migs(nvml: ModuleType, handle: Any, total: int) -> list[tuple[Any, MigSlice]]:
    try:
        current, _ = nvml.nvmlDeviceGetMigMode(handle)
    except nvml.NVMLError:  # a part without MIG answers NotSupported
        return []
    if current != nvml.NVML_DEVICE_MIG_ENABLE:
        return []
    try:
        full = nvml.nvmlDeviceGetGpuInstanceProfileInfo(
            handle, nvml.NVML_GPU_INSTANCE_PROFILE_7_SLICE
        )
        full_sms = int(full.multiprocessorCount)
    except nvml.NVMLError:
        return []  # the instances cannot be sized: the GPU is measured whole
    out = []
    for i in range(nvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
        try:
            mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, i)
            attrs = nvml.nvmlDeviceGetAttributes(mig)
            uuid = _text(nvml.nvmlDeviceGetUUID(mig))
            instance = int(nvml.nvmlDeviceGetGpuInstanceId(mig))
        except nvml.NVMLError:  # an empty slot
            continue
        sms, memory = int(attrs.multiprocessorCount), int(attrs.memorySizeMB) * MIB
        out.append((mig, MigSlice(uuid, instance, sms, memory, sms / full_sms, memory / total)))
    return out


def running_processes(nvml: ModuleType, handle: Any, index: int) -> list[GpuProcess]:
    """The compute processes NVML lists on one GPU ([] when it cannot list them)."""
    try:
        infos = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
    except nvml.NVMLError:
        return []
    return [
        GpuProcess(
            index, int(p.pid), int(p.usedGpuMemory or 0),
            None if p.gpuInstanceId == NOT_ON_AN_INSTANCE else int(p.gpuInstanceId),
        )
        for p in infos
    ]  # fmt: skip


def _devices(nvml: ModuleType) -> list[_Device]:
    devices = []
    for index in range(nvml.nvmlDeviceGetCount()):
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        total = int(nvml.nvmlDeviceGetMemoryInfo(handle).total)
        devices.append(_Device(
            index, handle, _text(nvml.nvmlDeviceGetUUID(handle)),
            _text(nvml.nvmlDeviceGetName(handle)), total, _migs(nvml, handle, total),
            running_processes(nvml, handle, index),
        ))  # fmt: skip
    return devices


def _by_entry(devices: Sequence[_Device], entry: str, indices_are_nvml: bool) -> ScopedGpu:
    """The GPU ``entry`` names: a UUID (or unique prefix) of a GPU or MIG instance, or an index."""
    if entry.isdigit():
        if not indices_are_nvml:
            raise GpuScopeError(
                f"index {entry} cannot be matched to NVML: CUDA's default order (fastest first) "
                "need not be NVML's; use GPU UUIDs or set CUDA_DEVICE_ORDER=PCI_BUS_ID"
            )
        if int(entry) >= len(devices):
            raise GpuScopeError(f"GPU {entry}: this host has {len(devices)} GPUs (0..)")
        return devices[int(entry)].whole()
    found = [d.whole() for d in devices if d.uuid.startswith(entry)]
    found += [d.on(m) for d in devices for _, m in d.migs if m.uuid.startswith(entry)]
    if len(found) != 1:
        what = "no GPU or MIG instance" if not found else f"{len(found)} GPUs"
        raise GpuScopeError(f"{entry!r} names {what} here; give a GPU- or MIG- UUID or an index")
    return found[0]


def parse_entries(text: str) -> list[str]:
    """The comma-separated entries of CUDA_VISIBLE_DEVICES or --gpus, stripped."""
    return [e.strip() for e in text.split(",") if e.strip()]


def _from_processes(devices: Sequence[_Device], pids: Collection[int]) -> list[ScopedGpu]:
    out: list[ScopedGpu] = []
    for d in devices:
        mine = [p for p in d.processes if p.pid in pids]
        slices = {m.gpu_instance_id: m for _, m in d.migs}
        on_slices = [slices[p.gpu_instance_id] for p in mine if p.gpu_instance_id in slices]
        if on_slices:
            out.extend(d.on(m) for m in dict.fromkeys(on_slices))
        elif mine:
            out.append(d.whole())
    return out


def resolve_scope(
    nvml: ModuleType,
    engine_pids: Collection[int] = (),
    cuda_visible_devices: str | None = None,
    gpus: str | None = None,
    cuda_device_order: str | None = None,
) -> GpuScope:
    """The run's GPUs (module docstring), from an initialised NVML module (pynvml's interface).

    Raises GpuScopeError when ``gpus`` (the user's --gpus) names no GPU here."""
    devices = _devices(nvml)
    all_same = len({d.name for d in devices}) <= 1
    notes: list[str] = []
    found = _from_processes(devices, set(engine_pids))
    pci = (cuda_device_order or "").upper() == "PCI_BUS_ID" or all_same
    if found and cuda_visible_devices:
        try:  # the engine's CUDA order, where its CUDA_VISIBLE_DEVICES names these same GPUs
            ordered = [_by_entry(devices, e, pci) for e in parse_entries(cuda_visible_devices)]
        except GpuScopeError:
            ordered = []
        if set(ordered) == set(found):
            found = ordered
    if found:
        if gpus:
            notes.append(f"--gpus {gpus} not used: the engine's processes were found on GPUs")
        return GpuScope(found, "engine processes",
                        f"NVML lists the engine's processes on {_names(found)}", notes)  # fmt: skip
    if cuda_visible_devices is not None:
        entries = parse_entries(cuda_visible_devices)
        try:
            found = [_by_entry(devices, e, pci) for e in entries]
        except GpuScopeError as e:
            notes.append(f"CUDA_VISIBLE_DEVICES={cuda_visible_devices}: {e}")
        else:
            if found and any(e.isdigit() for e in entries) and not cuda_device_order:
                notes.append(
                    "CUDA_VISIBLE_DEVICES indices read in PCI order: the GPUs are one part"
                )
            return GpuScope(found, "CUDA_VISIBLE_DEVICES",
                            f"CUDA_VISIBLE_DEVICES={cuda_visible_devices} is {_names(found)}",
                            notes)  # fmt: skip
    if gpus:
        found = [_by_entry(devices, e, True) for e in parse_entries(gpus)]
        return GpuScope(found, "--gpus", f"--gpus {gpus} is {_names(found)}", notes)
    everything = [d.whole() for d in devices]
    return GpuScope(everything, "all", (
        f"every GPU of this host is sampled ({len(devices)}): no engine process was seen on a GPU "
        "and neither CUDA_VISIBLE_DEVICES nor --gpus names its GPUs; figures over GPUs include "
        "any the engine does not use (give --gpus)"
    ), notes)  # fmt: skip


def _names(gpus: Sequence[ScopedGpu]) -> str:
    parts = [
        f"GPU {g.index}" + (f" MIG {g.mig.gpu_instance_id}" if g.mig else "") + f" ({g.uuid})"
        for g in gpus
    ]
    return ", ".join(parts) if parts else "no GPU"


def local_memory_total(nvml_names: Collection[str], nvml: ModuleType | None = None) -> int | None:
    """NVML's total memory (bytes) of this host's first GPU named one of ``nvml_names``, or
    None without NVML, a driver or such a GPU (then the hardware table's size stands)."""
    if nvml is None:
        try:
            import pynvml as nvml
        except ImportError:
            return None
    wanted = {n.lower() for n in nvml_names}
    try:
        nvml.nvmlInit()
    except nvml.NVMLError:
        return None
    try:
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            if _text(nvml.nvmlDeviceGetName(handle)).lower() in wanted:
                return int(nvml.nvmlDeviceGetMemoryInfo(handle).total)
        return None
    except nvml.NVMLError:
        return None
    finally:
        nvml.nvmlShutdown()


def process_tree(root: int | None) -> set[int]:
    """``root`` and every descendant of it that can be seen ({} without a root)."""
    if root is None:
        return set()
    try:
        proc = psutil.Process(root)
        return {root, *(c.pid for c in proc.children(recursive=True))}
    except psutil.Error:
        return {root}


def engine_environment(root: int | None, name: str) -> str | None:
    """The variable ``name`` in the environment of process ``root``, when it can be read."""
    if root is None:
        return None
    try:
        return psutil.Process(root).environ().get(name)
    except (psutil.Error, OSError):
        return None


def process_name(nvml: ModuleType, pid: int) -> str:
    """A process's name: NVML's first (its pids may be the host's, which in a container name
    another process or none), else psutil's, else "?"."""
    try:
        return _text(nvml.nvmlSystemGetProcessName(pid))
    except nvml.NVMLError:
        pass
    try:
        return psutil.Process(pid).name()
    except psutil.Error:
        return "?"
