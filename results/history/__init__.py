"""The run history: every run folder indexed in one DuckDB file, its series and change points."""
