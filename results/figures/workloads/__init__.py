"""Figures of particular workloads, beside the request figures every run has: agent sessions
per turn and per session (``sessions``)."""
