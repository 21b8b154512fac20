"""A run's dashboard: ``report.html`` in its run folder (`bench report RUN --html`, and the end
of every `bench run`).

Sections: headline, the replicas side by side (a fleet run only), the models side by side (a
run that sent several), latency CDFs, per-user TPS,
reasoning (a reasoning model's run only), the sessions per turn (a run of sessions only), the
images (a run that sent images only: TTFT by image count, the tokens they cost), the
shared-axis timeline, the engine's steps, the
roofline, errors, and every recorded sample. Each is drawn from whatever the folder holds; what
it does not hold is said at the top and in the section concerned. A run that is not usable
(summary.json's ``usability``) says why under the headline, and its top causes under errors.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import plotly.graph_objects as go

from dashboards.figures.endpoints import endpoints_figure, models_figure
from dashboards.figures.errors import errors_figure
from dashboards.figures.headline import headline_figure, utilization_missing
from dashboards.figures.images import images_figure
from dashboards.figures.latency import latency_cdf_figure
from dashboards.figures.reasoning import reasoning_figure
from dashboards.figures.roofline import roofline_figure
from dashboards.figures.roofline_inputs import RooflineInputs, roofline_inputs
from dashboards.figures.samples_figure import samples_figure
from dashboards.figures.sessions import sessions_figure
from dashboards.figures.steps import steps_figure
from dashboards.figures.timeline import timeline_figure
from dashboards.figures.user_tps import per_user_tps_figure
from dashboards.pages.page import Page, Section, write_page
from dashboards.runview import RunView, load_run_view
from dashboards.style import fmt
from perfmodel.files import JSONObject, JSONView
from results.figures.energy_phase import energy_phase_line
from results.figures.engine_facts import prefix_cache_line, simulated_line
from results.figures.machine_load import busy_lines
from results.figures.workloads.pooling import pooling_lines
from results.validity.run_end import engine_death_line, run_end_lines
from results.validity.run_validity import violation_lines
from results.validity.token_reconciliation import reconciliation_lines
from results.validity.usability import describe_failures

__all__ = [
    "REPORT_HTML",
    "RUN_SECTIONS",
    "RunPageInputs",
    "RunSection",
    "build_run_page",
    "run_facts",
    "write_run_report",
]

REPORT_HTML = "report.html"


def run_facts(view: RunView) -> list[tuple[str, str]]:
    """(name, value) pairs that identify a run: what ran, on what, when, from which commit."""
    rj: JSONObject = view.run_json
    scenario = rj.get("scenario") or {}
    engine = rj.get("engine") or {}
    description = engine.get("description") or {}
    hardware = rj.get("hardware") or {}
    window = view.summary.get("window") or {}
    load = f"{scenario.get('users', '?')} users"
    if scenario.get("num_requests"):
        load += f", {scenario['num_requests']} requests"
    if scenario.get("duration_s"):
        load += f", {scenario['duration_s']} s"
    device = " ".join(str(description[k]) for k in ("device", "dtype") if description.get(k))
    facts = [
        ("run", view.run_id),
        ("scenario", f"{scenario.get('name', '?')} ({load})"),
        (
            "engine",
            f"{engine.get('adapter', '?')}: {engine.get('model') or '?'}"
            + (f" on {device}" if device else ""),
        ),
        ("CPU", str(hardware.get("cpu") or "?")),
        ("GPU", ", ".join(map(str, hardware.get("gpus") or [])) or "none"),
        ("started", str(rj.get("started_utc") or "?")),
        ("window", f"{fmt(window.get('duration_s'))} s measured"),
        ("commit", str(rj.get("git_commit") or "?")[:12]),
    ]
    return facts


def _utilization_notes(summary: JSONView) -> list[str]:
    why = utilization_missing(summary)
    return [f"No MFU and MBU: {why}."] if why else []


def _engine_notes(summary: JSONView) -> tuple[str | None, list[str]]:
    """The simulated-device line (None for a real device) and the prefix cache note, as
    summary.json's "simulated" and "prefix_cache" (results.figures.engine_facts) give them."""
    sim = summary.get("simulated")
    reuse = summary.get("prefix_cache")
    line = prefix_cache_line(reuse if isinstance(reuse, Mapping) else None)
    return (
        simulated_line(sim) if isinstance(sim, Mapping) else None,
        [f"{line[0].upper()}{line[1:]}."] if line else [],
    )


class RunPageInputs:
    """What a run page's sections are drawn from: the run's view, and what several sections
    share (each computed once, on first use)."""

    def __init__(self, view: RunView) -> None:
        self.view = view
        self.summary: JSONView = view.summary
        self.died = view.summary.get("engine_died") or view.run_json.get("engine_died")

    @functools.cached_property
    def roof(self) -> RooflineInputs:
        return roofline_inputs(self.view)

    @functools.cached_property
    def unusable(self) -> list[str]:
        """summary.json's verdict: why the run is not usable, then its causes (none if usable)."""
        verdict = self.summary.get("usability")
        if isinstance(verdict, dict) and not verdict.get("usable", True):
            return describe_failures(verdict)
        return []

    @functools.cached_property
    def steps_notes(self) -> list[str]:
        # A dead engine's steps died with it: say that, not that the engine records none.
        if self.died and self.view.steps is None:
            return [f"No steps.parquet: {engine_death_line(self.died)}."]
        return self.view.notes_for("steps")

    @functools.cached_property
    def fleet(self) -> go.Figure | None:
        return endpoints_figure(self.summary)

    @functools.cached_property
    def models(self) -> go.Figure | None:
        return models_figure(self.summary)

    @functools.cached_property
    def reasoning(self) -> go.Figure | None:
        return reasoning_figure(self.view)

    @functools.cached_property
    def sessions(self) -> go.Figure | None:
        return sessions_figure(self.view)

    @functools.cached_property
    def images(self) -> go.Figure | None:
        return images_figure(self.view)

    @functools.cached_property
    def samples(self) -> go.Figure | None:
        return samples_figure(self.view)

    @functools.cached_property
    def validity_findings(self) -> list[str]:
        energy_line = energy_phase_line(self.summary.get("energy_by_phase"))
        return reconciliation_lines(self.summary.get("token_reconciliation")) + (
            [energy_line] if energy_line else []
        )


def _headline(inputs: RunPageInputs) -> Section:
    simulated, reuse = _engine_notes(inputs.summary)
    return Section(
        "headline",
        "Headline",
        figure=headline_figure(inputs.summary),
        notes=inputs.view.notes_for("run") + _utilization_notes(inputs.summary),
        findings=([f"{simulated[0].upper()}{simulated[1:]}."] if simulated else [])
        + inputs.unusable[:1]
        + reuse,
    )


def _endpoints(inputs: RunPageInputs) -> Section:
    return Section(
        "endpoints",
        "Replicas",
        "A fleet run: each replica's requests, throughput and latency percentiles "
        "(summary.json's endpoints), side by side; every other figure is the "
        "whole fleet's. The engine metrics' series carry each replica's endpoint.",
        inputs.fleet,
    )


def _models(inputs: RunPageInputs) -> Section:
    return Section(
        "models",
        "Models",
        "A run that sent several models (the scenario's [[models]], LoRA adapters): each "
        "model's requests, throughput and latency percentiles (summary.json's models), side "
        "by side; every other figure is the whole run's.",
        inputs.models,
    )


def _latency(inputs: RunPageInputs) -> Section:
    return Section(
        "latency",
        "Latency distributions",
        "Each curve is the fraction of measured requests (ITL: of tokens) at or below a "
        "latency; diamonds mark summary.json's p50, p90 and p99.",
        latency_cdf_figure([inputs.view]),
        findings=pooling_lines(inputs.summary.get("pooling")),
    )


def _tps(inputs: RunPageInputs) -> Section:
    return Section(
        "tps",
        "Per-user TPS",
        "The speed each user sees: 1 / TPOT of each request. The low percentiles are the "
        "slow users a mean hides.",
        per_user_tps_figure([inputs.view]),
    )


def _reasoning(inputs: RunPageInputs) -> Section:
    return Section(
        "reasoning",
        "Reasoning",
        "A reasoning model's answer begins after its reasoning: TTFT is the first "
        "token of any kind, the time to first answer token the first content. "
        "Per-user TPS of the answer is the speed the user reads it at.",
        inputs.reasoning,
    )


def _sessions(inputs: RunPageInputs) -> Section:
    return Section(
        "sessions",
        "Sessions",
        "Agent sessions and multi-turn chats (summary.json's sessions): TTFT and prompt "
        "tokens by turn index, the part of each turn's prompt the prefix cache served where "
        "the server reported it, and each session's whole duration, its delays included.",
        inputs.sessions,
    )


def _images(inputs: RunPageInputs) -> Section:
    return Section(
        "images",
        "Images",
        "Requests with images (summary.json's images): TTFT by the number of images a request "
        "sent, and the prompt tokens the server counted beyond the text's own, by image count.",
        inputs.images,
    )


def _timeline(inputs: RunPageInputs) -> Section:
    timeline, missing_panels = timeline_figure([inputs.view])
    notes = inputs.view.notes_for("timeline")
    if missing_panels:
        notes.append("Panels without data in this run: " + ", ".join(missing_panels) + ".")
    return Section(
        "timeline",
        "Timeline",
        "All panels share one time axis: zoom or pan one and the others follow. Values "
        "are means over equal time bins; grey spans are warm-up and cool-down.",
        timeline,
        notes,
    )


def _steps(inputs: RunPageInputs) -> Section:
    steps = inputs.view.steps
    return Section(
        "steps",
        "Engine steps",
        "The engine's own per-step records: what each step computed and how long it took.",
        steps_figure(steps) if steps is not None else None,
        inputs.steps_notes,
    )


def _roofline(inputs: RunPageInputs) -> Section:
    roof = inputs.roof
    return Section(
        "roofline",
        "Roofline and attribution",
        "Where the engine's steps sit against the hardware's compute and memory roofs, "
        "and how step time divides between prefill and decode, memory- and "
        "compute-bound."
        + (f" FLOPs and bytes: {roof.costs_source}." if roof.costs_source else "")
        + (f" Attribution: {roof.attribution_source}." if roof.attribution_source else ""),
        roofline_figure(roof),
        roof.notes,
    )


def _errors(inputs: RunPageInputs) -> Section:
    errors = errors_figure(inputs.view)
    # Both are findings: the causes of an unusable run, or that nothing failed.
    findings = (
        inputs.unusable[1:] if errors is not None else ["No request failed or was cancelled."]
    )
    return Section(
        "errors",
        "Errors",
        "Failed and cancelled requests by kind and by time.",
        errors,
        findings=findings,
    )


def _validity(inputs: RunPageInputs) -> Section:
    return Section(
        "validity",
        "Token counts and energy",
        "Each request's tokens as the client, the server and the engine counted them, "
        "and the GPUs' energy split into prefill and decode by the engine's steps.",
        findings=inputs.validity_findings,
    )


def _samples(inputs: RunPageInputs) -> Section:
    return Section(
        "samples",
        "All recorded samples",
        "Every series in samples.parquet as recorded, one at a time.",
        inputs.samples,
    )


def _always(inputs: RunPageInputs) -> bool:
    return True


@dataclass(frozen=True)
class RunSection:
    """One row of the run page: its section's key, the builder, and when the section applies."""

    key: str
    build: Callable[[RunPageInputs], Section]
    applies: Callable[[RunPageInputs], bool] = _always


# The run page's sections, in page order. A new section is one row here and one builder.
RUN_SECTIONS: tuple[RunSection, ...] = (
    RunSection("headline", _headline),
    RunSection("endpoints", _endpoints, lambda i: i.fleet is not None),
    RunSection("models", _models, lambda i: i.models is not None),
    RunSection("latency", _latency),
    # A pooling run (embeddings, rerank) has no tokens, hence no per-user TPS.
    RunSection("tps", _tps, lambda i: "per_user_tps" in i.summary),
    RunSection("reasoning", _reasoning, lambda i: i.reasoning is not None),
    RunSection("sessions", _sessions, lambda i: i.sessions is not None),
    RunSection("images", _images, lambda i: i.images is not None),
    RunSection("timeline", _timeline),
    RunSection("steps", _steps),
    RunSection("roofline", _roofline),
    RunSection("errors", _errors),
    RunSection("validity", _validity, lambda i: bool(i.validity_findings)),
    RunSection("samples", _samples, lambda i: i.samples is not None),
)


def _page_notes(inputs: RunPageInputs) -> list[str]:
    """What the run did not record, for the top of the page."""
    notes = [n.text for n in inputs.view.notes if not (inputs.died and n.topic == "steps")]
    notes += inputs.steps_notes if inputs.died else []
    return notes + [f"Roofline: {n}" for n in inputs.roof.notes]


def build_run_page(view: RunView) -> Page:
    """Every section of a run's dashboard that applies (RUN_SECTIONS), with the notes of what
    is missing."""
    inputs = RunPageInputs(view)
    simulated, _ = _engine_notes(view.summary)
    invalid = [
        f"not a valid measurement: {line}" for line in violation_lines(view.summary, skip=("busy",))
    ]
    return Page(
        title=f"Run {view.run_id}",
        subtitle=(f"{simulated}. " if simulated else "")
        + "llm-perf-lab dashboard: hover any figure for values and definitions.",
        facts=run_facts(view),
        notes=_page_notes(inputs),
        sections=[row.build(inputs) for row in RUN_SECTIONS if row.applies(inputs)],
        banner=[*run_end_lines(view.summary), *busy_lines(view.summary), *invalid],
    )


def write_run_report(run_folder: Path, summary: JSONView | None = None) -> Path:
    """Write ``run_folder/report.html`` and return its path; ``summary``: the folder's, when it
    has no summary.json and the caller computed it (results.run_summary.summarize_run).

    Raises results.folder.run_folder.RunFolderError when ``run_folder`` is not a run folder; any
    optional file it lacks (summary.json, steps.parquet, samples.parquet) is a note in the page.
    """
    view = load_run_view(run_folder, summary=summary)
    return write_page(build_run_page(view), Path(run_folder) / REPORT_HTML)
