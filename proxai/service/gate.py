"""The gate: who gets in, how many are in, and the drain that waits for them to leave.

It also keeps the retry budget, fed the requests that go upstream and trio's clock.

Admission refuses at once what proxai will not take now (shutting down, over
``server.max_concurrent_streams``): nothing queues. The drain stops admission,
gives the requests in flight ``server.drain_timeout`` to finish, then ends the
rest with their protocol's error and gives them :data:`STOP_GRACE` to write it.
:func:`shutdown_budget` is the whole of that, which the server and the worker
processes wait for.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from typing import Protocol

import trio

from ..config import ServerConfig
from ..errors import ProxyError, shutdown_error
from ..outcome import OutcomeKind
from ..policy.retry import RetryBudget

__all__ = ["STOP_GRACE", "Gate", "Stoppable", "overloaded", "shutdown_budget"]

log = logging.getLogger("proxai")

#: After drain_timeout, how long stopped streams get to write their closing events.
STOP_GRACE = 5.0


def shutdown_budget(server: ServerConfig) -> float:
    """Seconds from a drain's start until every stream has ended, closing events included."""
    return server.drain_timeout + STOP_GRACE


class Stoppable(Protocol):
    def stop(self) -> None:
        """End the request now, in its protocol's shape (proxai is shutting down)."""


class Gate:
    """Admission, the in-flight count, the retry budget and the drain of one proxai
    process. It is each exchange's :class:`~proxai.relay.exchange.RetryAdmission`."""

    def __init__(
        self,
        server: ServerConfig,
        open_streams: Callable[[], Collection[Stoppable]],
        retry_budget: RetryBudget,
    ) -> None:
        self._process_streams = server.max_concurrent_streams
        self.retry_budget = retry_budget
        self._drain_timeout = server.drain_timeout
        #: Admitted requests from their admission to their end.
        self.in_flight = 0
        #: The open streams a drain may have to stop.
        self._open_streams = open_streams
        self.draining = False
        self._drain_requested = trio.Event()
        self._idle = trio.Event()  # set once draining and nothing is in flight
        #: The drain's wait for in-flight requests; cancelled by :meth:`hurry`.
        self._drain_scope = trio.CancelScope()

    def check_open(self) -> None:
        """Raise the 503 that refuses a request while draining."""
        if self.draining:
            raise shutdown_error()

    def check_room(self) -> None:
        """Raise the 503 that refuses a request over ``server.max_concurrent_streams``
        (this process's own)."""
        if self._process_streams and self.in_flight >= self._process_streams:
            raise _overloaded(self._process_streams)

    def enter(self) -> None:
        """Count in a request that passed every check."""
        self.in_flight += 1

    def leave(self) -> None:
        """An admitted request ended (every task of it)."""
        self.in_flight -= 1
        if self.draining and not self.in_flight:
            self._idle.set()

    def note_request(self) -> None:
        """A request's first attempt goes upstream: it adds to the retry budget."""
        self.retry_budget.deposit(trio.current_time())

    def start_retry(self) -> bool:
        """Whether a request may retry now, within the share of the recent requests."""
        return self.retry_budget.withdraw(trio.current_time())

    def begin_drain(self) -> None:
        """Stop admitting requests; :meth:`wait_for_drain_request` returns."""
        self.draining = True
        if not self.in_flight:
            self._idle.set()
        self._drain_requested.set()

    async def wait_for_drain_request(self) -> None:
        await self._drain_requested.wait()

    async def drain(self) -> None:
        """Let in-flight requests finish for ``drain_timeout``, then stop the open streams
        and wait (up to :data:`STOP_GRACE`) until they have ended."""
        self.begin_drain()
        with self._drain_scope:
            self._drain_scope.deadline = trio.current_time() + self._drain_timeout
            await self._idle.wait()
        streams = list(self._open_streams())
        if streams:
            log.warning(
                "drain_timeout passed: ending %d open stream(s) with an error", len(streams)
            )
        for stream in streams:
            stream.stop()
        with trio.move_on_after(STOP_GRACE):
            await self._idle.wait()

    def hurry(self) -> None:
        """End the drain now (a second SIGINT/SIGTERM): open streams get their error."""
        self.begin_drain()
        self._drain_scope.cancel()


def _overloaded(limit: int) -> ProxyError:
    return overloaded(
        f"proxai is at its limit of {limit} concurrent requests "
        "(server.max_concurrent_streams); retry shortly",
        code="proxy_overloaded",
    )


def overloaded(message: str, *, code: str) -> ProxyError:
    """The 503 of a limit proxai is at: retry in a second (nothing was queued)."""
    return ProxyError(
        503,
        message,
        "server_error",
        code=code,
        headers=((b"retry-after", b"1"),),
        kind=OutcomeKind.OVERLOADED,
    )
