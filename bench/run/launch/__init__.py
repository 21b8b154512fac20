"""The reference engine's launch for a run, and the watch on any engine during the load."""
