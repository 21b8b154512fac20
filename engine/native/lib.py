"""The engine's C kernels (engine/native/csrc/*.c), built into one library on first use.

Compiled with the system C compiler (``$CC``, else ``cc``) into the cache folder
(perfmodel.cache.native_dir), keyed by the sources, the flags, the compiler and this CPU's
model and flags, so a build made for one CPU is never loaded on another. Where nothing can be built,
load() raises NativeKernelError with the reason and the engine keeps to its torch paths.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch

from engine.native.cpu_features import cpu_signature
from perfmodel.cache import native_dir

SOURCES = tuple(sorted((Path(__file__).parent / "csrc").glob("*.c")))
HEADERS = tuple(sorted((Path(__file__).parent / "csrc").glob("*.h")))
# Linked with -fopenmp, the library uses libgomp.so.1, the OpenMP runtime torch has already
# loaded: one thread pool for both.
COMPILE_FLAGS = ("-O3", "-march=native", "-fopenmp", "-fPIC", "-std=c11")
LINK_FLAGS = ("-shared", "-fopenmp")
# -ffast-math for the attention kernel only, and at compile time only: it lets gcc call glibc's
# vector expf (libmvec) in the softmax; the norm needs IEEE sqrt and division to round as
# torch's do; and linking without it keeps crtfastmath.o, which would set flush-to-zero for the
# whole process, torch included, out of the library.
FAST_MATH = {"paged_decode_attention.c": ("-ffast-math",), "silu_and_mul.c": ("-ffast-math",)}

# The element types the kernels are built for, by the suffix of their symbols.
SUFFIX = {torch.float32: "f32", torch.bfloat16: "bf16"}

_state: dict[str, object] = {}


class NativeKernelError(RuntimeError):
    """The kernels cannot be built or loaded here; the message says why."""


def _compiler() -> str:
    cc = os.environ.get("CC", "cc")
    path = shutil.which(cc)
    if path is None:
        raise NativeKernelError(f"no C compiler: {cc!r} is not on PATH (set $CC or install gcc)")
    return path


def _build(cc: str) -> Path:
    version = subprocess.run([cc, "--version"], capture_output=True, text=True).stdout
    parts = [src.read_bytes() for src in SOURCES + HEADERS]
    parts += [" ".join(COMPILE_FLAGS + LINK_FLAGS).encode(), repr(FAST_MATH).encode()]
    parts.append(version.encode())
    parts.append(cpu_signature().encode())
    key = hashlib.sha256(b"\0".join(parts)).hexdigest()[:16]
    lib = native_dir() / key / "libperflab_kernels.so"
    if lib.is_file():
        return lib
    lib.parent.mkdir(parents=True, exist_ok=True)
    # Build beside the target and rename: concurrent processes never load a half-written file.
    with tempfile.TemporaryDirectory(dir=lib.parent) as tmp:
        objs = [Path(tmp) / f"{src.stem}.o" for src in SOURCES]
        out = Path(tmp) / lib.name
        cmds = [
            [cc, *COMPILE_FLAGS, *FAST_MATH.get(s.name, ()), "-c", "-o", str(o), str(s)]
            for s, o in zip(SOURCES, objs, strict=True)
        ]
        cmds.append([cc, *LINK_FLAGS, "-o", str(out), *map(str, objs), "-lm"])
        for cmd in cmds:
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                raise NativeKernelError(f"{cc} failed to build the kernels: {proc.stderr[-500:]}")
        os.replace(out, lib)
    return lib


def _declare(lib: ctypes.CDLL) -> None:
    i64, ptr, f32 = ctypes.c_int64, ctypes.c_void_p, ctypes.c_float
    for suffix in SUFFIX.values():
        attention = getattr(lib, f"paged_decode_attention_{suffix}")
        attention.argtypes = [ptr, ptr, ptr, i64, ptr, ptr, i64, i64, i64, i64, i64, i64,
                              f32, f32, ctypes.c_int]  # fmt: skip
        attention.restype = ctypes.c_int
        linear = getattr(lib, f"small_batch_linear_{suffix}")
        linear.argtypes = [ptr, ptr, ptr, i64, i64, i64, ctypes.c_int]
        linear.restype = None
        norm = getattr(lib, f"fused_add_rms_norm_{suffix}")
        norm.argtypes = [ptr, ptr, ptr, ptr, i64, i64, f32, ctypes.c_int]
        norm.restype = None
        silu = getattr(lib, f"silu_and_mul_{suffix}")
        silu.argtypes = [ptr, ptr, i64, i64, ctypes.c_int]
        silu.restype = None
        stack = getattr(lib, f"decode_stack_{suffix}")
        stack.argtypes = [ptr, i64, ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, i64, ptr, ptr, i64,
                          ptr, f32, f32, ctypes.c_int]  # fmt: skip
        stack.restype = ctypes.c_int
    lib.decode_stack_ptrs_per_layer.restype = ctypes.c_int
    lib.decode_stack_num_dims.restype = ctypes.c_int
    lib.paged_decode_attention_force_portable.argtypes = [ctypes.c_int]


def load() -> ctypes.CDLL:
    """The kernels' library, built if needed. Raises NativeKernelError with the reason."""
    if "lib" in _state:
        return _state["lib"]  # type: ignore[return-value]
    if "error" in _state:
        raise NativeKernelError(str(_state["error"]))
    try:
        lib = ctypes.CDLL(str(_build(_compiler())))
        _declare(lib)
    except (NativeKernelError, OSError, AttributeError) as e:
        _state["error"] = str(e)
        raise NativeKernelError(str(e)) from e
    _state["lib"] = lib
    return lib


def available() -> str | None:
    """None when the kernels load here, else why not (built on the first call)."""
    try:
        load()
    except NativeKernelError as e:
        return str(e)
    return None
