"""The scenario's [images] table: read, checked, refused with the key and the fix, drawn from the
seed (the same seed, the same bytes), and on the share of the plan's requests it names; bench
simulate refuses it."""

from __future__ import annotations

import base64
import io
import tomllib
from typing import Any

import pytest
from PIL import Image

from bench.run.load_plan import build_plan
from bench.scenario.scenario import ScenarioError, load_scenario, scenario_from_dict
from bench.sim.simulate import SimulateError, refuse_unmodelled
from loadgen.request_images import split_data_url
from tests.support.tokenizers import make_tokenizer

TOK = make_tokenizer()
TABLE = """
name = "t"
users = 2
num_requests = 40
api = "{api}"
seed = {seed}
[input_len]
kind = "fixed"
value = 8
[output_len]
kind = "fixed"
value = 4
[images]
{body}
"""
SIZED = """
share = 0.5
format = "jpeg"
count = { kind = "uniform", low = 1, high = 3 }
width = { kind = "uniform", low = 32, high = 96 }
height = { kind = "fixed", value = 40 }
"""


def _scenario(body: str = SIZED, api: str = "chat", seed: int = 4) -> Any:
    data = tomllib.loads(TABLE.format(api=api, body=body, seed=seed))
    return scenario_from_dict(data, source="t.toml")


def _decoded(url: str) -> Image.Image:
    parts = split_data_url(url)
    assert parts is not None
    return Image.open(io.BytesIO(base64.b64decode(parts[1])))


def test_the_table_round_trips_and_its_images_are_what_it_says() -> None:
    s = _scenario()
    assert scenario_from_dict(s.to_dict()) == s
    assert s.to_dict()["images"]["format"] == "jpeg"
    requests = build_plan(s, TOK).requests
    counts = [len(r.images) for r in requests]
    # A share of 0.5 of 40 requests: a binomial draw, never all or none at this seed.
    assert 5 < sum(c > 0 for c in counts) < 35
    assert {c for c in counts if c} <= {1, 2, 3} and len({c for c in counts if c}) > 1
    urls = [u for r in requests for u in r.images]
    assert len(set(urls)) == len(urls), "every image of the run is a picture of its own"
    for url in urls:
        assert url.startswith("data:image/jpeg;base64,")
        image = _decoded(url)
        assert image.format == "JPEG" and image.size[1] == 40 and 32 <= image.size[0] <= 96
    # The text is what it was without images: the images' draw takes nothing from the prompts'.
    plain = build_plan(scenario_from_dict({**s.to_dict(), "images": None}), TOK).requests
    assert [r.prompt for r in plain] == [r.prompt for r in requests]


def test_the_same_seed_makes_the_same_bytes_and_another_seed_others() -> None:
    first = [r.images for r in build_plan(_scenario(), TOK).requests]
    assert first == [r.images for r in build_plan(_scenario(), TOK).requests]
    assert first != [r.images for r in build_plan(_scenario(seed=5), TOK).requests]


def test_urls_are_sent_as_they_are_and_the_defaults_are_one_png_of_224() -> None:
    urls = ["http://127.0.0.1:9/a.png", "https://images.example/b.jpg"]
    s = _scenario(f"urls = {urls!r}".replace("'", '"') + "\ncount = { kind = 'fixed', value = 2 }")
    requests = build_plan(s, TOK).requests
    assert all(len(r.images) == 2 and set(r.images) <= set(urls) for r in requests)
    assert scenario_from_dict(s.to_dict()) == s
    default = build_plan(_scenario("share = 1.0"), TOK).requests
    assert all(len(r.images) == 1 for r in default)
    assert _decoded(default[0].images[0]).size == (224, 224)


@pytest.mark.parametrize(
    ("api", "body", "match"),
    [
        ("completions", "share = 1.0",
         r"key 'images': only api \['chat', 'messages', 'responses'\] takes images"),
        ("chat", "share = 0.0", r"key 'images.share': expected a fraction in \(0, 1\], got 0.0"),
        ("chat", 'format = "gif"', r"key 'images.format': expected one of 'png', 'jpeg'"),
        ("chat", "widht = { kind = 'fixed', value = 8 }",
         r"unknown key 'images.widht'; did you mean 'width'\?"),
        ("chat", 'urls = ["http://a/b.png"]\nformat = "png"',
         r"unknown key 'images.format' .*with urls, the images are the files' own"),
        ("chat", 'urls = ["file:///b.png"]', r"key 'images.urls': expected http\(s\):// URLs"),
        ("chat", "count = { kind = 'fixed', value = 0 }", r"key 'images.count.value': must be"),
    ],
)  # fmt: skip
def test_a_bad_table_is_refused_naming_the_key(api: str, body: str, match: str) -> None:
    with pytest.raises(ScenarioError, match=match):
        _scenario(body, api)


def test_images_as_request_fields_are_refused_naming_the_table() -> None:
    with pytest.raises(ScenarioError, match=r"key 'request.images': .*\[images\] table"):
        scenario_from_dict({"name": "t", "users": 1, "num_requests": 1, "api": "chat",
                            "input_len": {"kind": "fixed", "value": 8},
                            "output_len": {"kind": "fixed", "value": 4},
                            "request": {"images": []}}, source="t.toml")  # fmt: skip


def test_the_shipped_scenario_loads_and_bench_simulate_refuses_it() -> None:
    s = load_scenario("images")
    assert s.api == "chat" and s.images is not None and s.images.share < 1
    with pytest.raises(SimulateError, match=r"\[images\]: bench simulate models text only"):
        refuse_unmodelled(s)
