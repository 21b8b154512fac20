"""Peak compute and memory figures of accelerators, each with its source.

Every FLOP/s figure is the dense tensor-core peak (no 2:4 sparsity) at the boost clock, as the
vendor's datasheet states it; ``fp32`` is the plain (CUDA-core) FP32 peak, what a float32 matmul
gets when TF32 is off (torch's default), and ``tf32`` the TF32 tensor-core peak. Sparse figures,
which datasheets print first, are exactly twice these. A dtype missing from ``peak_flops_per_s``
has no path on that part (the A100 has no FP8). Memory bandwidth is the datasheet's (decimal:
1 GB/s = 1e9 bytes/s).

Memory size is what NVML reports (``nvmlDeviceGetMemoryInfo(...).total``, nvidia-smi's MiB),
in exact bytes, not the datasheet's GB x 1e9: an H100 80GB reports 81,559 MiB = 85.52e9 B, an
H200 143,771 MiB = 150.75e9 B, and capacity figures computed from the datasheet's 80e9 would be
~7% short. A part whose NVML total is not recorded here keeps its datasheet GB x 1e9 and says
so in ``memory_source``; on a host with the GPU, NVML's own reading replaces the table's
(perfmodel.capacity's callers pass it).

The roofline's ridge point is ``peak_flops_per_s[dtype] / memory_bytes_per_s`` in FLOP/byte: an
A100 in BF16 with 2.0 TB/s gives 312e12 / 2.0e12 = 156 (docs/ARCHITECTURE.md).

A CPU has no datasheet peak worth using; `bench calibrate` measures this machine's matmul FLOP/s
and stream-triad bandwidth instead (perfmodel.calibration), and :func:`spec_from_calibration` turns
that measurement into a :class:`HardwareSpec` whose roofs are achieved, not nominal.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from perfmodel.files import JSONObject, JSONView

TERA = 1e12
GB = 1e9
MIB = 2**20

# Compute dtypes the table knows, and the spellings that map to them.
COMPUTE_DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8")
_DTYPE_ALIASES = {
    "float32": "fp32",
    "fp32": "fp32",
    "tf32": "tf32",
    "tensorfloat32": "tf32",
    "bfloat16": "bf16",
    "bf16": "bf16",
    "float16": "fp16",
    "fp16": "fp16",
    "half": "fp16",
    "fp8": "fp8",
    "fp8_e4m3": "fp8",
    "fp8_e5m2": "fp8",
    "float8_e4m3fn": "fp8",
    "int8": "int8",
}


def compute_dtype(name: str) -> str:
    """The table's key for a compute dtype name (``bfloat16`` -> ``bf16``); ValueError if none."""
    try:
        return _DTYPE_ALIASES[name.lower()]
    except KeyError:
        raise ValueError(
            f"unknown compute dtype {name!r}; known: {', '.join(sorted(_DTYPE_ALIASES))}"
        ) from None


@dataclass(frozen=True)
class HardwareSpec:
    """One accelerator (or this CPU, calibrated): peaks per compute dtype, memory, provenance.

    ``peak_flops_per_s`` maps a compute dtype (see COMPUTE_DTYPES) to FLOP/s (or OP/s for int8);
    ``memory_bytes_per_s`` is the memory bandwidth and ``memory_bytes`` the memory size in
    bytes, NVML's total where ``memory_source`` says "nvml" (module docstring).
    ``nvml_names`` are the names NVML reports for it (nvmlDeviceGetName).
    """

    key: str
    name: str
    peak_flops_per_s: Mapping[str, float]
    memory_bytes_per_s: float
    memory_bytes: float
    source: str
    nvml_names: tuple[str, ...] = ()
    aliases: tuple[str, ...] = field(default=())
    memory_source: str = "datasheet"

    def peak_for(self, dtype: str) -> float:
        """Peak FLOP/s for compute dtype ``dtype``; ValueError naming the dtypes it has."""
        key = compute_dtype(dtype)
        if key not in self.peak_flops_per_s:
            raise ValueError(
                f"{self.name} has no {key} peak in the hardware table; it has "
                f"{', '.join(self.peak_flops_per_s)}"
            )
        return self.peak_flops_per_s[key]

    def ridge_flop_per_byte(self, dtype: str) -> float:
        """Arithmetic intensity (FLOP/byte) above which a kernel is compute-bound."""
        return ridge_point(self.peak_for(dtype), self.memory_bytes_per_s)

    def to_dict(self) -> JSONObject:
        return {
            "key": self.key,
            "name": self.name,
            "peak_flops_per_s": dict(self.peak_flops_per_s),
            "memory_bytes_per_s": self.memory_bytes_per_s,
            "memory_bytes": self.memory_bytes,
            "memory_source": self.memory_source,
            "source": self.source,
        }


def ridge_point(peak_flops_per_s: float, memory_bytes_per_s: float) -> float:
    """The roofline's ridge: peak FLOP/s / bandwidth, in FLOP/byte."""
    if peak_flops_per_s <= 0 or memory_bytes_per_s <= 0:
        raise ValueError(
            f"peaks must be positive, got {peak_flops_per_s} FLOP/s, {memory_bytes_per_s} B/s"
        )
    return peak_flops_per_s / memory_bytes_per_s


def _spec(
    key: str,
    name: str,
    flops_tera: Mapping[str, float],
    bandwidth_gb_s: float,
    memory: tuple[str, float],
    source: str,
    nvml_names: tuple[str, ...] = (),
    aliases: tuple[str, ...] = (),
) -> HardwareSpec:
    """``memory``: ("nvml" or "datasheet", its size in bytes): NVML's total, or the datasheet's
    GB x 1e9 where NVML's is not recorded."""
    kind, amount = memory
    return HardwareSpec(
        key=key,
        name=name,
        peak_flops_per_s={k: v * TERA for k, v in flops_tera.items()},
        memory_bytes_per_s=bandwidth_gb_s * GB,
        memory_bytes=float(amount),
        source=source,
        nvml_names=nvml_names,
        aliases=aliases,
        memory_source=kind,
    )


_A100_DATASHEET = "NVIDIA A100 Tensor Core GPU datasheet (nvidia-a100-datasheet-1758950-r4)"
_A100 = {"fp32": 19.5, "tf32": 156, "bf16": 312, "fp16": 312, "int8": 624}
_H100_DATASHEET = "NVIDIA H100 Tensor Core GPU datasheet (h100-datasheet-2430615, 2023)"
_H200_DATASHEET = "NVIDIA H200 Tensor Core GPU datasheet (2024)"
# Hopper SXM tensor cores (H100 SXM, H200 SXM, GH200): 494.7 TF32, 989.4 BF16/FP16, 1,978.9 FP8
# and INT8 dense; 67 FP32.
_HOPPER_SXM = {
    "fp32": 67,
    "tf32": 494.7,
    "bf16": 989.4,
    "fp16": 989.4,
    "fp8": 1978.9,
    "int8": 1978.9,
}
# Hopper NVL (H100 NVL, H200 NVL; their datasheets' sparse 835 / 1,671 / 3,341 halved): 60 FP32.
_HOPPER_NVL = {
    "fp32": 60,
    "tf32": 417.5,
    "bf16": 835.5,
    "fp16": 835.5,
    "fp8": 1670.5,
    "int8": 1670.5,
}
_ADA_WHITEPAPER = "NVIDIA Ada GPU Architecture whitepaper v2.1, appendix A (RTX 4090)"
# NVML totals as nvidia-smi prints them (MiB), from hosts' published nvidia-smi output: A100
# 40960 / 81920, H100 SXM and PCIe 81559, A10G 23028, L40S 46068, L4 23034 (modal-client PR
# #2797's table); H200 143771 (published nvidia-smi tables); H100 NVL 99,961,274,368 B (NVML's
# total in fastfetch issue #1658).
_NVML = "nvml"

GPUS: tuple[HardwareSpec, ...] = (
    # A100 SXM4/PCIe: 312 TFLOPS BF16/FP16, 156 TF32 and 624 TOPS INT8 dense; no FP8 units.
    _spec("a100-40gb-sxm", "NVIDIA A100 40GB SXM", _A100, 1555, (_NVML, 40960 * MIB),
          _A100_DATASHEET, ("NVIDIA A100-SXM4-40GB",), ("a100-40gb", "a100-sxm4-40gb")),
    _spec("a100-80gb-sxm", "NVIDIA A100 80GB SXM", _A100, 2039, (_NVML, 81920 * MIB),
          _A100_DATASHEET, ("NVIDIA A100-SXM4-80GB",), ("a100-80gb", "a100", "a100-sxm4-80gb")),
    _spec("a100-40gb-pcie", "NVIDIA A100 40GB PCIe", _A100, 1555, (_NVML, 40960 * MIB),
          _A100_DATASHEET, ("NVIDIA A100-PCIE-40GB",), ("a100-pcie-40gb",)),
    _spec("a100-80gb-pcie", "NVIDIA A100 80GB PCIe", _A100, 1935, (_NVML, 81920 * MIB),
          _A100_DATASHEET, ("NVIDIA A100 80GB PCIe", "NVIDIA A100-PCIE-80GB"),
          ("a100-pcie-80gb",)),
    # H100 SXM5: HBM3 3.35 TB/s, 80 GB.
    _spec("h100-sxm", "NVIDIA H100 SXM", _HOPPER_SXM, 3350, (_NVML, 81559 * MIB), _H100_DATASHEET,
          ("NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM5 80GB"), ("h100", "h100-80gb", "h100-sxm5")),
    # H100 PCIe: 378 TF32, 756 BF16/FP16, 1,513 FP8 and INT8 dense, 51 FP32; HBM2e 2.0 TB/s.
    _spec("h100-pcie", "NVIDIA H100 PCIe", {"fp32": 51, "tf32": 378, "bf16": 756, "fp16": 756,
          "fp8": 1513, "int8": 1513}, 2000, (_NVML, 81559 * MIB), _H100_DATASHEET,
          ("NVIDIA H100 PCIe",), ("h100-pcie-80gb",)),
    # H100 NVL: HBM3 3.9 TB/s, 94 GB.
    _spec("h100-nvl", "NVIDIA H100 NVL", _HOPPER_NVL, 3900, (_NVML, 99961274368), _H100_DATASHEET,
          ("NVIDIA H100 NVL",), ("h100-nvl-94gb",)),
    # H200 SXM: same tensor cores as H100 SXM; HBM3e 4.8 TB/s, 141 GB.
    _spec("h200", "NVIDIA H200 SXM", _HOPPER_SXM, 4800, (_NVML, 143771 * MIB), _H200_DATASHEET,
          ("NVIDIA H200",), ("h200-sxm", "h200-141gb")),
    # H200 NVL: 141 GB HBM3e at 4.8 TB/s, NVL clocks (600 W). Its NVML total is not recorded
    # here: the datasheet's 141 GB until NVML reads the part.
    _spec("h200-nvl", "NVIDIA H200 NVL", _HOPPER_NVL, 4800, ("datasheet", 141 * GB),
          _H200_DATASHEET, ("NVIDIA H200 NVL",), ("h200-nvl-141gb",)),
    # GH200 (Grace Hopper, the 96 GB HBM3 part NVML names "GH200 480GB"): H100 SXM's tensor
    # cores, 4 TB/s. The GPU's NVML total is not recorded here: the datasheet's 96 GB.
    _spec("gh200", "NVIDIA GH200 96GB", _HOPPER_SXM, 4000, ("datasheet", 96 * GB),
          "NVIDIA GH200 Grace Hopper Superchip datasheet (2024)", ("NVIDIA GH200 480GB",),
          ("gh200-96gb", "gh200-480gb")),
    # L40S: 91.6 FP32, 183 TF32, 362.05 BF16/FP16, 733 FP8 and INT8 dense; GDDR6 864 GB/s, 48 GB.
    _spec("l40s", "NVIDIA L40S", {"fp32": 91.6, "tf32": 183, "bf16": 362.05, "fp16": 362.05,
          "fp8": 733, "int8": 733}, 864, (_NVML, 46068 * MIB), "NVIDIA L40S datasheet (2023)",
          ("NVIDIA L40S",)),
    # L4: 30.3 FP32, 60 TF32, 121 BF16/FP16, 242.5 FP8 and INT8 dense (half the starred sparse).
    _spec("l4", "NVIDIA L4", {"fp32": 30.3, "tf32": 60, "bf16": 121, "fp16": 121, "fp8": 242.5,
          "int8": 242.5}, 300, (_NVML, 23034 * MIB), "NVIDIA L4 Tensor Core GPU datasheet (2023)",
          ("NVIDIA L4",)),
    # A10G (AWS G5): NVIDIA publishes no datasheet; 70 TFLOPS BF16/FP16 and 140 TOPS INT8
    # dense, 600 GB/s and 24 GB as given by AWS and third parties (Baseten, "NVIDIA A10 vs
    # A10G for ML model inference"). Treat the compute peaks as approximate; no FP32/TF32 figure
    # is published for it.
    _spec("a10g", "NVIDIA A10G", {"bf16": 70, "fp16": 70, "int8": 140}, 600, (_NVML, 23028 * MIB),
          "AWS G5 documentation; Baseten A10 vs A10G comparison (no NVIDIA datasheet)",
          ("NVIDIA A10G",)),
    # RTX 4090: 82.6 FP32, 82.6 TF32, 165.2 BF16/FP16 with FP32 accumulate, 330.3 FP8 (FP32
    # accumulate), 660.6 TOPS INT8, dense; GDDR6X 1,008 GB/s, 24 GB.
    _spec("rtx-4090", "NVIDIA GeForce RTX 4090", {"fp32": 82.6, "tf32": 82.6, "bf16": 165.2,
          "fp16": 165.2, "fp8": 330.3, "int8": 660.6}, 1008, ("datasheet", 24 * GB),
          _ADA_WHITEPAPER, ("NVIDIA GeForce RTX 4090",), ("4090",)),
    # MI300X: 163.4 FP32 (matrix), 653.7 TF32, 1,307.4 BF16/FP16, 2,614.9 FP8 and INT8 dense;
    # HBM3 5.3 TB/s, 192 GB. Not an NVML part: the datasheet's size.
    _spec("mi300x", "AMD Instinct MI300X", {"fp32": 163.4, "tf32": 653.7, "bf16": 1307.4,
          "fp16": 1307.4, "fp8": 2614.9, "int8": 2614.9}, 5300, ("datasheet", 192 * GB),
          "AMD Instinct MI300X accelerator datasheet (2023)", ("AMD Instinct MI300X",)),
)  # fmt: skip


def _normal(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(" ", "-")


_BY_NAME: dict[str, HardwareSpec] = {}
for _gpu in GPUS:
    for _name in (_gpu.key, *_gpu.aliases):
        _BY_NAME[_normal(_name)] = _gpu


def get_gpu(name: str) -> HardwareSpec:
    """The table's entry for ``name`` (key or alias, any case); ValueError listing the keys."""
    try:
        return _BY_NAME[_normal(name)]
    except KeyError:
        raise ValueError(
            f"unknown GPU {name!r}; known: {', '.join(g.key for g in GPUS)} "
            f"(aliases: {', '.join(sorted(a for g in GPUS for a in g.aliases))})"
        ) from None


def find_by_nvml_name(nvml_name: str) -> HardwareSpec | None:
    """The entry whose NVML name is ``nvml_name`` (case-insensitive), else None.

    Exact names only: a near miss (an H100 NVL beside an H100 SXM) has other clocks and power
    limits, and silently borrowing another part's peaks would make MFU and MBU wrong.
    """
    wanted = nvml_name.strip().lower()
    for gpu in GPUS:
        if any(n.lower() == wanted for n in gpu.nvml_names):
            return gpu
    return None


def spec_from_calibration(calibration: JSONView, device: str = "cpu") -> HardwareSpec:
    """A HardwareSpec whose roofs are the measured figures of ``calibration``
    (perfmodel.calibration).

    ``device`` is "cpu" or a GPU index as a string ("0"). Raises ValueError if the calibration
    has no such device.
    """
    if device == "cpu":
        entry = calibration.get("cpu")
        name = str(calibration.get("host", {}).get("cpu", "CPU"))
    else:
        gpus = {str(g.get("index")): g for g in calibration.get("gpus", [])}
        entry = gpus.get(device)
        name = str(entry.get("name", f"GPU {device}")) if entry else f"GPU {device}"
    if not entry:
        raise ValueError(f"the calibration holds no measurement of device {device!r}")
    return HardwareSpec(
        key=f"calibrated-{device}",
        name=name,
        peak_flops_per_s=dict(entry["matmul_flops_per_s"]),
        memory_bytes_per_s=float(entry["triad_bytes_per_s"]),
        memory_bytes=float(entry.get("memory_bytes") or 0.0),
        source=f"bench calibrate, {calibration.get('created_utc', 'unknown time')}",
    )
