"""Terminal tables of a run's summary, shared by ``bench run`` and ``bench report``.

Reads only the summary dict (summary.json, see :mod:`results.figures.summary`); missing figures
print as
"-", so a summary of an empty or failed run renders too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from bench.run.end.fleet_report import endpoints_table, models_table
from bench.run.end.images_report import images_table
from bench.run.end.reasoning_report import reasoning_table
from bench.run.end.sessions_report import sessions_table
from bench.run.end.validity_report import (
    render_energy_by_phase,
    render_reconciliation,
    render_violations,
)
from bench.run.end.verdict import print_verdict
from bench.run.messages import print_error, print_note, print_warning
from bench.run.terminal import print_table
from perfmodel.files import JSONView
from results.figures.abandoned import abandoned_line
from results.figures.engine_facts import prefix_cache_line, simulated_line
from results.figures.machine_load import busy_lines
from results.figures.samples_summary import gpu_scope_line, gpu_warnings
from results.figures.summary import LATENCY_PERCENTILES, TPS_PERCENTILES
from results.figures.workloads.images import images_line
from results.figures.workloads.pooling import pooling_lines
from results.figures.workloads.tool_calls import tool_calls_line
from results.validity.run_end import run_end_lines

__all__ = ["format_number", "render_summary"]

_LATENCIES: tuple[tuple[str, str], ...] = (
    ("ttft_ms", "TTFT"),
    ("itl_ms", "ITL"),
    ("tpot_ms", "TPOT"),
    ("e2el_ms", "E2EL"),
    ("e2el_from_scheduled_ms", "E2EL from scheduled"),
    ("queueing_delay_ms", "Queueing delay"),
)
_MAX_ERROR_ROWS = 10
_MAX_MESSAGE_CHARS = 100


def format_number(value: Any, unit: str = "") -> str:
    """A figure for a table: "-" for None, thousands separators, and two decimals for floats
    (one fixed format, so that a column's decimal points line up)."""
    if value is None:
        return "-"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    text = f"{value:,}" if isinstance(value, int) else f"{value:,.2f}"
    return f"{text} {unit}" if unit else text


def _pct(value: Any) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def _section(summary: JSONView, key: str) -> JSONView:
    value = summary.get(key)
    return value if isinstance(value, Mapping) else {}


def _overview(summary: JSONView) -> Table:
    window = _section(summary, "window")
    counts = _section(_section(summary, "counts"), "window")
    tokens = _section(summary, "tokens")
    rates = _section(summary, "throughput")
    goodput = _section(summary, "goodput")
    table = Table(title="Throughput (measured window)", box=box.SIMPLE_HEAVY, show_header=False)
    table.add_column("figure", style="bold")
    table.add_column("value", justify="right")
    cut = f"warm-up {format_number(window.get('warmup_s'), 's')}, "
    cut += f"cool-down {format_number(window.get('cooldown_s'), 's')}"
    table.add_row("Window", f"{format_number(window.get('duration_s'), 's')} ({cut})")
    table.add_row(
        "Requests ok / measured",
        f"{format_number(counts.get('ok'))} / {format_number(counts.get('requests'))}",
    )
    pooling = _section(summary, "pooling")
    if pooling:  # embeddings, rerank: no output tokens (results.figures.workloads.pooling)
        table.add_row("Inputs", format_number(pooling.get("inputs")))
        table.add_row("Input tokens", format_number(pooling.get("input_tokens")))
        table.add_row("Input throughput", format_number(pooling.get("inputs_per_s"), "inputs/s"))
        table.add_row("Input tokens/s", format_number(pooling.get("input_tok_s"), "tok/s"))
    else:
        source = tokens.get("output_tokens_source") or "-"
        table.add_row("Prompt tokens", format_number(tokens.get("prompt_tokens")))
        table.add_row("Output tokens", f"{format_number(tokens.get('output_tokens'))} ({source})")
        table.add_row("Output throughput", format_number(rates.get("output_tok_s"), "tok/s"))
        table.add_row("Total throughput", format_number(rates.get("total_tok_s"), "tok/s"))
    table.add_row("Request throughput", format_number(rates.get("requests_per_s"), "req/s"))
    slo = goodput.get("slo") or {}
    if slo:
        targets = ", ".join(f"{k} <= {format_number(v)}" for k, v in slo.items())
        good = f"{format_number(goodput.get('requests_per_s'), 'req/s')} "
        good += f"({_pct(goodput.get('good_fraction'))} of requests meet {targets})"
        table.add_row("Goodput", good)
    return table


def _latencies(summary: JSONView) -> Table:
    keys = ["mean", "std", *(f"p{p:g}" for p in LATENCY_PERCENTILES), "max"]
    table = Table(title="Latency (ms, ok requests)", box=box.SIMPLE_HEAVY)
    table.add_column("metric", style="bold")
    table.add_column("n", justify="right")
    for key in keys:
        table.add_column(key, justify="right")
    for key, label in _LATENCIES:
        if key not in summary and "pooling" in summary:
            continue  # a pooling run has no token figures: absent, not "-"
        stats = _section(summary, key)
        cells = [format_number(stats.get(k)) for k in keys]
        table.add_row(label, format_number(stats.get("count")), *cells)
    return table


def _per_user_tps(summary: JSONView) -> Table:
    # Low percentiles first: the slowest users are the ones a mean hides.
    keys = ["min", *(f"p{p:g}" for p in TPS_PERCENTILES), "max", "mean"]
    stats = _section(summary, "per_user_tps")
    table = Table(title="Per-user TPS (tok/s per request, 1 / TPOT)", box=box.SIMPLE_HEAVY)
    table.add_column("n", justify="right")
    for key in keys:
        table.add_column(key, justify="right")
    table.add_row(format_number(stats.get("count")), *(format_number(stats.get(k)) for k in keys))
    return table


def _counts(summary: JSONView) -> Table:
    counts = _section(summary, "counts")
    table = Table(title="Requests", box=box.SIMPLE_HEAVY)
    table.add_column("scope", style="bold")
    for name in ("requests", "ok", "error", "cancelled"):
        table.add_column(name, justify="right")
    table.add_column("error rate", justify="right")
    for scope, label in (("window", "measured window"), ("all", "whole run")):
        row = _section(counts, scope)
        cells = [format_number(row.get(k)) for k in ("requests", "ok", "error", "cancelled")]
        table.add_row(label, *cells, _pct(row.get("error_rate")))
    return table


def _errors(summary: JSONView) -> Table | None:
    by_message = _section(_section(summary, "errors"), "by_message")
    if not by_message:
        return None
    table = Table(title="Errors (whole run)", box=box.SIMPLE_HEAVY)
    table.add_column("count", justify="right")
    table.add_column("message", overflow="fold")
    for message, count in list(by_message.items())[:_MAX_ERROR_ROWS]:
        text = message if len(message) <= _MAX_MESSAGE_CHARS else message[:_MAX_MESSAGE_CHARS] + "…"
        table.add_row(format_number(count), text)
    hidden = len(by_message) - _MAX_ERROR_ROWS
    if hidden > 0:
        table.caption = f"{hidden} more distinct messages in summary.json"
    return table


def render_summary(summary: JSONView | None, console: Console, nvml_said: bool = False) -> None:
    """Print a run's summary as tables: throughput, latency percentiles, per-user TPS, the
    reasoning (a reasoning model's run only), request counts, each replica's figures (a fleet
    run only), each model's (a run that sent several) and errors, then why the run is
    not usable where it is not. A simulated run says so first; prompt tokens the prefix cache
    spared from prefill are noted under the throughput. ``None`` (a run folder without
    summary.json) prints a note instead. ``nvml_said``: see :func:`render_energy`."""
    if summary is None:
        console.print("[yellow]no summary.json: the run did not finish writing its folder[/yellow]")
        return
    sim = summary.get("simulated")
    if isinstance(sim, Mapping):
        print_note(console, simulated_line(sim))
    for line in run_end_lines(summary):
        print_error(console, line)
    for line in busy_lines(summary):
        print_warning(console, line)
    if scope_line := gpu_scope_line(summary):
        # Said plainly when every GPU was sampled: the figures then include GPUs not the engine's.
        scope = summary["probes"]["gpu"]["scope"]
        (print_warning if scope["how"] == "all" else print_note)(console, scope_line)
        for note in scope.get("notes") or []:
            print_note(console, note)
    for line in gpu_warnings(summary):
        print_warning(console, line)
    render_violations(summary, console)
    print_table(console, _overview(summary))
    reuse = summary.get("prefix_cache")
    if (line := prefix_cache_line(reuse if isinstance(reuse, Mapping) else None)) is not None:
        print_note(console, line)
    _workload_notes(summary, console)
    print_table(console, _latencies(summary))
    if "pooling" not in summary:  # a pooling run has no per-user TPS
        print_table(console, _per_user_tps(summary))
    for line in pooling_lines(summary.get("pooling")):
        print_note(console, line)
    reasoning = reasoning_table(summary)  # only for a run in which some request reasoned
    if reasoning is not None:
        print_table(console, reasoning)
    print_table(console, _counts(summary))
    fleet = endpoints_table(summary)  # only for a run against several replicas
    if fleet is not None:
        print_table(console, fleet)
    models = models_table(summary)  # only for a run that sent several models
    if models is not None:
        print_table(console, models)
    if (sessions := sessions_table(summary)) is not None:  # only for a run of sessions
        print_table(console, sessions)
    if (images := images_table(summary)) is not None:  # only where the image counts vary
        print_table(console, images)
    errors = _errors(summary)
    if errors is not None:
        print_table(console, errors)
    render_attribution(summary, console)
    render_reconciliation(summary, console)
    render_energy(summary, console, nvml_said)
    print_verdict(summary, console)


def _workload_notes(summary: JSONView, console: Console) -> None:
    """The lines of the workload's own figures, where the run has them: abandoned requests,
    tool calls, images."""
    abandoned = summary.get("abandoned")
    if (line := abandoned_line(abandoned if isinstance(abandoned, dict) else None)) is not None:
        print_note(console, line)
    for key, line_of in (("tool_calls", tool_calls_line), ("images", images_line)):
        section = summary.get(key)
        if (line := line_of(section if isinstance(section, Mapping) else None)) is not None:
            print_note(console, line)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def _attribution_table(attr: JSONView) -> Table:
    busy = attr.get("busy_s") or 0.0
    table = Table(
        title=f"Where the engine's time went ({attr.get('steps')} steps, {busy:.2f} s busy)",
        box=box.SIMPLE_HEAD,
    )
    for col in ("phase", "time s", "share", "tokens", "FLOP/byte", "MFU", "MBU"):
        table.add_column(col, justify="left" if col == "phase" else "right")
    for phase in ("prefill", "decode"):
        part = attr.get(phase) or {}
        time_s = part.get("time_s")
        table.add_row(
            phase,
            format_number(time_s),
            _pct(time_s / busy if time_s is not None and busy else None),
            format_number(part.get("tokens")),
            format_number(part.get("arithmetic_intensity")),
            _pct(part.get("mfu")),
            _pct(part.get("mbu")),
        )
    bound = attr.get("bound_time_s") or {}
    if bound:
        compute, memory = bound.get("compute") or 0.0, bound.get("memory") or 0.0
        table.caption = (
            f"compute-bound {compute:.2f} s, memory-bound {memory:.2f} s; overall MFU "
            f"{_pct(attr.get('mfu'))}, MBU {_pct(attr.get('mbu'))}"
        )
    return table


def render_attribution(summary: JSONView, console: Console) -> None:
    """Print the attribution, energy and probe notes of a summary; silent on older summaries."""
    attr = summary.get("attribution")
    if isinstance(attr, Mapping):
        if attr.get("available"):
            print_table(console, _attribution_table(attr))
            if attr.get("mfu") is None:
                why = attr.get("mfu_reason") or "summary.json gives no reason (an older summary)"
                print_note(console, f'MFU and MBU are "-": {why}')
        else:
            print_note(console, f"no time attribution: {attr.get('reason')}")
    probes = summary.get("probes")
    if not isinstance(probes, Mapping):
        return
    if not probes.get("available"):
        print_note(console, f"no probe readings: {probes.get('reason')}")
        return
    energy = probes.get("energy") or {}
    if energy.get("available"):
        console.print(
            f"energy: {format_number(energy.get('joules_per_output_token'))} J per output token, "
            f"mean power {format_number(energy.get('mean_power_w'))} W"
        )


def render_energy(summary: JSONView, console: Console, nvml_said: bool) -> None:
    """The energy per token (with the probes' figures) and by phase, or one line saying why
    there are none: both come from NVML's energy counter, so one reason serves both.
    ``nvml_said``: the run already said at its start that NVML is unavailable here (probes'
    start lines), so a run without GPU readings says nothing more."""
    probes = summary.get("probes")
    if not isinstance(probes, Mapping) or not probes.get("available"):
        return
    energy = probes.get("energy") or {}
    if energy.get("available"):
        render_energy_by_phase(summary, console)
        return
    gpu = probes.get("gpu")
    sampled = isinstance(gpu, Mapping) and bool(gpu.get("gpus"))
    if sampled:
        print_note(console, f"no energy figures, per token or by phase: {energy.get('reason')}")
    elif not nvml_said:
        print_note(console, "no energy figures, per token or by phase: no GPU readings (NVML)")
