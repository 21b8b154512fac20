"""`bench report AB_FOLDER`: an A/B folder printed again as `bench ab` printed it, and its page
written again, from the runs ab.json lists (fake run folders, the real judge and writers)."""

from __future__ import annotations

import io
import json
from pathlib import Path

from rich.console import Console

from bench.ab.outputs import write_outputs
from bench.ab.paired import judge_pairs
from bench.ab.reread import load_ab_result, report_ab_folder
from bench.ab.session import AbResult
from bench.gate.rules import load_rules
from results.folder.folder_kinds import AB_JSON, folder_kind
from tests.support.gate_fakes import write_fake_run

RULES = """
min_samples = 20
[metrics]
"tpot_ms.mean" = { max_rise_pct = 10 }
"""
LABELS = ("A: this checkout", "B: this checkout + step_delay_ms=5")


def _ab_folder(tmp_path: Path) -> tuple[Path, str]:
    folder = tmp_path / "20260101T000000Z-synthetic-ab"
    rules = tmp_path / "rules.toml"
    rules.write_text(RULES)
    a = [write_fake_run(folder / "A", seed=i) for i in range(3)]
    b = [write_fake_run(folder / "B", seed=10 + i, slowdown=1.4) for i in range(3)]
    report, paired = judge_pairs(load_rules(rules), a, b, LABELS)
    result = AbResult(folder, report, paired, 3, LABELS, tuple(a), tuple(b))
    out = io.StringIO()
    write_outputs(result, False, Console(file=out, width=160))
    document = {
        "sides": {n: {"description": label} for n, label in zip("AB", LABELS, strict=True)},
        "rules": str(rules),
        "pairs": [
            {
                "pair": i + 1,
                "a_run": str(x.relative_to(folder)),
                "b_run": str(y.relative_to(folder)),
            }
            for i, (x, y) in enumerate(zip(a, b, strict=True))
        ],
        "pairs_run": 3,
        "until_decided": False,
        "stopped_by": None,
        "verdict": report.verdict,
        "notes": list(report.notes),
    }
    (folder / AB_JSON).write_text(json.dumps(document))
    (folder / "ab.html").unlink()
    return folder, out.getvalue()


def test_an_ab_folder_prints_again_what_bench_ab_printed(tmp_path: Path) -> None:
    folder, printed = _ab_folder(tmp_path)
    assert folder_kind(folder) == "ab"
    result, _ = load_ab_result(folder)
    assert result.report is not None and result.report.verdict == "fail"
    out = io.StringIO()
    report_ab_folder(folder, False, Console(file=out, width=160))
    again = out.getvalue()
    # The same table, verdict and pairs line; no page without --html.
    assert again.split("A/B folder")[0] == printed.split("comparison")[0]
    assert "fail after 3 pair(s)" in again and not (folder / "ab.html").exists()
    report_ab_folder(folder, True, Console(file=io.StringIO(), width=160))
    assert "per-pair B / A" in (folder / "ab.html").read_text(encoding="utf-8")


def test_an_ab_that_ended_unusable_prints_why(tmp_path: Path) -> None:
    folder, _ = _ab_folder(tmp_path)
    document = json.loads((folder / AB_JSON).read_text())
    document.update(verdict="unusable", error="B run x is not usable: 9 of 40 requests failed")
    (folder / AB_JSON).write_text(json.dumps(document))
    out = io.StringIO()
    report_ab_folder(folder, True, Console(file=out, width=160))
    assert "unusable: B run x is not usable" in out.getvalue()
    assert not (folder / "ab.html").exists()
