"""Secrets out of launch command lines and messages (results.folder.redact)."""

from __future__ import annotations

import shlex

import pytest

from results.folder.redact import (
    REDACTED,
    command_secrets,
    is_secret_assignment,
    is_secret_flag,
    redact_command,
    redact_text,
)

LINE = (
    "env VLLM_API_KEY=sk-a1 HF_TOKEN=hf_b2 CUDA_VISIBLE_DEVICES=0 vllm serve /m --api-key sk-c3 "
    "--hf-token=hf_d4 --max-num-batched-tokens 8192 --ssl-keyfile k.pem --client-secret e5 "
    "--password f6 --tokenizer /t --port 8000"
)
SECRETS = ["sk-a1", "hf_b2", "sk-c3", "hf_d4", "e5", "f6"]


def test_flags_and_assignments_lose_their_values_and_keep_the_rest() -> None:
    shown = redact_command(shlex.split(LINE))
    assert shown == shlex.split(
        "env VLLM_API_KEY=*** HF_TOKEN=*** CUDA_VISIBLE_DEVICES=0 vllm serve /m --api-key *** "
        "--hf-token=*** --max-num-batched-tokens 8192 --ssl-keyfile k.pem --client-secret *** "
        "--password *** --tokenizer /t --port 8000"
    )
    assert redact_command(shown) == shown  # idempotent
    assert command_secrets(shlex.split(LINE)) == SECRETS


@pytest.mark.parametrize(
    "flag", ["--api-key", "--token", "--hf-token", "-hf-token", "--auth-token", "--x-key",
             "--api-keys", "--client-secret", "--db-password", "--aws-credentials"],
)  # fmt: skip
def test_secret_flags(flag: str) -> None:
    assert is_secret_flag(flag)


@pytest.mark.parametrize(
    "flag", ["--max-num-batched-tokens", "--max-tokens", "--ssl-keyfile", "--tokenizer",
             "--port", "--kv-cache-dtype", "--keep-alive"],
)  # fmt: skip
def test_flags_that_are_not_secrets(flag: str) -> None:
    assert not is_secret_flag(flag)


def test_assignment_names() -> None:
    for name in ("OPENAI_API_KEY", "HF_TOKEN", "KEY", "AWS_SECRET_ACCESS_KEY", "PGPASSWORD"):
        assert is_secret_assignment(name), name
    for name in ("CUDA_VISIBLE_DEVICES", "MONKEY", "PYTHONPATH", "OMP_NUM_THREADS"):
        assert not is_secret_assignment(name), name


def test_a_secret_flag_without_a_value_hides_nothing_else() -> None:
    assert redact_command(["srv", "--api-key", "--port", "1"]) == [
        "srv",
        "--api-key",
        "--port",
        "1",
    ]


def test_a_shell_line_inside_one_argument() -> None:
    shown = redact_command(["bash", "-c", "vllm serve --api-key sk-z --port 8 --token=t9"])
    assert shown == ["bash", "-c", f"vllm serve --api-key {REDACTED} --port 8 --token={REDACTED}"]
    # A secret assignment's whole value goes, even when it is a shell line.
    assert redact_command(["sh", "-c", "OPENAI_API_KEY=sk-9 vllm"]) == [
        "sh",
        "-c",
        "OPENAI_API_KEY=***",
    ]


def test_free_text_known_values_and_bearer_tokens() -> None:
    text = (
        f"the engine exited: {LINE}\n--- its log ---\nnon-default args: {{'api_key': ['sk-c3']}}\n"
        "curl -H 'Authorization: Bearer tok.en-1' x"
    )
    shown = redact_text(text, command_secrets(shlex.split(LINE)))
    for secret in [*SECRETS, "tok.en-1"]:
        assert secret not in shown
    assert "--max-num-batched-tokens 8192" in shown and "CUDA_VISIBLE_DEVICES=0" in shown
    assert "Bearer ***" in shown
