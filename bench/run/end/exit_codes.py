"""The exit codes of the `bench` commands, declared once, for CI jobs to branch on.

| code | meaning |
|---|---|
| 0 | done, and every run is usable (results.validity.usability) |
| 1 | a run (or a sweep's, ablation's or repeat's point) is not usable: failed requests above
  ``--max-error-rate``, or none succeeded; or a run could not finish (the engine did not start or
  died, the load failed). The run folders finished are written first. |
| 2 | refused before any load: a bad scenario, flag or input folder, or the pre-flight check of
  the scenario against the endpoint (bench.run.endpoint.preflight) |
| 130 | interrupted by SIGINT (Ctrl-C): 128 + 2, as shells report it |
| 143 | interrupted by SIGTERM: 128 + 15 |

`bench gate` keeps its verdict codes (bench.gate.verdict.EXIT_CODES): 0 pass, 1 fail, 2
inconclusive or unusable input.
"""

from __future__ import annotations

import signal

__all__ = ["EXIT_INTERRUPTED", "EXIT_OK", "EXIT_REFUSED", "EXIT_TERMINATED", "EXIT_UNUSABLE"]

EXIT_OK = 0
EXIT_UNUSABLE = 1
EXIT_REFUSED = 2
EXIT_INTERRUPTED = 128 + signal.SIGINT
EXIT_TERMINATED = 128 + signal.SIGTERM
