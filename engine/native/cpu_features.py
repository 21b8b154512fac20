"""What this CPU computes natively, from /proc/cpuinfo (Linux; elsewhere: nothing known).

The engine's dtype "auto" and the native kernel's build key depend on it: a bfloat16 matmul is
2 to 3 times faster than float32 where the CPU has AVX512-BF16 or AMX (oneDNN uses them), and
several times slower where it must emulate bfloat16.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

NATIVE_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})


@functools.cache
def cpuinfo_lines() -> tuple[str, ...]:
    """The distinct 'model name' and 'flags' lines of /proc/cpuinfo (empty where unreadable)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return ()
    return tuple(sorted({ln for ln in text.splitlines() if ln.startswith(("model name", "flags"))}))


def cpu_flags() -> frozenset[str]:
    flags: set[str] = set()
    for line in cpuinfo_lines():
        if line.startswith("flags"):
            flags.update(line.partition(":")[2].split())
    return frozenset(flags)


def has_native_bf16() -> bool:
    """Whether this CPU has bfloat16 dot-product instructions. $LLM_PERF_LAB_CPU_BF16=0/1
    overrides the detection (to test both paths, or on a CPU the flags misreport)."""
    forced = os.environ.get("LLM_PERF_LAB_CPU_BF16")
    if forced in ("0", "1"):
        return forced == "1"
    return bool(cpu_flags() & NATIVE_BF16_FLAGS)


def cpu_signature() -> str:
    """Model and flags of this CPU (or the machine type): a key for code built for it."""
    return "\n".join(cpuinfo_lines()) or os.uname().machine
