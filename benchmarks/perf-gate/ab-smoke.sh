#!/usr/bin/env bash
# CPU smoke gate of this repository's CI by A/B on the machine at hand: the engine as it was
# before the last commit that touched it (A: that commit's parent, installed from its own git
# worktree into its own virtualenv, cached by commit) against the working tree's (B), in pairs
# of ab-smoke.toml runs made back to back, judged by ab-rules.toml. No stored baseline, so it
# judges on any hardware.
#
#   benchmarks/perf-gate/ab-smoke.sh            exit 0 pass (or inconclusive), 1 regression,
#                                                2 unusable
#   AB_BASE=REV benchmarks/perf-gate/ab-smoke.sh  compare against REV instead
#
# "The engine" is engine/, engine_adapters/, loadgen/ and bench/run/: a commit that changed
# only docs or dashboards is not what a speed gate judges, so the gate looks back to the last
# commit that did change them. Without that commit's parent (the first commit, or a shallow
# clone: `git fetch --unshallow` gives it) it says so and falls back to the committed-baseline
# gate, smoke.sh, which stays the mode of dedicated GPU runners. 3 to 6 pairs
# (--until-decided), adding none past 300 s (--budget-s); reports in $PERF_GATE_OUT
# (default runs/perf-gate-ab): the A/B folder, gate.xml (JUnit) and gate.md (Markdown).
set -euo pipefail
cd "$(dirname "$0")/../.."

here=benchmarks/perf-gate
out="${PERF_GATE_OUT:-runs/perf-gate-ab}"
bench="${BENCH:-bench}"

fallback() {
    echo "A/B smoke gate: $1; falling back to the committed baseline (smoke.sh)"
    exec "$here/smoke.sh"
}

base="${AB_BASE:-}"
if [[ -z "$base" ]]; then
    last=$(git log -1 --format=%H -- engine engine_adapters loadgen bench/run 2>/dev/null || true)
    [[ -n "$last" ]] || fallback "no commit touched the engine"
    if ! base=$(git rev-parse --verify --quiet "$last^"); then
        if [[ "$(git rev-parse --is-shallow-repository)" == "true" ]]; then
            fallback "a shallow clone lacks the parent of $last"
        fi
        fallback "$last is the first commit: it has no parent to compare with"
    fi
fi
echo "A/B smoke gate: A = $base (before $(git log -1 --format='%h %s' "${last:-$base}" | cut -c1-60)), B = the working tree"

rm -rf "$out"
status=0
# The probes stay on: the CPU probe gives each run's CPU seconds per output token, which
# ab-rules.toml judges beside wall time. --allow-busy: with the probes on, a run on a box that
# other jobs load is marked busy, which the pairing (A and B back to back) allows for and CPU
# time per token is built to look past; without it a shared CI machine never gets a verdict.
$bench ab --scenario "$here/ab-smoke.toml" --rules "$here/ab-rules.toml" \
    --a-rev "$base" --pairs 3 --until-decided --max-pairs 6 --budget-s 300 --allow-busy \
    --runs-dir "$out" --junit "$out/gate.xml" --markdown "$out/gate.md" \
    --allow-inconclusive || status=$?
if [[ $status -eq 2 ]]; then
    fallback "bench ab could not judge (exit 2: see its message above)"
fi
exit $status
