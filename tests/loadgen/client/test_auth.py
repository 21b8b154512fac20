"""--api-key and --header as RequestHeaders: parsing, never showing a value, and the streaming
client sending them on both of its paths (raw HTTP/1.1 and httpx) and to /v1/models."""

from __future__ import annotations

import pytest

from loadgen.client.auth import HEADERS_ENV, HeaderError, RequestHeaders, parse_header
from loadgen.client.stream import ServerUnreachableError, StreamingClient
from loadgen.clock import RunClock
from results.folder.records import RequestRecord
from tests.support.http_server import Handler, HttpRequest, LocalServer, Response, run
from tests.support.loadgen_requests import make_requests, send_once
from tests.support.sse_streams import streaming_handler

pytestmark = pytest.mark.timeout(30)

KEY = "sk-canary-7f3a"


def test_key_and_headers_become_request_headers() -> None:
    headers = RequestHeaders.from_options(KEY, ["X-Org: team-a", "x-trace:  t 1  "])
    assert headers.as_dict() == {
        "Authorization": f"Bearer {KEY}",
        "X-Org": "team-a",
        "x-trace": "t 1",
    }
    assert set(headers.secret_values()) == {f"Bearer {KEY}", KEY, "team-a", "t 1"}
    # A later header of the same name (any case) wins, so --header Authorization beats the key.
    over = RequestHeaders.from_options(KEY, ["authorization: Basic abc"])
    assert over.as_dict() == {"authorization": "Basic abc"}
    assert not RequestHeaders.from_options(None, [])


def test_values_are_never_shown() -> None:
    headers = RequestHeaders.from_options(KEY, ["X-Secret: hush-42"])
    for text in (repr(headers), str(headers), f"{headers}", repr([headers])):
        assert KEY not in text and "hush-42" not in text
        assert "Authorization" in text and "X-Secret" in text


@pytest.mark.parametrize(
    ("given", "match"),
    [
        ("no colon here", "expected 'Name: value'"),
        (": value", "expected 'Name: value'"),
        ("Bad Name: v", "a header name is"),
        ("Content-Length: 3", "sets this header itself"),
        ("X-A: one\r\nX-B: two", "line break"),
    ],
)
def test_malformed_headers_are_one_line_errors_naming_the_option(given: str, match: str) -> None:
    with pytest.raises(HeaderError, match=match) as info:
        parse_header(given)
    message = str(info.value)
    assert message.startswith("--header") and "\n" not in message
    assert "value" not in given or "two" not in message  # the value is not quoted back


def test_a_key_with_whitespace_is_refused_without_quoting_it() -> None:
    with pytest.raises(HeaderError, match="--api-key") as info:
        RequestHeaders.from_options("Bearer sk-canary-x", [])
    assert "sk-canary-x" not in str(info.value)


def test_environment_round_trip() -> None:
    headers = RequestHeaders.from_options(KEY, ["X-Org: a"])
    assert RequestHeaders.from_env(headers.to_env()) == headers
    assert RequestHeaders.from_env({}) == RequestHeaders()
    with pytest.raises(HeaderError, match=HEADERS_ENV):
        RequestHeaders.from_env({HEADERS_ENV: "{not json"})


def guarded(inner: Handler) -> Handler:
    """``inner`` behind a bearer check: a request without the key gets 401, as vLLM answers."""

    async def handler(request: HttpRequest, response: Response) -> None:
        if request.headers.get("authorization") != f"Bearer {KEY}":
            await response.send_json(401, {"error": "Unauthorized"})
        elif request.path == "/v1/models":
            await response.send_json(200, {"object": "list", "data": [{"id": "m"}]})
        else:
            await inner(request, response)

    return handler


@pytest.mark.parametrize("raw", [True, False], ids=["raw-http", "httpx"])
def test_the_client_sends_key_and_headers(raw: bool) -> None:
    headers = RequestHeaders.from_options(KEY, ["X-Org: team-a"]).as_dict()
    handler = guarded(streaming_handler(2, 0.0))

    async def main() -> tuple[list[str], RequestRecord, list[HttpRequest]]:
        async with LocalServer(handler) as server:
            async with StreamingClient(server.base_url, "m", 1, headers=headers, raw=raw) as c:
                models = await c.check_reachable(3.0)
                record = await c.send(make_requests(1)[0], 0, 0.0, RunClock())
            return models, record, server.requests

    models, record, requests = run(main())
    assert models == ["m"]
    assert record.status == "ok", record.error
    assert [r.path for r in requests] == ["/v1/models", "/v1/completions"]
    for r in requests:
        assert r.headers["authorization"] == f"Bearer {KEY}" and r.headers["x-org"] == "team-a"


def test_a_request_without_the_key_records_the_401() -> None:
    record = run(send_once(guarded(streaming_handler(2, 0.0)), make_requests(1)[0]))
    assert record.status == "error" and record.http_status == 401
    assert record.error is not None and record.error.startswith("HTTP 401: Unauthorized; ")
    assert "no key was sent" in record.error and "--api-key KEY" in record.error
    assert "--tokenizer" not in record.error


def test_a_refused_key_is_said_refused_and_never_shown() -> None:
    async def main() -> RequestRecord:
        async with (
            LocalServer(guarded(streaming_handler(1, 0.0))) as server,
            StreamingClient(server.base_url, "m", 1, api_key="wrong-key-123") as client,
        ):
            return await client.send(make_requests(1)[0], 0, 0.0, RunClock())

    record = run(main())
    assert record.http_status == 401 and record.error is not None
    assert "refused the key sent in Authorization" in record.error
    assert "wrong-key-123" not in record.error and "--tokenizer" not in record.error


def test_the_reachability_check_names_the_options_on_401() -> None:
    async def main() -> None:
        async with (
            LocalServer(guarded(streaming_handler(1, 0.0))) as server,
            StreamingClient(server.base_url, "m", 1) as client,
        ):
            await client.check_reachable(3.0)

    with pytest.raises(ServerUnreachableError, match=r"HTTP 401.*--api-key.*OPENAI_API_KEY"):
        run(main())
