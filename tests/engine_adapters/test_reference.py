"""The reference adapter's `bench serve` command line: its flags are the settings' own, so
`bench serve`'s parser gives back the EngineConfig they came from."""

from __future__ import annotations

from typing import Any

import pytest
import typer

from bench.cli.app import app
from bench.cli.serve import config_from_options
from engine.config import EngineConfig, SettingError
from engine_adapters.reference import serve_command

# Every setting away from its default where the rules allow (a simulated device takes gpu,
# tp and the acceptance rate; draft_model excludes draft_num_layers).
NON_DEFAULT: dict[str, Any] = {
    "model": "llama-3-70b", "served_model_name": "big", "dtype": "bfloat16", "device": "sim",
    "seed": 3, "max_model_len": 4096, "quantization": "int4", "quant_group_size": 64,
    "block_size": 32, "kv_cache_memory_bytes": 2**30, "kv_layout": "contiguous",
    "enable_prefix_caching": False, "kv_cache_dtype": "fp8", "max_num_seqs": 12,
    "max_num_batched_tokens": 512, "enable_chunked_prefill": False, "batching": "static",
    "step_delay_ms": 1.5, "tp": 4, "num_threads": 2, "prefill_num_threads": 3,
    "speculative": "draft", "num_speculative_tokens": 5, "prompt_lookup_min": 1,
    "prompt_lookup_max": 6, "draft_model": "tiny", "attention_backend": "torch",
    "custom_ops": "native", "gpu": "h100-sxm", "gpu_memory_utilization": 0.8,
    "sim_speedup": 0.0, "sim_acceptance_rate": 0.6, "sim_step_overhead_ms": 0.25,
}  # fmt: skip


def parsed_by_bench_serve(command: list[str]) -> tuple[EngineConfig, dict[str, Any]]:
    """What `bench serve` makes of ``command`` (python -m bench serve ...), by its own parser."""
    assert command[1:4] == ["-m", "bench", "serve"]
    serve = typer.main.get_command(app).commands["serve"]  # type: ignore[attr-defined]
    with serve.make_context("serve", command[4:]) as ctx:
        return config_from_options(ctx.params), ctx.params


@pytest.mark.parametrize(
    "config",
    [EngineConfig(), EngineConfig.from_flat(NON_DEFAULT)],
    ids=["defaults", "non-defaults"],
)
def test_flags_round_trip_into_an_identical_engine_config(config: EngineConfig) -> None:
    command = serve_command("127.0.0.1", 8123, config.to_flat())
    parsed, params = parsed_by_bench_serve(command)
    assert parsed == config
    assert (params["host"], params["port"]) == ("127.0.0.1", 8123)


def test_only_the_settings_given_become_flags() -> None:
    command = serve_command("127.0.0.1", 8000, {"max_num_seqs": 8, "num_threads": None,
                                                "enable_prefix_caching": False})  # fmt: skip
    assert command[8:] == ["--max-num-seqs", "8", "--no-enable-prefix-caching"]


def test_an_unknown_setting_is_refused_before_any_process_starts() -> None:
    with pytest.raises(SettingError, match="batchng is not an engine setting; did you mean"):
        serve_command("127.0.0.1", 8000, {"batchng": "static"})
