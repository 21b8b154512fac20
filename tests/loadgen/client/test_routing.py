"""The router of a fleet run: which replica takes each request (loadgen.client.routing)."""

from __future__ import annotations

import pytest

from loadgen.client.routing import ROUTES, Router, check_route


def test_round_robin_takes_the_replicas_in_turn_whatever_is_in_flight() -> None:
    router = Router(3, "round-robin")
    picked = [router.pick() for _ in range(7)]
    assert picked == [0, 1, 2, 0, 1, 2, 0]
    assert router.in_flight == [3, 2, 2]


def test_least_outstanding_takes_the_replica_with_fewest_in_flight_ties_by_order() -> None:
    router = Router(3, "least-outstanding")
    assert [router.pick() for _ in range(3)] == [0, 1, 2]  # all tied: by order
    router.done(1)
    assert router.pick() == 1  # the one that finished
    router.done(2)
    router.done(0)
    assert router.in_flight == [0, 1, 0]
    assert router.pick() == 0 and router.pick() == 2 and router.pick() == 0
    assert router.in_flight == [2, 1, 1]


def test_a_replica_that_never_finishes_gets_no_more_under_least_outstanding() -> None:
    # Two users: the slow replica (1) holds its request; the fast one (0) answers at once, and
    # the user it freed sends again.
    router = Router(2, "least-outstanding")
    picked = [router.pick(), router.pick()]
    for _ in range(18):
        router.done(0)
        picked.append(router.pick())
    assert picked.count(1) == 1 and picked.count(0) == 19
    assert router.in_flight == [1, 1]


def test_a_bad_route_names_the_option_and_the_choices() -> None:
    assert check_route("least-outstanding") == "least-outstanding"
    with pytest.raises(ValueError, match=r"--route 'random': expected one of round-robin"):
        check_route("random")
    with pytest.raises(ValueError, match="replicas"):
        Router(0)
    assert ROUTES == ("round-robin", "least-outstanding")
