"""What fraction of its datasheet peaks a part reaches, and how fast its GPUs talk to each other.

The roofline's peaks (perfmodel.hardware) are never reached; a simulated device runs at *achieved*
rates = peak x efficiency, and every efficiency here is a published measurement with its source,
never a guess. A part without a published figure gets none (``None``): the simulator then uses the
datasheet peak and says so, which makes its prediction an optimistic bound for that part.

- compute: the Maximum Achievable Matmul FLOPS (MAMF, best BF16 GEMM over many shapes) divided
  by the dense datasheet peak, from Stas Bekman's ml-engineering handbook.
- memory: a measured streaming-read bandwidth divided by the datasheet bandwidth.
- interconnect: the per-direction link rate of one GPU (datasheet) and the NCCL ring bus
  bandwidth measured on it; :func:`allreduce_time_s` turns them into the time of one all-reduce
  with NCCL's own cost model (latency per protocol + bytes / bandwidth).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

from perfmodel.files import JSONObject

GB = 1e9

_MAMF = (
    "S. Bekman, ml-engineering, compute/accelerator/README.md, 'Maximum Achievable Matmul FLOPS "
    "comparison table' (BF16 matmul, no sparsity)"
)
_A100_BW = (
    "NVIDIA developer forums, 'Trouble to Reach Peak Bandwidth of A100' (A100 80GB SXM read "
    "kernel: 1.80 of 2.04 TB/s, 88% per Nsight Compute; the thread cites ~90% as the best seen)"
)
_NCCL_MODEL = (
    "NCCL's tuning model, src/graph/tuning.cc (NVIDIA/nccl 5067397): ring all-reduce latency = "
    "base + 2(n-1) x per-hop latency, per protocol (LL, LL128, Simple)"
)


@dataclass(frozen=True)
class Efficiency:
    """Achieved / peak for compute and memory (None: no published measurement), with sources."""

    compute: float | None
    compute_source: str
    memory: float | None
    memory_source: str

    def to_dict(self) -> JSONObject:
        return asdict(self)


@dataclass(frozen=True)
class Interconnect:
    """One GPU's link to its peers: ``bytes_per_s`` per direction (datasheet) and the fraction
    of it NCCL's ring all-reduce reaches as bus bandwidth (None: not measured; line rate used)."""

    name: str
    kind: Literal["nvlink", "pcie", "xgmi"]
    bytes_per_s: float
    source: str
    busbw_efficiency: float | None = None
    busbw_source: str = "no published all-reduce measurement: the line rate is used"

    @property
    def bus_bytes_per_s(self) -> float:
        """The all-reduce bus bandwidth this link sustains (bytes/s)."""
        return self.bytes_per_s * (self.busbw_efficiency or 1.0)

    def to_dict(self) -> JSONObject:
        return {**asdict(self), "bus_bytes_per_s": self.bus_bytes_per_s}


_NONE = "no published measurement: the datasheet peak is used (an optimistic bound)"

EFFICIENCY: dict[str, Efficiency] = {
    # A100 SXM: MAMF 267.9 of 312 TFLOPS (CUDA 12.1).
    "a100-80gb-sxm": Efficiency(267.9 / 312, f"{_MAMF}: A100 SXM 267.9 of 312", 0.88, _A100_BW),
    "a100-40gb-sxm": Efficiency(267.9 / 312, f"{_MAMF}: A100 SXM 267.9 of 312", None, _NONE),
    # A100 PCIe: MAMF 256.4 of 312 TFLOPS.
    "a100-80gb-pcie": Efficiency(256.4 / 312, f"{_MAMF}: A100 PCIe 256.4 of 312", None, _NONE),
    "a100-40gb-pcie": Efficiency(256.4 / 312, f"{_MAMF}: A100 PCIe 256.4 of 312", None, _NONE),
    # H100 SXM: MAMF 792.1 of 989 TFLOPS.
    "h100-sxm": Efficiency(792.1 / 989, f"{_MAMF}: H100 SXM 792.1 of 989", None, _NONE),
    # H200: the H100's die with HBM3e, as in the GH200, whose MAMF is 821.0 of 989 TFLOPS.
    "h200": Efficiency(821.0 / 989, f"{_MAMF}: GH200 (same die and HBM3e) 821.0 of 989", None,
                       _NONE),
    # MI300X: MAMF 781.9 TFLOPS (ROCm 6.2) of the datasheet's 1,307.4.
    "mi300x": Efficiency(781.9 / 1307.4, f"{_MAMF}: MI300X 781.9 (ROCm 6.2)", None, _NONE),
}  # fmt: skip

_A100_NVLINK = "NVIDIA A100 datasheet: NVLink 600 GB/s per GPU (bidirectional), 300 per direction"
_H100_NVLINK = "NVIDIA H100 datasheet: NVLink 900 GB/s per GPU (bidirectional), 450 per direction"
_A100_RING = (
    "NVIDIA/nccl-tests issue #149: all_reduce_perf on 8x A100-SXM4-80GB (NVSwitch) reaches a "
    "bus bandwidth of ~200 GB/s"
)
_H100_RING = (
    "NVIDIA/nccl issue #1455 (ring busbw 365-370 GB/s on 2..8 H100 SXM, ~80% of 450) and the NCCL "
    "maintainer in NVIDIA/nccl-tests #212 ('effective NVLink bandwidth of 370GB/s')"
)
_PCIE4 = "PCIe Gen4 x16: 64 GB/s bidirectional, 32 per direction (the part's datasheet)"
_PCIE5 = "PCIe Gen5 x16: 128 GB/s bidirectional, 64 per direction (the part's datasheet)"

_NVLINK3 = Interconnect("NVLink 3", "nvlink", 300 * GB, _A100_NVLINK, 200 / 300, _A100_RING)
_NVLINK4 = Interconnect("NVLink 4", "nvlink", 450 * GB, _H100_NVLINK, 370 / 450, _H100_RING)
_GEN4 = Interconnect("PCIe Gen4 x16", "pcie", 32 * GB, _PCIE4)

INTERCONNECT: dict[str, Interconnect] = {
    "a100-80gb-sxm": _NVLINK3,
    "a100-40gb-sxm": _NVLINK3,
    "a100-80gb-pcie": _GEN4,
    "a100-40gb-pcie": _GEN4,
    "h100-sxm": _NVLINK4,
    "h200": _NVLINK4,
    "h100-pcie": Interconnect("PCIe Gen5 x16", "pcie", 64 * GB, _PCIE5),
    "l40s": _GEN4,
    "l4": _GEN4,
    "a10g": _GEN4,
    "rtx-4090": _GEN4,
    "mi300x": Interconnect(
        "Infinity Fabric", "xgmi", 448 * GB,
        "AMD Instinct MI300X datasheet: 896 GB/s aggregate Infinity Fabric (448 per direction)",
    ),
}  # fmt: skip


def efficiency_for(gpu_key: str) -> Efficiency:
    """The published efficiencies of the part ``gpu_key`` (perfmodel.hardware key); unknown parts
    get none, which the caller reports."""
    return EFFICIENCY.get(gpu_key, Efficiency(None, _NONE, None, _NONE))


def interconnect_for(gpu_key: str) -> Interconnect | None:
    """The part's GPU-to-GPU link, or None when the table has none (tensor parallelism then
    cannot be simulated for it)."""
    return INTERCONNECT.get(gpu_key)


# NCCL's constants (module docstring): base latency per protocol (us), per-hop latency per
# protocol and link kind (us), and the share of the bus bandwidth each protocol carries (LL
# sends a flag with every 8 bytes, LL128 one per 128 bytes).
_PROTOCOLS = ("LL", "LL128", "Simple")
_BASE_LATENCY_US = {"LL": 6.6, "LL128": 14.0, "Simple": 8.4}
_HOP_LATENCY_US = {
    "nvlink": {"LL": 0.6, "LL128": 1.9, "Simple": 3.4},
    "pcie": {"LL": 1.0, "LL128": 2.5, "Simple": 5.7},
    "xgmi": {"LL": 1.0, "LL128": 2.5, "Simple": 5.7},  # NCCL/RCCL treat it as a PCI-class link
}
_BANDWIDTH_SHARE = {"LL": 0.5, "LL128": 0.92, "Simple": 1.0}


def allreduce_time_s(num_bytes: float, num_gpus: int, link: Interconnect) -> float:
    """Seconds of one ring all-reduce of ``num_bytes`` (each GPU's buffer) over ``num_gpus``.

    As NCCL's tuner picks it: the fastest protocol of latency + bytes moved / bus bandwidth,
    where a ring moves 2(n-1)/n of the buffer through each GPU's link. One GPU: no time.
    """
    if num_gpus <= 1 or num_bytes <= 0:
        return 0.0
    hops = 2 * (num_gpus - 1)
    moved = num_bytes * hops / num_gpus
    best = float("inf")
    for proto in _PROTOCOLS:
        latency_s = (_BASE_LATENCY_US[proto] + hops * _HOP_LATENCY_US[link.kind][proto]) * 1e-6
        best = min(best, latency_s + moved / (link.bus_bytes_per_s * _BANDWIDTH_SHARE[proto]))
    return best


def allreduce_source() -> str:
    """Where :func:`allreduce_time_s`'s constants come from."""
    return _NCCL_MODEL
