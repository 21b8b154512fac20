"""The token counts table (bench/run/end/validity_report.py) says why a row is not judged."""

from __future__ import annotations

import io

from rich.console import Console

from bench.run.end.validity_report import reconciliation_table


def test_a_row_not_judged_says_why() -> None:
    """A first chat run's prompt tokens read 'ratio 1.145 (not judged) off 120' at 2301656,
    with nothing to say the 14.5% is the server's chat template."""
    note = "chat: the server counts its chat template, which the client does not tokenize"
    section = {
        "max_mismatch": 0.02, "request_tolerance": 0.02,
        "comparisons": [
            {"what": "prompt tokens", "counted_by": ["tokenizer"], "requests": 120,
             "other_total": 12000, "server_total": 13740, "ratio": 1.145, "judged": False,
             "exceeds": False, "requests_off": 120, "note": note},
            {"what": "output tokens (engine)", "counted_by": ["engine"], "requests": 120,
             "other_total": 5000, "server_total": 5000, "ratio": 1.0, "judged": True,
             "exceeds": False, "requests_off": 0, "note": "judged rows say nothing more"},
        ],
    }  # fmt: skip
    console = Console(file=io.StringIO(), width=200)
    console.print(reconciliation_table(section))
    text = " ".join(console.file.getvalue().split())  # the caption wraps at the table
    assert "1.145 (not judged)" in text
    assert f"prompt tokens, not judged: {note}" in text
    assert "judged rows say nothing more" not in text
