"""The self-contained HTML page: plotly.js embedded once, every figure after it, no network.

The file opens from file:// with no server and no internet: plotly.js (the copy bundled with the
plotly package) is inlined once in <head>, each figure is a div plus a Plotly.newPlot call, the
CSS is inline, and nothing refers to a CDN, a font service or MathJax. Text from a run (labels,
error messages) is escaped before it reaches the page.
"""

from __future__ import annotations

import functools
import html
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import plotly.graph_objects as go
import plotly.io as pio
from plotly.offline import get_plotlyjs

from dashboards.style import PLOT_CONFIG
from perfmodel.files import atomic_write_text

__all__ = ["Page", "Section", "html_table", "render_page", "write_page"]


@dataclass(frozen=True)
class Section:
    """One part of a page. ``intro``, ``notes`` and ``findings`` are plain text (escaped here);
    ``html`` is markup built by this package (already escaped), shown under the figure.
    ``notes`` say only what the run did not record (the "Not recorded here" box); ``findings``
    are what the data says in words (a simulated device, why a run is not usable, that nothing
    failed), listed without that heading."""

    key: str
    title: str
    intro: str = ""
    figure: go.Figure | None = None
    notes: Sequence[str] = ()
    html: str = ""
    findings: Sequence[str] = ()


@dataclass(frozen=True)
class Page:
    """A whole report: facts are (name, value) pairs shown at the top; ``notes`` list what the
    data did not record (shown at the top, and per section where they belong)."""

    title: str
    subtitle: str = ""
    facts: Sequence[tuple[str, str]] = ()
    notes: Sequence[str] = ()
    sections: Sequence[Section] = field(default_factory=tuple)
    notes_heading: str = "What this run did not record"
    # Shown first, in red: what makes the figures below partial or unusable
    # (results.validity.run_end).
    banner: Sequence[str] = ()


@functools.cache
def _plotly_js() -> str:
    return get_plotlyjs()


_CSS = """
:root { --fg: #1f2328; --muted: #57606a; --line: #d0d7de; --soft: #f6f8fa; --warn: #fff8c5; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, Arial, sans-serif;
       color: var(--fg); background: #fff; }
header { padding: 20px 32px 8px; border-bottom: 1px solid var(--line); }
header h1 { margin: 0 0 4px; font-size: 22px; }
header p { margin: 0; color: var(--muted); }
nav { position: sticky; top: 0; z-index: 10; background: #fff; padding: 8px 32px;
      border-bottom: 1px solid var(--line); font-size: 13px; }
nav a { margin-right: 14px; color: #0969da; text-decoration: none; }
main { padding: 8px 32px 48px; max-width: 1500px; }
section { margin-top: 28px; }
section h2 { font-size: 18px; margin: 0 0 4px; }
.intro { color: var(--muted); margin: 0 0 8px; max-width: 110ch; }
.facts { display: grid; grid-template-columns: repeat(auto-fill, minmax(260px, 1fr));
         gap: 4px 24px; margin: 12px 0 0; }
.facts div { display: flex; gap: 8px; min-width: 0; }
.facts dt { color: var(--muted); flex: 0 1 auto; min-width: 90px; max-width: 45%;
            overflow-wrap: anywhere; }
.facts dd { margin: 0; flex: 1 1 0; min-width: 0; overflow-wrap: anywhere; }
.notes { background: var(--warn); border: 1px solid #d4a72c66; border-radius: 6px;
         padding: 8px 14px; margin: 12px 0; }
.findings { margin: 0 0 10px; padding-left: 20px; }
.notes h3 { margin: 0 0 4px; font-size: 14px; } .notes ul { margin: 0; padding-left: 20px; }
.banner { background: #ffebe9; border: 1px solid #cf222e66; border-radius: 6px;
          padding: 8px 14px; margin: 12px 0; font-weight: 600; }
.figure { border: 1px solid var(--line); border-radius: 6px; padding: 4px; }
table.data { border-collapse: collapse; margin: 10px 0; font-variant-numeric: tabular-nums; }
table.data th, table.data td { border-bottom: 1px solid var(--line); padding: 4px 10px;
                               text-align: right; }
table.data th:first-child, table.data td:first-child { text-align: left; }
table.data thead th { background: var(--soft); }
td.better { color: #1a7f37; } td.worse { color: #cf222e; }
footer { color: var(--muted); font-size: 12px; padding: 0 32px 24px; }
"""


def escape(text: object) -> str:
    """Text made safe in HTML content and attribute values."""
    return html.escape(str(text), quote=True)


def _notes_html(notes: Sequence[str], heading: str) -> str:
    if not notes:
        return ""
    items = "".join(f"<li>{escape(n)}</li>" for n in notes)
    return f'<div class="notes"><h3>{escape(heading)}</h3><ul>{items}</ul></div>'


def _figure_html(section: Section) -> str:
    fig = section.figure
    if fig is None:
        return ""
    height = fig.layout.height or 450
    body = pio.to_html(
        fig,
        config=PLOT_CONFIG,
        include_plotlyjs=False,
        include_mathjax=False,
        full_html=False,
        div_id=f"fig-{section.key}",
        default_height=f"{height}px",
        validate=True,
    )
    return f'<div class="figure" data-figure="{escape(section.key)}">{body}</div>'


def _section_html(section: Section) -> str:
    parts = [f'<section id="{escape(section.key)}"><h2>{escape(section.title)}</h2>']
    if section.intro:
        parts.append(f'<p class="intro">{escape(section.intro)}</p>')
    parts.append(_notes_html(section.notes, "Not recorded here"))
    if section.findings:
        items = "".join(f"<li>{escape(n)}</li>" for n in section.findings)
        parts.append(f'<ul class="findings">{items}</ul>')
    parts.append(_figure_html(section))
    parts.append(section.html)
    parts.append("</section>")
    return "".join(parts)


def html_table(
    header: Sequence[str],
    rows: Sequence[Sequence[str]],
    classes: Sequence[Sequence[str]] | None = None,
) -> str:
    """A data table; every cell is escaped. ``classes`` gives a CSS class per cell (or "")."""
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = []
    for r, row in enumerate(rows):
        cells = []
        for c, cell in enumerate(row):
            css = classes[r][c] if classes and classes[r][c] else ""
            attr = f' class="{escape(css)}"' if css else ""
            cells.append(f"<td{attr}>{escape(cell)}</td>")
        body.append(f"<tr>{''.join(cells)}</tr>")
    return (
        f'<table class="data"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'
    )


def render_page(page: Page) -> str:
    """The page as one HTML document (str)."""
    facts = "".join(f"<div><dt>{escape(k)}</dt><dd>{escape(v)}</dd></div>" for k, v in page.facts)
    nav = "".join(f'<a href="#{escape(s.key)}">{escape(s.title)}</a>' for s in page.sections)
    made = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return "".join(
        [
            '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>{escape(page.title)}</title><style>{_CSS}</style>",
            # The bundled plotly.js, once; the figures below only call Plotly.newPlot.
            '<script type="text/javascript">',
            'window.PlotlyConfig = {MathJaxConfig: "local"};</script>',
            f'<script type="text/javascript">{_plotly_js()}</script>',
            "</head><body>",
            f"<header><h1>{escape(page.title)}</h1><p>{escape(page.subtitle)}</p>",
            "".join(f'<p class="banner">{escape(line)}</p>' for line in page.banner),
            f'<dl class="facts">{facts}</dl>' if facts else "",
            _notes_html(page.notes, page.notes_heading),
            "</header>",
            f"<nav>{nav}</nav><main>",
            *(_section_html(s) for s in page.sections),
            f"</main><footer>Written by llm-perf-lab dashboards on {made}; "
            "plotly.js embedded: this file opens offline.</footer></body></html>\n",
        ]
    )


def write_page(page: Page, path: Path | str) -> Path:
    """Write ``page`` to ``path`` atomically (a temporary file renamed); returns the path."""
    return atomic_write_text(path, render_page(page))
