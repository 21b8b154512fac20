"""`bench serve` as a user runs it, in its own process: /health keeps its latency while a hostile
request is handled, and a server whose engine core dies answers JSON errors, then exits
non-zero so that a supervisor restarts it."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from engine.serving.guards.limits import ServerLimits
from engine.serving.protocol import MAX_MESSAGES
from tests.support.server_fixture import ServeProcess, bench_serve

MAX_BODY = ServerLimits().max_body_bytes
# /health's bound while one hostile request is handled (seconds), beyond what parsing its
# JSON costs (the server parses a body on its event loop, as FastAPI does).
HEALTH_BOUND_S = 0.1


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    with bench_serve(log, "--max-model-len", "2048") as s:
        yield s


def _send_raw(port: int, path: str, body: bytes) -> bytes:
    """POST ``body`` over a raw socket; the status line and headers of the answer."""
    head = (
        f"POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        # A 413 may close the connection before the whole body is sent.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            s.sendall(head + body)
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    return answer


def _hostile_bodies() -> dict[str, tuple[str, bytes]]:
    half = MAX_BODY // 2
    return {
        "10 MB prompt": (
            "/v1/completions",
            json.dumps({"model": "tiny", "prompt": "x " * (5 << 20), "max_tokens": 4}).encode(),
        ),
        "50 MiB nested prompt": (
            "/v1/completions",
            json.dumps({"prompt": {"a": "z" * (50 << 20)}}).encode(),
        ),
        "object of many keys": (
            "/v1/completions",
            b'{"model":"tiny","prompt":{'
            + b",".join(b'"%x":0' % i for i in range(MAX_BODY // 12))
            + b"}}",
        ),
        "list of objects": (
            "/v1/completions",
            b'{"model":"tiny","prompt":[' + b",".join([b"{}"] * (half // 2)) + b"]}",
        ),
        "token ids": (
            "/v1/completions",
            b'{"model":"tiny","prompt":[' + b",".join([b"7"] * (half // 2)) + b"]}",
        ),
        "long text": (
            "/v1/completions",
            json.dumps({"model": "tiny", "prompt": "lorem ipsum " * (half // 12)}).encode(),
        ),
        "200,000 stop strings": (
            "/v1/completions",
            json.dumps({"model": "tiny", "prompt": "x", "stop": ["s"] * 200_000}).encode(),
        ),
        "many messages": (
            "/v1/chat/completions",
            json.dumps(
                {"model": "tiny", "messages": [{"role": "user", "content": "a"}] * MAX_MESSAGES}
            ).encode(),
        ),
    }


def _worst_health_s(client: httpx.Client, busy: threading.Thread | None, idle_s: float) -> float:
    """The slowest /health answer while ``busy`` runs (or, without it, over ``idle_s``)."""
    worst, until = 0.0, time.monotonic() + idle_s
    if busy is not None:
        busy.start()
    while busy.is_alive() if busy is not None else time.monotonic() < until:
        t = time.perf_counter()
        assert client.get("/health").status_code == 200
        worst = max(worst, time.perf_counter() - t)
        time.sleep(0.01)
    return worst


def _parse_s(body: bytes) -> float:
    """The least of 3 times this process takes to parse ``body`` as JSON (or to fail to), s:
    the part of a hostile request's cost that grows with the machine's load."""
    times = []
    for _ in range(3):
        start = time.perf_counter()
        with contextlib.suppress(ValueError, RecursionError):
            json.loads(body)
        times.append(time.perf_counter() - start)
    return min(times)


def test_health_answers_quickly_while_any_hostile_request_is_handled(served: ServeProcess) -> None:
    """A request that held the event loop X ms would delay a /health answer by X in every
    round; the scheduler of a loaded machine delays answers too, idle or not, but not in every
    round. So: per hostile request, the least over 3 rounds of (the slowest /health beside
    it) less (the slowest /health just before, idle), within HEALTH_BOUND_S beyond twice its
    JSON parse here where it is within the body limit (a loaded box parsed the object of many
    keys in 4x the idle time)."""
    port = int(served.url.rsplit(":", 1)[1])
    excess: dict[str, float] = {}
    slowest: dict[str, float] = {}
    with httpx.Client(base_url=served.url, timeout=10) as client:
        for name, (path, body) in _hostile_bodies().items():
            rounds, beside = [], []
            for _ in range(3):
                answer: list[bytes] = []
                sender = threading.Thread(
                    target=lambda: answer.append(_send_raw(port, path, body))  # noqa: B023
                )
                idle = _worst_health_s(client, None, 0.2)
                beside.append(_worst_health_s(client, sender, 0))
                rounds.append(beside[-1] - idle)
                sender.join()
                status = answer[0].split(b"\r\n", 1)[0]
                assert status.split()[1] in (b"400", b"413"), (name, status)
                assert len(answer[0]) < 4096, (name, len(answer[0]))
            # A body past the limit is refused unread: no parse is allowed for it.
            parsed_s = _parse_s(body) if len(body) <= MAX_BODY else 0.0
            excess[name] = min(rounds) - 2 * parsed_s
            slowest[name] = min(beside)
    for what, figures in (("slowest /health beside", slowest), ("less idle", excess)):
        print(f"{what} each hostile request (ms):", {
            k: round(v * 1000, 1) for k, v in figures.items()
        })  # fmt: skip
    assert max(excess.values()) < HEALTH_BOUND_S, excess


def _engine_core(server: psutil.Process) -> psutil.Process:
    for child in server.children():
        if any("spawn_main" in part for part in child.cmdline()):
            return child
    raise AssertionError(f"no engine core among {server.children()}")


def test_a_killed_engine_core_gives_json_errors_and_the_server_exits_non_zero(
    tmp_path: Path,
) -> None:
    body = {"model": "tiny", "prompt": "in flight", "max_tokens": 500, "ignore_eos": True}
    with bench_serve(tmp_path / "serve.log", "--step-delay-ms", "20") as served:
        answers: dict[str, httpx.Response | str] = {}

        def whole(i: int) -> None:
            url = served.url + "/v1/completions"
            answers[f"whole-{i}"] = httpx.post(url, json=body, timeout=30)

        def streamed(i: int) -> None:
            with httpx.stream(
                "POST", served.url + "/v1/completions", json={**body, "stream": True}, timeout=30
            ) as r:
                answers[f"stream-{i}"] = "\n".join(r.iter_lines())

        threads = [threading.Thread(target=whole, args=(i,)) for i in range(3)]
        threads += [threading.Thread(target=streamed, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        time.sleep(1.5)  # all five are generating (20 ms a step, 500 tokens)
        os.kill(_engine_core(psutil.Process(served.process.pid)).pid, signal.SIGKILL)
        for t in threads:
            t.join(timeout=30)
        assert served.process.wait(timeout=30) != 0, served.log()
        log = served.log()
    assert len(answers) == 5, answers
    for name, answer in answers.items():
        if isinstance(answer, httpx.Response):
            assert answer.status_code == 503, (name, answer.text)
            assert answer.json()["error"]["code"] == "engine_dead"
        else:
            events = [line.removeprefix("data: ") for line in answer.splitlines() if line]
            assert events[-1] == "[DONE]"
            assert json.loads(events[-2])["error"]["code"] == "engine_dead"
    assert "error: the engine died while serving" in log and "Traceback" not in log
