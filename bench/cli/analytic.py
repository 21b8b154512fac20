"""`bench roofline`, `bench capacity` and `bench calibrate`: the analytic model on the command line.

Registered on the main app by :func:`register`. Models are preset names (llama-3-8b, llama-3-70b,
llama-3-405b, llama-2-7b, mistral-7b, tiny) or a Hugging Face config.json (or its directory);
GPUs are perfmodel.hardware's keys (a100-80gb, h100-sxm, h200, l40s, ...).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from bench.run.messages import print_error, print_path
from bench.run.terminal import print_table, terminal_console
from perfmodel import capacity as kv_capacity
from perfmodel.capacity import DEFAULT_GPU_MEMORY_UTILIZATION
from perfmodel.hardware import HardwareSpec, get_gpu
from perfmodel.models import resolve_model
from perfmodel.roofline import Batch, CostModel, Precision
from perfmodel.roofs import table_roofs

console = terminal_console()

ModelOpt = Annotated[str, typer.Option(help="Preset name or a Hugging Face config.json / dir.")]
GpuOpt = Annotated[str, typer.Option(help="GPU key: a100-80gb, h100-sxm, h200, l40s, l4, ...")]
TpOpt = Annotated[int, typer.Option(help="Tensor-parallel degree (GPUs per replica).")]
DtypeOpt = Annotated[
    str | None,
    typer.Option(help="Weights and activations: bf16, fp16, fp8, fp32 (default: model's)."),
]
WeightOpt = Annotated[
    str | None, typer.Option(help="Weights only: int8 or int4 for weight-only quantization.")
]
MemoryShareOpt = Annotated[
    float, typer.Option(help="Share of GPU memory the engine may use (vLLM's default 0.9).")
]


def _fail(message: str) -> typer.Exit:
    print_error(console, message)
    return typer.Exit(2)


def _memory_here(spec: HardwareSpec) -> int | None:
    """NVML's total memory of this host's GPU of that part, when it has one (else the table's)."""
    from probes.gpu_scope import local_memory_total

    return local_memory_total(spec.nvml_names)


def _setup(
    model: str, gpu: str, tp: int, dtype: str | None, weight_dtype: str | None, kv_dtype: str | None
) -> tuple[CostModel, HardwareSpec]:
    """The cost model and the GPU; Exit(2) naming the bad option."""
    try:
        config = resolve_model(model)
        spec = get_gpu(gpu)
        precision = Precision.for_model(config, weight_dtype or dtype, kv_dtype, dtype)
        return CostModel(config, precision, tp), spec
    except ValueError as e:
        raise _fail(str(e)) from e


def _ints(text: str, name: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise _fail(f"--{name}: expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise _fail(f"--{name}: expected positive integers, got {text!r}")
    return values


def roofline(
    model: ModelOpt,
    gpu: GpuOpt,
    tp: TpOpt = 1,
    batch: Annotated[str, typer.Option(help="Decode batch sizes, comma-separated.")] = (
        "1,8,32,128"
    ),
    context: Annotated[int, typer.Option(help="Context per sequence in decode, tokens.")] = 4096,
    prompt: Annotated[
        int | None, typer.Option(help="Prompt tokens of the prefill point (default: --context).")
    ] = None,
    dtype: DtypeOpt = None,
    weight_dtype: WeightOpt = None,
    kv_dtype: Annotated[str | None, typer.Option(help="KV cache: fp16, bf16, fp8, int4.")] = None,
    output: Annotated[
        Path | None, typer.Option(help="HTML figure path (default: roofline-<model>-<gpu>.html).")
    ] = None,
    gpu_memory_utilization: MemoryShareOpt = DEFAULT_GPU_MEMORY_UTILIZATION,
) -> None:
    """Analytic roofline of one model on one GPU: prefill and decode points, a table, a figure.

    Rows whose KV cache does not fit in the memory left (`bench capacity`'s figures) say so."""
    from dashboards.figures.roofline import analytic_roofline_figure, write_figure_html

    cost, spec = _setup(model, gpu, tp, dtype, weight_dtype, kv_dtype)
    try:
        roof = table_roofs(spec, cost.precision.activation_dtype)
    except ValueError as e:
        raise _fail(f"{e}; choose the compute dtype with --dtype") from e
    peak, bw = roof.flops_per_s, roof.bytes_per_s
    try:
        memory = kv_capacity.capacity(
            cost.config, spec, context, cost.precision, tp, gpu_memory_utilization,
            gpu_memory_bytes=_memory_here(spec),
        )  # fmt: skip
    except ValueError as e:
        raise _fail(str(e)) from e
    prompt_tokens = prompt or context
    rows = [("prefill", 1, prompt_tokens, Batch.prefill(prompt_tokens))]
    rows += [("decode", b, context, Batch.decode(b, context)) for b in _ints(batch, "batch")]
    p = cost.precision
    table = Table(
        title=f"{cost.config.name} on {tp} x {spec.name}, weights {p.weight_dtype}, "
        f"KV {p.kv_dtype}, compute {p.activation_dtype}: peak {peak / 1e12:.0f} TFLOP/s, "
        f"{bw / 1e12:.2f} TB/s, ridge {roof.ridge_flop_per_byte:.0f} FLOP/B (per GPU)"
    )
    for name in ("phase", "batch", "context", "GFLOP", "weights GB", "KV GB", "FLOP/B", "bound",
                 "time ms", "tok/s", "tok/s per user", "fits"):  # fmt: skip
        table.add_column(name, justify="left" if name in ("phase", "bound") else "right")
    points, misfits = _roofline_rows(cost, memory, rows, peak, bw, table)
    if misfits:
        budget = f"{gpu_memory_utilization:.0%} of {spec.name}'s memory"
        most = f"at most {memory.max_users:,} users of {context:,} tokens"
        table.caption = "\n".join([*misfits, f"(`bench capacity`: {budget}, {most})"])
    print_table(console, table)
    roofs = [roof]
    if "fp8" in spec.peak_flops_per_s and roof.compute_dtype != "fp8":
        roofs.append(table_roofs(spec, "fp8"))
    fig = analytic_roofline_figure(roofs, points, f"{cost.config.name} on {spec.name} (TP {tp})")
    path = output or Path(f"roofline-{cost.config.name}-{spec.key}-tp{tp}.html")
    print_path(console, "figure", write_figure_html(fig, path))


def _roofline_rows(
    cost: CostModel, memory: Any, rows: list[tuple[str, int, int, Batch]], peak: float, bw: float,
    table: Table,
) -> tuple[list[Any], list[str]]:  # fmt: skip
    """Add one table row per (phase, batch, context, shape) at the roofs ``peak`` (FLOP/s) and
    ``bw`` (B/s); return the figure's points and the rows whose KV cache does not fit."""
    from dashboards.figures.roofline import RooflinePoint

    points = []
    misfits: list[str] = []
    for phase, b, ctx, shape in rows:
        shortfall = memory.shortfall(b, ctx)
        if shortfall is not None:
            misfits.append(f"{phase} batch {b}: {shortfall}")
        step = cost.step(shape)
        t = float(step.roofline_time_s(peak, bw))
        bound = "compute" if step.compute_bound(peak, bw) else "memory"
        tokens_per_s = float(shape.num_tokens) / t
        per_user = tokens_per_s / b if phase == "decode" else None
        table.add_row(
            phase, str(b), str(ctx), f"{step.flops / 1e9:,.1f}", f"{step.weight_bytes / 1e9:.2f}",
            f"{(step.kv_read_bytes + step.kv_write_bytes) / 1e9:.2f}",
            f"{step.arithmetic_intensity:.1f}", bound, f"{t * 1e3:.2f}", f"{tokens_per_s:,.0f}",
            f"{per_user:.1f}" if per_user is not None else "",
            "no" if shortfall else "yes",
        )  # fmt: skip
        label = f"B={b}" if phase == "decode" else f"{ctx} tok"
        hover = (
            f"{phase} {label}, context {ctx}",
            f"{step.flops / 1e9:,.1f} GFLOP, {step.bytes / 1e9:.2f} GB, "
            f"{step.arithmetic_intensity:.1f} FLOP/B",
            f"{bound}-bound, {t * 1e3:.2f} ms per step",
            *([shortfall] if shortfall else []),
        )
        intensity, flops_per_s = float(step.arithmetic_intensity), float(step.flops) / t
        points.append(RooflinePoint(phase, label, intensity, flops_per_s, hover))
    return points, misfits


def capacity(
    model: ModelOpt,
    gpu: GpuOpt,
    context: Annotated[int, typer.Option(help="Context per user, tokens.")] = 4096,
    tp: TpOpt = 1,
    kv_dtype: Annotated[str, typer.Option(help="KV cache dtype: fp16, bf16, fp8, int4.")] = "fp16",
    dtype: DtypeOpt = None,
    weight_dtype: WeightOpt = None,
    gpu_memory_utilization: MemoryShareOpt = DEFAULT_GPU_MEMORY_UTILIZATION,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """KV bytes per token, model memory, KV memory left, max tokens and users at a context."""
    cost, spec = _setup(model, gpu, tp, dtype, weight_dtype, kv_dtype)
    try:
        result = kv_capacity.capacity(
            cost.config, spec, context, cost.precision, tp, gpu_memory_utilization,
            gpu_memory_bytes=_memory_here(spec),
        )  # fmt: skip
    except ValueError as e:
        raise _fail(str(e)) from e
    if as_json:
        print(json.dumps(result.to_dict(), indent=2))
        return
    table = Table(title=f"{result.model} on {tp} x {result.gpu}", show_header=False)
    r, gb = result, 1e9
    share = f"{gpu_memory_utilization:.0%} of {r.gpu_memory_bytes / gb:.0f} GB"
    rows = {
        "GPU memory": f"{r.gpu_memory_bytes / 2**30:,.2f} GiB ({r.gpu_memory_source})",
        "weights / KV dtype": f"{r.weight_dtype} / {r.kv_dtype}",
        "KV bytes per token": f"{r.kv_bytes_per_token:,.0f} B "
        f"(per GPU {r.kv_bytes_per_token_per_gpu:,.0f} B)",
        "model memory": f"{r.weights_bytes / gb:,.1f} GB "
        f"({r.weights_bytes_per_gpu / gb:,.1f} GB per GPU)",
        "memory budget per GPU": f"{r.memory_budget_bytes_per_gpu / gb:,.1f} GB ({share})",
        "KV memory left per GPU": f"{r.kv_bytes_left_per_gpu / gb:,.1f} GB "
        f"({r.kv_bytes_left_per_gpu / 2**30:,.1f} GiB)",
        "max tokens in KV": f"{r.max_tokens:,}",
        f"max users at {context:,} tokens": f"{r.max_users:,}",
        "fits": f"{'yes' if r.fits else 'no'}: {r.reason}",
    }
    for label, value in rows.items():
        table.add_row(label, value)
    print_table(console, table)


def calibrate(
    output: Annotated[
        Path | None,
        typer.Option(help="Where to save (default: $LLM_PERF_LAB_CACHE/calibration.json)."),
    ] = None,
    seconds: Annotated[
        float | None,
        typer.Option(help="Time budget per figure, seconds (default 0.5; --quick: 0.15)."),
    ] = None,
    gpu: Annotated[bool, typer.Option(help="Also measure every CUDA GPU.")] = True,
    quick: Annotated[
        bool,
        typer.Option(
            help="A quick calibration (what `bench run` makes by itself): fewer timings, so the "
            "roofs may read low; recorded as such."
        ),
    ] = False,
) -> None:
    """Measure this machine's matmul FLOP/s per dtype and stream-triad bandwidth; save them."""
    from bench.experiments.calibrate import calibrate
    from bench.run.endpoint.environment import cpu_name
    from perfmodel import calibration as cal

    if seconds is None:
        seconds = cal.QUICK_BUDGET_S if quick else cal.FULL_BUDGET_S
    if seconds <= 0:
        raise _fail(f"--seconds must be > 0, got {seconds}")
    mode = "quick" if quick else "full"
    result = calibrate(budget_s=seconds, gpu=gpu, host={"cpu": cpu_name()}, mode=mode)
    table = Table(title=f"calibration ({result['num_threads']} torch threads)")
    for name in ("device", "matmul FLOP/s by dtype", "triad bytes/s"):
        table.add_column(name)
    devices = [("cpu: " + str(result["host"]["cpu"]), result["cpu"])]
    devices += [(f"gpu {g['index']}: {g['name']}", g) for g in result["gpus"]]
    for label, entry in devices:
        flops = ", ".join(f"{k} {v / 1e9:,.1f} G" for k, v in entry["matmul_flops_per_s"].items())
        table.add_row(label, flops, f"{entry['triad_bytes_per_s'] / 1e9:,.1f} GB/s")
    print_table(console, table)
    print_path(console, "saved", cal.save(result, output))


def register(app: typer.Typer) -> None:
    """Add roofline, capacity and calibrate to ``app``."""
    app.command()(roofline)
    app.command()(capacity)
    app.command()(calibrate)
