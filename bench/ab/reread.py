"""`bench report AB_FOLDER`: an A/B folder (bench.ab.session) printed again as `bench ab` printed
it, and with ``--html`` its ab.html written again.

ab.json keeps the runs of each pair, the rules' source and the verdict's notes, so the verdict is
judged again from the runs (bench.ab.paired.judge_pairs) by the same rules: the same runs and seed
give the same table. Whether `--allow-busy` or `--allow-invalid` was given is read from the notes
the verdict recorded ("busy machine, judged by --allow-busy: ..."). An A/B that ended unusable,
or before its first verdict, prints its error and what it ran.
"""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console

from bench.ab.outputs import pairs_line, write_page
from bench.ab.paired import judge_pairs
from bench.ab.session import AbResult
from bench.gate.report import render_gate
from bench.gate.rules import load_rules
from bench.run.messages import print_error, print_path
from perfmodel.files import JSONObject
from results.folder.folder_kinds import AB_JSON

__all__ = ["load_ab_result", "report_ab_folder"]


def _flag(notes: list[str], flag: str) -> bool:
    return any(f"judged by {flag}:" in note for note in notes)


def load_ab_result(folder: Path) -> tuple[AbResult, JSONObject]:
    """The A/B result of ``folder`` (judged again from its runs) and its ab.json document.

    Raises ValueError naming ab.json when it is not valid JSON, KeyError/TypeError when a key
    `bench ab` writes is missing, and the gate's errors when the runs cannot be read.
    """
    path = folder / AB_JSON
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON: {exc}") from None
    labels = (document["sides"]["A"]["description"], document["sides"]["B"]["description"])
    pairs = [p for p in document["pairs"] if "a_run" in p and "b_run" in p]
    a_runs = tuple(folder / p["a_run"] for p in pairs)
    b_runs = tuple(folder / p["b_run"] for p in pairs)
    common = {"folder": folder, "labels": labels, "a_runs": a_runs, "b_runs": b_runs}
    if document.get("verdict") in (None, "unusable"):
        why = document.get("error") or "the A/B ended before its first verdict"
        result = AbResult(report=None, paired=(), pairs=len(pairs), unusable=why, **common)
        return result, document
    notes = list(document.get("notes") or [])
    source = document.get("rules")
    rules = load_rules(None if source in (None, "<defaults>") else source)
    report, paired = judge_pairs(
        rules, a_runs, b_runs, labels, _flag(notes, "--allow-busy"), _flag(notes, "--allow-invalid")
    )
    result = AbResult(
        report=report,
        paired=paired,
        pairs=int(document["pairs_run"]),
        stopped_by=document.get("stopped_by"),
        **common,
    )
    return result, document


def report_ab_folder(folder: Path, html: bool, console: Console) -> None:
    """Print the A/B of ``folder`` as `bench ab` did; with ``html`` write its ab.html again."""
    result, document = load_ab_result(Path(folder))
    if result.report is None:
        print_error(console, f"unusable: {result.unusable}")
    else:
        render_gate(result.report, console)
        console.print(pairs_line(result, bool(document.get("until_decided"))))
        if html:
            write_page(result, console)
    print_path(console, "A/B folder", result.folder)
