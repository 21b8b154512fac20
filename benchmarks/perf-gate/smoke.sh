#!/usr/bin/env bash
# CPU smoke gate for this repository's CI: 3 fresh runs of smoke.toml against the committed
# baseline smoke-baseline.json, judged by smoke-rules.toml (whose header explains the limits).
#
#   benchmarks/perf-gate/smoke.sh                 gate; exit 0 pass, 1 regression, 2 unusable
#   benchmarks/perf-gate/smoke.sh --rebaseline    record 5 runs and rewrite the baseline (commit
#                                                 it after an intended speed change)
#
# Reports land in $PERF_GATE_OUT (default runs/perf-gate-smoke): the run folders, gate.xml
# (JUnit) and gate.md (Markdown). On 2 shared cores a session can sit 30-40% off another, so an
# inconclusive verdict is allowed (exit 0 with a warning in the reports): only a proven
# regression or unusable input fails CI. A machine of other hardware than the baseline's (a
# CI machine with another CPU model) is said so and not judged: record a baseline there to gate
# it. About 45 s on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/../.."

here=benchmarks/perf-gate
out="${PERF_GATE_OUT:-runs/perf-gate-smoke}"
bench="${BENCH:-bench}"
# No probes: they are not what this gate measures, and their sampling competes for the 2 cores.
run_args=(--scenario "$here/smoke.toml" --no-live --no-probes)

if [[ "${1:-}" == "--rebaseline" ]]; then
    rm -rf "$out/baseline"
    $bench run "${run_args[@]}" --repeat 5 --runs-dir "$out/baseline"
    $bench baseline save "$out"/baseline/*/ --name gate-smoke-cpu -o "$here/smoke-baseline.json"
    exit 0
fi

rm -rf "$out/candidate"
$bench run "${run_args[@]}" --repeat 3 --runs-dir "$out/candidate"
$bench gate "$out"/candidate/*/ \
    --baseline "$here/smoke-baseline.json" \
    --rules "$here/smoke-rules.toml" \
    --junit "$out/gate.xml" \
    --markdown "$out/gate.md" \
    --allow-inconclusive \
    --skip-other-hardware
