"""Plotly dashboards: every run, comparison, sweep and ablation as one self-contained HTML file.

Entry points (import the module you need; this package imports nothing by itself):

- ``dashboards.report.write_run_report(run_folder) -> Path``: ``report.html`` in a run folder.
- ``dashboards.compare.write_compare_report(run_folders, out=None, labels=None) -> Path``.
- ``dashboards.sweep.write_sweep_report(SweepInput(runs, values, parameter), out) -> Path``.
- ``dashboards.ablation.write_ablation_report(AblationInput(runs, settings), out) -> Path``.

Figures read only run folders (results.run_folder), never loadgen or engine internals; optional
files (summary.json, steps.parquet, samples.parquet) are read defensively and what a run did
not record is said in the page.
"""
