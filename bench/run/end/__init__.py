"""How a run ends: signals, exit codes, the usability verdict, and the terminal's tables of the
summary."""
