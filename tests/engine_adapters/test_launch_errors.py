"""`--launch` and `--launch-model` errors: a missing program is one line naming it and the
option, never a traceback; an engine that fails to start is reported with its command line and
log tail redacted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from engine_adapters.launch_command import LaunchError, launch_plan, program_of, start_engine
from engine_adapters.launcher import EngineStartError, launch
from engine_adapters.registry import get_adapter
from tests.support.cache import isolated_cache

pytestmark = pytest.mark.timeout(120)


def test_the_program_is_found_past_env_and_its_assignments() -> None:
    assert program_of(["env", "-u", "X", "-i", "A_KEY=1", "vllm", "serve"]) == "vllm"
    assert program_of(["env", "A_KEY=1", "B=2", "vllm", "serve"]) == "vllm"
    assert program_of(["/usr/bin/env", "A=1"]) is None
    assert program_of(["llama-server", "-m", "x"]) == "llama-server"


@pytest.mark.parametrize(
    "command",
    [
        "nonexistent-exe --port {port}",
        "env VLLM_API_KEY=sk-canary-l1 nonexistent-exe --port {port}",
    ],
)
def test_a_missing_program_is_named(command: str) -> None:
    plan = launch_plan(get_adapter("reference"), command)
    with pytest.raises(LaunchError) as info:
        start_engine(get_adapter("reference"), plan)
    message = str(info.value)
    assert message == "--launch: 'nonexistent-exe' is not on PATH; install it or give its full path"


def test_a_path_that_is_not_executable_is_named(tmp_path: Path) -> None:
    script = tmp_path / "serve.sh"
    script.write_text("#!/bin/sh\n")
    plan = launch_plan(get_adapter("reference"), f"{script} --port {{port}}")
    with pytest.raises(LaunchError, match=r"^--launch: '.*serve\.sh' is not an executable file$"):
        start_engine(get_adapter("reference"), plan)


def test_llamacpp_without_llama_server_names_launch_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    isolated_cache(monkeypatch, tmp_path / "cache")
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing on PATH either
    with pytest.raises(LaunchError) as info:
        launch_plan(get_adapter("llamacpp"), None, "x.gguf")
    message = str(info.value)
    assert message.startswith("--launch-model for llamacpp: 'llama-server' is neither")
    assert "\n" not in message
    with pytest.raises(LaunchError, match=r"^--launch: \{exe\} stands for 'llama-server'"):
        launch_plan(get_adapter("llamacpp"), "{exe} -m x.gguf --port {port}")


def test_the_launcher_says_an_exec_failure_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(EngineStartError) as info:
        launch([str(tmp_path), "--api-key", "sk-canary-l2"], "http://127.0.0.1:9", timeout_s=5)
    message = str(info.value)
    assert message.startswith("cannot run ") and "\n" not in message
    assert "sk-canary-l2" not in message and "--api-key ***" in message


def test_a_failed_start_shows_its_command_and_log_redacted() -> None:
    echo = "import sys; print('args:', sys.argv[1:]); sys.exit(3)"
    command = ["env", "HF_TOKEN=hf-canary-l3", sys.executable, "-c", echo,
               "--api-key", "sk-canary-l4"]  # fmt: skip
    with pytest.raises(EngineStartError, match="exited with code 3") as info:
        launch(command, "http://127.0.0.1:9", timeout_s=30)
    message = str(info.value)
    assert "args:" in message  # the log tail is there,
    assert "hf-canary-l3" not in message and "sk-canary-l4" not in message  # its secrets not
    assert "HF_TOKEN=***" in message and "--api-key ***" in message


@pytest.mark.parametrize(
    ("args", "expected", "status"),
    [
        # The engine cannot start: the run could not be made (1).
        (["--launch", "nonexistent-exe --port {port}", "--tokenizer", "tiny"],
         "--launch: 'nonexistent-exe' is not on PATH", 1),
        # No tokenizer for the prompts: refused before anything starts (2).
        (["--engine", "llamacpp", "--launch-model", "x.gguf"], "--launch-model 'x.gguf'", 2),
    ],
    ids=["missing-exe", "gguf-without-tokenizer"],
)  # fmt: skip
def test_bench_run_says_it_in_one_line(
    tmp_path: Path, args: list[str], expected: str, status: int
) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "run", "--no-live", "--runs-dir", str(tmp_path), *args],
        capture_output=True, text=True, timeout=90,
    )  # fmt: skip
    output = proc.stdout + proc.stderr
    assert proc.returncode == status, output
    assert "Traceback" not in output
    # The message (rich wraps it at the console's width) after at most the "starting" line.
    error = output[output.index(expected) :]
    # One message, wrapped by rich at 132 columns (the width of piped output): no blank line.
    assert error.count("\n") <= 4 and "\n\n" not in error and error.endswith("\n"), output
    assert output[: output.index(expected)].count("\n") <= 1, output
