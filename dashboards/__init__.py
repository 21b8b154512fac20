"""Plotly dashboards: every run, comparison, sweep and ablation as one self-contained HTML file.

Entry points (import the module you need; this package imports nothing by itself):

- ``dashboards.pages.report.write_run_report(run_folder) -> Path``: a run folder's
  ``report.html``.
- ``dashboards.pages.compare.write_compare_report(run_folders, out=None, labels=None) -> Path``.
- ``dashboards.pages.sweep.write_sweep_report(SweepInput(runs, values, parameter), out) -> Path``.
- ``dashboards.pages.ablation.write_ablation_report(AblationInput(runs, settings), out) -> Path``.

Rooms: ``pages`` (the HTML pages and their layout) over ``figures`` (one module per figure)
over ``runview`` (a run folder loaded for drawing), ``definitions`` and ``style``.

Figures read only run folders (results.folder.run_folder), never loadgen or engine internals;
optional
files (summary.json, steps.parquet, samples.parquet) are read defensively and what a run did
not record is said in the page.
"""
