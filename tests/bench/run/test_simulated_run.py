"""`bench run` against `bench serve --device sim`: the folder, terminal and dashboard say the
run is simulated, and a multi-turn run says how much of its prompt the prefix cache held."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from bench.cli.app import app
from dashboards.pages.report import REPORT_HTML, write_run_report
from engine.config import EngineConfig

# The engine the module's base_url fixture (tests/conftest.py) serves: a simulated 70B in real
# time, with the prefix cache on.
SERVER_CONFIG = EngineConfig.from_flat(
    dict(
        model="llama-3-70b", device="sim", gpu="a100-80gb", tp=4, max_num_seqs=16,
        enable_prefix_caching=True,
    )
)  # fmt: skip

SCENARIO = """
name = "chat"
users = 2
num_requests = 6
api = "chat"
ignore_eos = true
seed = 0

[workload]
kind = "multiturn"
turns = 3
system_prompt_tokens = 64

[input_len]
kind = "uniform"
low = 16
high = 24

[output_len]
kind = "fixed"
value = 4
"""


def test_a_simulated_multiturn_run_says_sim_and_explains_its_prefill(
    tmp_path: Path, base_url: str
) -> None:
    scenario = tmp_path / "chat.toml"
    scenario.write_text(SCENARIO)
    runs = tmp_path / "runs"
    result = CliRunner().invoke(
        app,
        ["run", "--scenario", str(scenario), "--url", base_url, "--tokenizer", "tiny",
         "--no-live", "--no-probes", "--runs-dir", str(runs)],
        env={"COLUMNS": "200"},
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    (folder,) = runs.iterdir()
    assert folder.name.endswith("-chat-reference-sim"), folder.name
    summary = json.loads((folder / "summary.json").read_text())
    sim = summary["simulated"]
    assert "A100" in sim["gpu"] and sim["tp"] == 4, sim
    line = f"simulated device: {sim['gpu']} x 4, figures are predictions"
    assert line in result.output
    reuse = summary["prefix_cache"]
    # Later turns resend the system prompt and the history: the cache holds some of it, and
    # what the engine prefilled is what it did not hold.
    assert reuse["prefix_cache_hit_tokens"] > 0
    assert reuse["prefilled_tokens"] == reuse["prompt_tokens"] - reuse["prefix_cache_hit_tokens"]
    share = f"{reuse['hit_share']:.0%}"
    note = (
        f"prompt tokens {reuse['prompt_tokens']:,}, prefilled {reuse['prefilled_tokens']:,} "
        "over the whole run: "
        f"{reuse['prefix_cache_hit_tokens']:,} ({share}) came from the prefix cache"
    )
    assert note in result.output

    html = write_run_report(folder).read_text()
    assert (folder / REPORT_HTML).exists()
    assert f"S{line[1:]}." in html
    assert f"Prompt tokens {reuse['prompt_tokens']:,}" in html
