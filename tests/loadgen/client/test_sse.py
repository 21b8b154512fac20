"""The incremental SSE parser: splits, line endings, comments, multi-line data, [DONE]."""

from __future__ import annotations

import random

import pytest

from loadgen.client.readers.sse import SSEParser, StreamError
from tests.support.sse_streams import FIXTURE_STREAMS, fixture_stream


def feed_all(pieces: list[bytes]) -> tuple[list[str], SSEParser]:
    parser = SSEParser()
    out: list[str] = []
    for piece in pieces:
        out.extend(parser.feed(piece))
    return out, parser


def byte_pieces(data: bytes) -> list[bytes]:
    return [data[i : i + 1] for i in range(len(data))]


def test_events_in_one_read() -> None:
    out, parser = feed_all([b'data: {"a":1}\n\ndata: {"b":2}\n\ndata: [DONE]\n\n'])
    assert out == ['{"a":1}', '{"b":2}']
    assert parser.done
    assert parser.events == 2


@pytest.mark.parametrize("newline", [b"\n", b"\r\n", b"\r"])
def test_every_split_point_and_line_ending_gives_the_same_events(newline: bytes) -> None:
    stream = (
        b": keep-alive ping\n"
        b"data: first\n\n"
        b"event: message\nid: 7\nretry: 100\ndata: second\n\n"
        b"data:no-space\n\n"
        b"data: [DONE]\n\n"
        b"data: after done\n\n"
    ).replace(b"\n", newline)
    expected = ["first", "second", "no-space"]
    assert feed_all([stream])[0] == expected
    assert feed_all(byte_pieces(stream))[0] == expected
    for cut in range(1, len(stream)):
        out, parser = feed_all([stream[:cut], stream[cut:]])
        assert out == expected, (newline, cut)
        assert parser.done


def test_crlf_split_between_cr_and_lf_does_not_add_a_blank_line() -> None:
    # If the LF after a CR were taken as its own line, "a" and "b" would be two events.
    out, _ = feed_all([b"data: a\r", b"\ndata: b\r\n\r\n"])
    assert out == ["a\nb"]


def test_event_dispatched_as_soon_as_its_blank_line_arrives() -> None:
    parser = SSEParser()
    assert parser.feed(b"data: x\r\n") == []
    assert parser.feed(b"\r") == ["x"]  # a CR alone ends the line: no waiting for a LF
    assert parser.feed(b"\n") == []


def test_multi_line_data_is_joined_with_newlines() -> None:
    out, _ = feed_all([b'data: {\ndata:   "k": 1\ndata: }\n\n'])
    assert out == ['{\n  "k": 1\n}']


def test_comments_and_field_only_lines() -> None:
    out, _ = feed_all([b":comment\n\n: another\ndata\n\nevent: x\n\n"])
    # "data" alone is one empty data line (an event with empty data); an event with no data
    # lines (comments only, or event: only) dispatches nothing.
    assert out == [""]


def test_utf8_character_split_across_reads() -> None:
    data = "data: héllo ✓\n\n".encode()
    split = data.index("✓".encode()) + 1
    out, _ = feed_all([data[:split], data[split:]])
    assert out == ["héllo ✓"]


def test_bom_skipped_even_when_split() -> None:
    stream = b"\xef\xbb\xbfdata: a\n\n"
    assert feed_all([stream])[0] == ["a"]
    assert feed_all(byte_pieces(stream))[0] == ["a"]


def test_incomplete_event_at_end_is_not_dispatched() -> None:
    out, parser = feed_all([b'data: a\n\ndata: {"trunc'])
    assert out == ["a"]
    assert parser.has_partial_event
    assert not parser.done


def test_invalid_utf8_raises_naming_the_bytes() -> None:
    with pytest.raises(StreamError, match=r"invalid UTF-8.*xff\\xfe.*offset 0"):
        SSEParser().feed(b"data: \xff\xfe\n\n")


@pytest.mark.parametrize(
    ("reads", "what"),
    [
        ([b"data: " + b"x" * 200], "a line"),  # one unfinished line, over the limit
        ([b"data: " + b"x" * 60 + b"\n"] * 4, "an event"),  # data lines without a blank one
        ([b"data: " + b"x" * 300 + b"\n\n"], "an event"),  # one whole event in one read
    ],
)
def test_a_line_or_event_over_the_limit_raises(reads: list[bytes], what: str) -> None:
    parser = SSEParser(max_event_bytes=128)
    with pytest.raises(StreamError, match=f"{what} over 128 bytes"):
        for read in reads:
            parser.feed(read)


def test_events_up_to_the_limit_pass_and_the_count_restarts_per_event() -> None:
    parser = SSEParser(max_event_bytes=128)
    event = b"data: " + b"x" * 120 + b"\n\n"
    assert parser.feed(event * 50) == ["x" * 120] * 50


def test_the_first_line_that_is_no_sse_field_is_kept() -> None:
    parser = SSEParser()
    assert parser.feed(b"<!DOCTYPE html>\n<html><title>Sign in</title>\nevent: x\n") == []
    assert parser.stray == b"<!DOCTYPE html>" and parser.events == 0


@pytest.mark.parametrize("name", sorted(FIXTURE_STREAMS))
def test_fixture_streams_parse_identically_under_random_splits(name: str) -> None:
    raw = fixture_stream(name)
    whole, parser = feed_all([raw])
    assert parser.done
    assert len(whole) == raw.count(b"data: ") - 1  # every event but [DONE]
    rng = random.Random(name)
    for _ in range(20):
        cuts = sorted(rng.sample(range(1, len(raw)), 8))
        pieces = [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True)]
        assert feed_all(pieces)[0] == whole
