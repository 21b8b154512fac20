"""What Locust's workers cannot send is refused before a Locust run starts, by one predicate:
APIs other than completions and chat, and sessions whose turns wait or carry tool results;
multi-turn chats, whose turns only follow one another, go through."""

from __future__ import annotations

import pytest

from bench.run.load_runner import LOCUST_REFUSES_SESSIONS, LoadError, refuse_for_locust
from loadgen.drivers.driver import LoadPlan
from loadgen.request_spec import SessionTurn
from tests.support.loadgen_requests import spec


def _plan(*turns: SessionTurn | None, api: str = "chat") -> LoadPlan:
    session = [spec(api, request_id=f"t{k}", session=turn) for k, turn in enumerate(turns)]
    return LoadPlan(mode="closed", sessions=[session], users=1)


def test_a_multiturn_chat_goes_to_locust() -> None:
    refuse_for_locust(_plan(SessionTurn("s", 0), SessionTurn("s", 1)))
    refuse_for_locust(_plan(None, api="completions"))


@pytest.mark.parametrize(
    "turn", [SessionTurn("s", 1, delay_s=0.5), SessionTurn("s", 1, tool_results=("42",))]
)
def test_an_agent_sessions_delays_or_tool_results_are_refused(turn: SessionTurn) -> None:
    with pytest.raises(LoadError) as refused:
        refuse_for_locust(_plan(SessionTurn("s", 0), turn))
    assert str(refused.value) == LOCUST_REFUSES_SESSIONS


def test_another_api_is_refused_by_name() -> None:
    with pytest.raises(LoadError, match="not 'responses'"):
        refuse_for_locust(_plan(None, api="responses"))
