"""Figures of particular workloads, beside the request figures every run has: an embeddings or
rerank run's (``pooling``), the tool calls the answers made (``tool_calls``), the images the
requests sent (``images``), agent sessions per turn and per session (``sessions``)."""
