"""Spreading one client's requests over several replicas (`bench run --url A --url B ...`).

:class:`Router` picks the replica of each request by a policy (:data:`ROUTES`):

- ``round-robin``: the replicas in turn, in ``--url`` order;
- ``least-outstanding``: the replica with the fewest requests of this client in flight (sent and
  not yet ended), ties to the first in ``--url`` order. A client process knows only its own
  requests: with ``--workers`` processes or Locust workers each counts its own, as a set of
  independent load balancers would.

:class:`RoutedClient` is a request sender (loadgen.drivers.closed_loop.RequestSender) over one
:class:`~loadgen.client.stream.StreamingClient` per replica, so the drivers run a fleet as they
run one endpoint. The record of each request names its replica (``endpoint``).
"""

from __future__ import annotations

from collections.abc import Sequence

from loadgen.client.stream import StreamingClient
from loadgen.clock import RunClock
from loadgen.request_spec import RequestSpec
from perfmodel.files import JSONObject
from results.folder.records import RequestRecord

__all__ = ["DEFAULT_ROUTE", "ROUTES", "RoutedClient", "Router", "check_route"]

ROUTES = ("round-robin", "least-outstanding")
DEFAULT_ROUTE = "round-robin"


def check_route(route: str) -> str:
    """``route`` when it is one of :data:`ROUTES`; else ValueError naming the option."""
    if route not in ROUTES:
        raise ValueError(f"--route {route!r}: expected one of {', '.join(ROUTES)}")
    return route


class Router:
    """Which of ``replicas`` replicas takes the next request, by ``route`` (module docstring).

    Call :meth:`pick` when a request is sent and :meth:`done` with the same index when it
    ends (whatever its outcome); the counts are this client's requests in flight.
    """

    def __init__(self, replicas: int, route: str = DEFAULT_ROUTE) -> None:
        if replicas < 1:
            raise ValueError(f"Router replicas: expected >= 1, got {replicas}")
        self.route = check_route(route)
        self.in_flight = [0] * replicas
        self._next = 0

    def pick(self) -> int:
        if self.route == "round-robin":
            index = self._next
            self._next = (index + 1) % len(self.in_flight)
        else:
            index = self.in_flight.index(min(self.in_flight))
        self.in_flight[index] += 1
        return index

    def done(self, index: int) -> None:
        self.in_flight[index] -= 1


class RoutedClient:
    """Sends each request to one of ``clients`` (one per replica) chosen by a :class:`Router`;
    use as ``async with`` like StreamingClient. ``send`` never raises, as StreamingClient's."""

    def __init__(self, clients: Sequence[StreamingClient], route: str = DEFAULT_ROUTE) -> None:
        if not clients:
            raise ValueError("RoutedClient: expected at least one client")
        self.clients = list(clients)
        self.router = Router(len(self.clients), route)

    async def send(
        self, spec: RequestSpec, user_id: int, scheduled_s: float, clock: RunClock
    ) -> RequestRecord:
        index = self.router.pick()
        try:
            return await self.clients[index].send(spec, user_id, scheduled_s, clock)
        finally:
            self.router.done(index)

    def receive_stamps(self) -> list[JSONObject]:
        """Each replica's client's stamp record (StreamingClient.receive_stamps), in order."""
        return [client.receive_stamps() for client in self.clients]

    async def warm_up(self) -> None:
        for client in self.clients:
            await client.warm_up()

    async def __aenter__(self) -> RoutedClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        for client in self.clients:
            await client.aclose()
