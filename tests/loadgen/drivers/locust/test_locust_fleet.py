"""The master's book of workers and what travels to them: shares, wire forms, lost workers."""

from __future__ import annotations

import pytest

from loadgen.drivers.locust.fleet import Fleet, lag_summary
from loadgen.drivers.locust.job import (
    parse_address,
    plan_parts,
    record_from_wire,
    record_to_wire,
    spec_from_wire,
    spec_to_wire,
)
from loadgen.request_spec import RequestSpec
from results.folder.records import ChunkRecord, RequestRecord

# What Locust's messages are encoded with (a dependency of locust).
msgpack = pytest.importorskip("msgpack")


def specs(n: int, prompt: str = "hello world") -> list[list[RequestSpec]]:
    return [[RequestSpec(f"r{i}", prompt, 2, 4, seed=i)] for i in range(n)]


def ok_record(spec: RequestSpec, user_id: int) -> RequestRecord:
    return RequestRecord(
        spec.request_id, user_id, 1.0, 1.0, 1.5, 2.0, 2, 4, "usage", "ok", None, 200,
        [ChunkRecord(spec.request_id, 0, 1.5, 4)],
    )  # fmt: skip


def test_wire_forms_survive_msgpack_unchanged() -> None:
    chat = RequestSpec(
        "c1", "transcript", 5, 8, api="chat", messages=(("system", "s"), ("user", "u"))
    )
    for spec in (chat, specs(1)[0][0]):
        back = spec_from_wire(msgpack.loads(msgpack.dumps(spec_to_wire(spec))))
        assert back == spec
    record = ok_record(chat, 3)
    assert record_from_wire(msgpack.loads(msgpack.dumps(record_to_wire(record)))) == record


def test_plan_parts_are_cut_by_prompt_bytes_and_keep_every_session_in_order() -> None:
    sessions = specs(10, prompt="x" * 300)
    parts = list(plan_parts(sessions, part_bytes=1000))
    assert [len(p) for p in parts] == [4, 4, 2]
    flat = [spec_from_wire(s[0]) for p in parts for s in p]
    assert flat == [s[0] for s in sessions]
    assert list(plan_parts([])) == [[]]


def test_addresses_are_parsed_or_refused_naming_the_option() -> None:
    assert parse_address("10.0.0.5:5557", "--master") == ("10.0.0.5", 5557)
    assert parse_address("[::1]:80", "--master") == ("::1", 80)
    for bad in ("10.0.0.5", ":5557", "host:0", "host:99999", "host:port"):
        with pytest.raises(ValueError, match=r"--master-bind .*expected HOST:PORT"):
            parse_address(bad, "--master-bind")


def test_workers_share_sessions_by_join_order_and_extra_ones_are_turned_away() -> None:
    fleet = Fleet(specs(5), workers=2)
    a, b = fleet.join("hostA_1"), fleet.join("hostB_2")
    assert a is not None and b is not None and a.host == "hostA"
    assert [s.request_id for s in a.requests] == ["r0", "r2", "r4"]
    assert [s.request_id for s in b.requests] == ["r1", "r3"]
    assert fleet.join("hostC_3") is None and fleet.join("hostA_1") is None
    assert not fleet.all_ready and not fleet.finished
    # One gone before the load started: its place, and its share, go to the next to join.
    assert fleet.release(a)
    c = fleet.join("hostC_3")
    assert c is not None and c.index == 0 and c.requests == a.requests
    assert [s.index for s in fleet.slots] == [0, 1]
    c.state = "running"
    assert not fleet.release(c)  # once the load runs, a worker is lost, not released


def test_a_lost_worker_leaves_a_failed_row_for_each_request_it_did_not_finish() -> None:
    fleet = Fleet(specs(6), workers=2)
    a = fleet.join("hostA_1")
    assert a is not None
    fleet.heard("hostA_1", 3.5)
    r0, _, r4 = a.requests
    fleet.started(a, [["r0", 0, 1.0, 1.0], ["r2", 2, 1.1, 1.2]])
    assert fleet.recorded(a, ok_record(r0, 0))
    assert not fleet.recorded(a, ok_record(r0, 0))  # a duplicate is dropped
    failed = fleet.lose(a, 7.25)
    assert [r.request_id for r in failed] == ["r2", "r4"]
    in_flight, unsent = failed
    cause = "worker 0 (hostA) lost at t=7.25s (last heard at t=3.50s)"
    assert in_flight.error == f"{cause} with the request in flight"
    assert (in_flight.user_id, in_flight.scheduled_s, in_flight.sent_s) == (2, 1.1, 1.2)
    assert unsent.error == f"{cause} before sending the request"
    assert (unsent.user_id, unsent.scheduled_s, unsent.sent_s) == (-1, 7.25, 7.25)
    for r in failed:
        assert r.status == "error" and r.done_s is None and r.output_tokens == 0
        assert r.prompt_tokens == 2
    # What the lost worker sends afterwards would duplicate those rows: dropped.
    assert not fleet.recorded(a, ok_record(r4, 4))
    assert fleet.lose(a, 9.0) == []
    assert a.to_json()["status"] == "lost" and a.to_json()["requests_failed_as_lost"] == 2


def test_an_open_loop_schedule_is_split_and_a_lost_shares_rows_keep_their_planned_times() -> None:
    schedule = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7]
    fleet = Fleet(specs(8), 2, schedule)
    a, b = fleet.join("host-a_1"), fleet.join("host-b_2")
    assert a is not None and b is not None
    assert [s.request_id for s in a.requests] == ["r0", "r2", "r4", "r6"]
    assert a.due_s == [0.0, 0.2, 0.4, 0.6] and b.due_s == [0.1, 0.3, 0.5, 0.7]
    for slot in (a, b):
        slot.state, slot.start_s = "running", 10.0
    # b sent r1 (at its planned 10.1) and r3 is in flight, then it is lost at t=10.35.
    fleet.started(b, [["r1", 1, 10.1, 10.1], ["r3", 3, 10.3, 10.31]])
    assert fleet.recorded(b, ok_record(b.sessions[0][0], 1))
    failed = {r.request_id: r for r in fleet.lose(b, 10.35)}
    assert sorted(failed) == ["r3", "r5", "r7"]  # nothing of its share is dropped
    assert failed["r3"].sent_s == 10.31 and failed["r3"].error.endswith("in flight")
    # Never sent: scheduled at its planned time, "sent" no earlier than the loss.
    assert failed["r5"].scheduled_s == pytest.approx(10.5)
    assert failed["r5"].sent_s == pytest.approx(10.5)
    assert failed["r5"].error.endswith("before sending the request")


def test_each_workers_schedule_lag_is_summarised_and_one_behind_is_named() -> None:
    fleet = Fleet(specs(4), 2, [0.0, 0.1, 0.2, 0.3])
    a, b = fleet.join("host-a_1"), fleet.join("host-b_2")
    assert a is not None and b is not None
    a.lags_s, b.lags_s = [0.001] * 99 + [0.002], [0.001] * 50 + [0.2] * 50
    fast, slow = a.to_json()["schedule_lag"], b.to_json()["schedule_lag"]
    assert fast["samples"] == 100 and fast["p50_s"] == pytest.approx(0.001)
    assert fast["max_s"] == pytest.approx(0.002) and not fast["behind"]
    assert slow["behind"] and slow["p99_s"] == pytest.approx(0.2)
    assert lag_summary([]) == {"samples": 0, "p50_s": None, "p99_s": None, "max_s": None,
                               "behind": False}  # fmt: skip
    # A closed-loop worker has no schedule lag entry.
    closed = Fleet(specs(2), 1).join("host-c_3")
    assert closed is not None and "schedule_lag" not in closed.to_json()
