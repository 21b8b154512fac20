"""The checks of ``benchmarks/gpu_check.py``: one function per line of its table.

- ``rows``: a check's result (PASS, MISS or SKIP with the reason and the figures measured) and
  the table and JSON they print as.
- ``figures``: the arithmetic the checks judge by (MBU of decode steps, host time against
  CUDA-event truth, logit error, token agreement), plain enough to be tested on a CPU.
- ``engine_runs``: one reference engine on the GPU, driven offline, with CUDA-event timing
  and logit capture around its executor.
- ``device_checks``, ``engine_checks``, ``run_checks``: the checks themselves.
- ``runner``: the table's lines in order, each with its time budget; every line SKIP, with the
  reason, where there is no CUDA device.
"""
