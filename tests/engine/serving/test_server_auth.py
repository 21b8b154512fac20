"""`bench serve --api-key`: /v1 needs the bearer key (401 in OpenAI's error shape otherwise),
/health, /metrics and /debug stay open, and the key shows nowhere the server answers."""

from __future__ import annotations

import httpx
import openai
import pytest

from engine.config import EngineConfig
from engine.serving.guards.auth import unauthorized_body
from tests.support.server_fixture import running_server

pytestmark = pytest.mark.timeout(120)

KEY = "sk-canary-serve-51c2"
CONFIG = EngineConfig.from_flat(
    dict(model="tiny", dtype="float32", device="cpu", max_model_len=128)
)


@pytest.fixture(scope="module")
def url() -> object:
    with running_server(CONFIG, api_key=KEY) as base_url:
        yield base_url


@pytest.mark.parametrize(
    "authorization",
    [None, "Bearer wrong", f"Basic {KEY}", f"Bearer {KEY}x", KEY],
    ids=["none", "wrong-key", "wrong-scheme", "longer-key", "no-scheme"],
)
@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/v1/models"), ("POST", "/v1/completions"), ("POST", "/v1/chat/completions")],
)
def test_v1_without_the_key_is_401_in_openai_shape(
    url: str, method: str, path: str, authorization: str | None
) -> None:
    headers = {"Authorization": authorization} if authorization else {}
    body = {"model": "tiny", "prompt": "hi", "messages": [], "max_tokens": 2}
    r = httpx.request(method, url + path, headers=headers, json=body, timeout=10)
    assert r.status_code == 401
    assert r.json() == unauthorized_body()
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error" and error["code"] == "invalid_api_key"
    assert KEY not in r.text


def test_the_key_opens_v1_for_the_openai_client(url: str) -> None:
    client = openai.OpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0)
    assert [m.id for m in client.models.list()] == ["tiny"]
    out = client.completions.create(model="tiny", prompt="hello", max_tokens=3, temperature=0)
    assert out.usage is not None and out.usage.completion_tokens >= 1
    wrong = openai.OpenAI(base_url=url + "/v1", api_key="sk-wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        wrong.models.list()


@pytest.mark.parametrize("path", ["/health", "/metrics", "/debug/engine", "/debug/steps"])
def test_health_metrics_and_debug_stay_open_and_never_show_the_key(url: str, path: str) -> None:
    r = httpx.get(url + path, timeout=10)
    assert r.status_code == 200
    assert KEY not in r.text


def test_options_requests_are_not_guarded(url: str) -> None:
    # As vLLM's middleware: CORS preflights carry no credentials.
    assert httpx.options(url + "/v1/models", timeout=10).status_code != 401
