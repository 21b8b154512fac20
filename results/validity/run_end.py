"""A run that ended early, said once: summary.json's keys and the lines readers print.

run.json records why a run ended before its plan did (``interrupted``: a signal; ``engine_died``:
the engine's death; see results.schema.run_json). :func:`run_end_summary` turns them into
summary.json's ``partial`` (the sentence a reader shows as a banner), ``interrupted`` and
``engine_died``; the terminal summary and report.html print :func:`run_end_lines` of that
summary, so every reader says the same words. A summary with ``engine_died``, or ``interrupted``
during the load, is of an unusable run (:func:`ended_early`): its failures measure the crash,
its figures a part of the plan.
"""

from __future__ import annotations

from collections.abc import Mapping

from perfmodel.files import JSONObject, JSONView

__all__ = [
    "ended_early",
    "engine_death_line",
    "incomplete_line",
    "interruption_line",
    "run_end_lines",
    "run_end_summary",
]


def _at(t_s: float | None) -> str:
    return f" at t={t_s:.2f} s" if t_s is not None else ""


def interruption_line(section: JSONView) -> str:
    """ "partial run: interrupted by SIGINT at t=6.12 s: 80 requests recorded (4 cancelled in
    flight), 216 never sent; the figures cover the recorded requests only"."""
    parts = f"{section['requests_recorded']} requests recorded"
    parts += f" ({section['cancelled_in_flight']} cancelled in flight)"
    if section.get("not_sent") is not None:
        parts += f", {section['not_sent']} never sent"
    after = " after the load had finished" if section.get("phase") == "after the load" else ""
    return (
        f"partial run: interrupted by {section['signal']}{_at(section.get('t_s'))}{after}: "
        f"{parts}; the figures cover the recorded requests only"
    )


def ended_early(run_json: JSONView) -> str | None:
    """Why a run's figures are not the whole plan's, where they are not: its engine died, or
    a signal stopped its load (a signal after the load had finished cuts nothing). Such a run
    is kept, marked, and not usable: the history, trends and gates skip it by default."""
    died = run_json.get("engine_died")
    if isinstance(died, Mapping):
        return engine_death_line(died)
    interrupted = run_json.get("interrupted")
    if isinstance(interrupted, Mapping) and interrupted.get("phase") != "after the load":
        return interruption_line(interrupted)
    return None


def engine_death_line(section: JSONView) -> str:
    """ "the engine died at t=4.21 s (signal 9, SIGKILL): 4 requests failed in flight, 56 never
    sent"; "never sent" counts the requests refused after its death and those never sent."""
    how = []
    if section.get("signal"):
        how.append(section["signal"])
    elif section.get("exit_code") is not None:
        how.append(f"exit code {section['exit_code']}")
    if section.get("detected_by") == "health check":
        how.append("unreachable after the load")
    cause = f" ({', '.join(how)})" if how else ""
    never = int(section.get("refused") or 0) + int(section.get("not_sent") or 0)
    return (
        f"the engine died{_at(section.get('t_s'))}{cause}: {section['failed_in_flight']} "
        f"requests failed in flight, {never} never sent"
    )


def incomplete_line(section: JSONView) -> str:
    """ "incomplete run: it stopped without closing its folder (killed, or the machine lost
    power): 812 requests flushed to disk; ..." (results.folder.parts.record_stream)."""
    flushed = section.get("requests_flushed")
    count = f": {flushed} requests flushed to disk" if flushed is not None else ""
    return (
        f"incomplete run: it stopped without closing its folder (killed, or the machine lost "
        f"power){count}; those of its last {section.get('flush_s', '?')} s and those in flight "
        "were lost; the figures cover the flushed requests only"
    )


def run_end_summary(run_json: JSONView) -> JSONObject:
    """summary.json's keys for a run ended early (module docstring); {} for a complete run."""
    out: JSONObject = {}
    lines = []
    if died := run_json.get("engine_died"):
        out["engine_died"] = dict(died)
        lines.append(engine_death_line(died))
    if interrupted := run_json.get("interrupted"):
        out["interrupted"] = dict(interrupted)
        lines.append(interruption_line(interrupted))
    if incomplete := run_json.get("incomplete"):
        out["incomplete"] = dict(incomplete)
        lines.append(incomplete_line(incomplete))
    if lines:
        out["partial"] = "; ".join(lines)
    return out


def run_end_lines(summary: JSONView) -> list[str]:
    """The lines a reader prints above a run's figures (empty for a complete run)."""
    lines = []
    if died := summary.get("engine_died"):
        lines.append(engine_death_line(died))
    if interrupted := summary.get("interrupted"):
        lines.append(interruption_line(interrupted))
    if incomplete := summary.get("incomplete"):
        lines.append(incomplete_line(incomplete))
    return lines
