"""The options bench's commands take, each declared once: the shared ones, `bench run`'s own,
the key and headers, `--set`, and the scenario."""
