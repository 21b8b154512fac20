"""The GPU workflow's guarantees, read from .github/workflows/perf-gate.yml: no fork pull
request on the self-hosted runner, torch pinned as pyproject.toml pins it and installed from
the runner's index before the project, which cannot replace it; the GPU check first, then the
GPU tests, then the gate."""

from __future__ import annotations

import re

from tests.support.paths import REPO_ROOT

WORKFLOW = (REPO_ROOT / ".github" / "workflows" / "perf-gate.yml").read_text()


def test_fork_pull_requests_never_reach_the_self_hosted_runner() -> None:
    guard = re.search(r"\n    if: >-\n(.*?)\n    runs-on: \[self-hosted, gpu\]", WORKFLOW, re.S)
    assert guard is not None, "the GPU job has no `if:` guard before runs-on"
    text = " ".join(guard.group(1).split())
    assert text == (
        "github.event_name != 'pull_request' || "
        "github.event.pull_request.head.repo.full_name == github.repository"
    )


def test_torch_is_pinned_from_the_runners_index_and_kept() -> None:
    assert "TORCH_INDEX_URL: ${{ vars.TORCH_INDEX_URL ||" in WORKFLOW
    torch_first = WORKFLOW.index('pip install -q "$TORCH_PIN" --index-url "$TORCH_INDEX_URL"')
    project = WORKFLOW.index("pip install -q -e '.[test]' -c \"$RUNNER_TEMP/torch-constraint.txt\"")
    constraint = WORKFLOW.index("pip freeze | grep -i '^torch==' > \"$RUNNER_TEMP/torch-constraint")
    assert torch_first < constraint < project
    # The pin is read from pyproject.toml, where it is declared once.
    assert 'd["project"]["dependencies"] if r.startswith("torch")' in WORKFLOW


def test_the_gpu_check_runs_first_then_the_gpu_tests_then_the_gate() -> None:
    order = [
        WORKFLOW.index("python benchmarks/gpu_check.py --require-gpu --json"),
        WORKFLOW.index("pytest -q -m gpu"),
        WORKFLOW.index("bench run --scenario benchmarks/perf-gate/gpu.toml"),
        WORKFLOW.index('bench gate "$OUT"/candidate/*/'),
    ]
    assert order == sorted(order)
