"""How a run ends: its folder written (run_writer), signals, exit codes, the usability verdict,
and the terminal's tables of the summary."""
