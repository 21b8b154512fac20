"""Figures of particular workloads, beside the request figures every run has: the tool calls the
answers made (``tool_calls``), agent sessions per turn and per session (``sessions``)."""
