"""An upstream a test plays one step at a time: HTTP/1.1 over in-memory streams.

:class:`ScriptTransport` and :class:`ScriptedUpstream` play a whole script decided
before the request. A stateful test (tests/faults/test_stateful.py) decides each
step as it goes: the upstream sends its head, the next bytes, ends the body, resets
the connection, or answers an error, whenever the test says, interleaved with what
the client and the clock do. :class:`SteppedUpstream` is that upstream.

It sits under proxai's own pooled HTTP/1.1 transport
(:class:`~proxai.upstream.h11_transport.H11Transport`, given a ``connect`` that
hands out memory streams), so what the test sees of connections is what proxai
does with real ones: a response read to its end goes back to the pool and the
next request may come on the same connection; any other end closes it. The
server side speaks h11 and notes every byte that reaches a connection while its
response is still being sent (:attr:`SteppedUpstream.violations`: a connection
reused mid-response). Everything runs in the caller's trio run, so under a
``MockClock`` every step happens at an exact virtual time.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager

import attrs
import h11
import trio
import trio.testing

from ..config import UpstreamConfig
from ..upstream.client import PoolStatistics
from ..upstream.h11_transport import H11Transport
from .upstream import SSE_HEADERS, RecordedRequest, receive_request

__all__ = ["SteppedExchange", "SteppedUpstream"]

_GONE = (trio.BrokenResourceError, trio.ClosedResourceError)


@attrs.define(eq=False)
class SteppedExchange:
    """One request on the stepped upstream and the response the test plays for it.

    Each method is one step; it returns ``False`` when the step could not reach proxai
    because proxai had already closed the connection (:attr:`gone`).
    """

    request: RecordedRequest
    #: Which connection of the upstream it came on (0, 1, ...), in opening order.
    connection: int
    _stream: trio.abc.Stream = attrs.field(repr=False)
    _conn: h11.Connection = attrs.field(repr=False)
    status: int | None = None
    #: The body bytes sent so far.
    sent: bytearray = attrs.field(factory=bytearray, repr=False)
    #: The body ended cleanly (the connection may carry the next request).
    ended: bool = False
    #: The upstream broke the connection off.
    broken: bool = False
    #: When proxai closed the connection while this exchange was its last.
    gone_at: float | None = None
    _finished: trio.Event = attrs.field(factory=trio.Event, repr=False)

    @property
    def head_sent(self) -> bool:
        return self.status is not None

    @property
    def gone(self) -> bool:
        return self.gone_at is not None

    @property
    def finished(self) -> bool:
        """Nothing more can happen on it: ended, broken, or left by proxai."""
        return self._finished.is_set()

    async def head(
        self, status: int = 200, headers: Sequence[tuple[str, str]] = SSE_HEADERS
    ) -> bool:
        """Send the status line and headers (a chunked body follows)."""
        assert self.status is None, "the head was sent already"
        self.status = status
        return await self._write(h11.Response(status_code=status, headers=list(headers)))

    async def send(self, data: bytes) -> bool:
        """Send ``data`` as one chunk of the body."""
        assert self.head_sent, "send the head first"
        self.sent += data
        return await self._write(h11.Data(data=data))

    async def end(self) -> bool:
        """End the body cleanly; the connection stays open for the next request."""
        delivered = await self._write(h11.EndOfMessage())
        self.ended = delivered
        self._finished.set()
        return delivered

    async def answer(
        self, status: int, body: bytes, headers: Sequence[tuple[str, str]] = ()
    ) -> bool:
        """A whole response with a ``Content-Length`` (an error before any stream)."""
        length = ("content-length", str(len(body)))
        if not await self.head(status, [("content-type", "application/json"), *headers, length]):
            return False
        self.sent += body
        return await self._write(h11.Data(data=body)) and await self.end()

    async def reset(self) -> None:
        """Break the connection off (proxai reads its end where more was due)."""
        self.broken = not self.gone
        self._finished.set()
        with trio.CancelScope(shield=True):
            await self._stream.aclose()

    async def _write(self, event: h11.Event) -> bool:
        if self.finished:
            return False
        try:
            data = self._conn.send(event)
            if data:
                await self._stream.send_all(data)
        except _GONE:
            self._left()
            return False
        return True

    def _left(self, now: float | None = None) -> None:
        if self.gone_at is None and not self.ended and not self.broken:
            self.gone_at = trio.current_time() if now is None else now
            self.request._mark_closed()
        self._finished.set()


class SteppedUpstream:
    """Upstream connections in memory, each request a :class:`SteppedExchange`.

    ``async with upstream.running():`` serves it; pass :meth:`transport` as an
    upstream client's transport (``MemoryProxy(transport_factory=upstream.transport)``).
    """

    def __init__(self, on_exchange: Callable[[SteppedExchange], None] | None = None) -> None:
        """``on_exchange`` is told of each request as it arrives (before any step)."""
        self._on_exchange = on_exchange
        self.exchanges: list[SteppedExchange] = []
        #: What went wrong on the upstream's side that no response should cause: bytes
        #: of a next request on a connection whose response was still being sent.
        self.violations: list[str] = []
        self.connections_opened = 0
        self.connections_closed = 0
        self._transports: list[H11Transport] = []
        self._nursery: trio.Nursery | None = None
        self._arrived = trio.Condition()

    @asynccontextmanager
    async def running(self) -> AsyncIterator[SteppedUpstream]:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            try:
                yield self
            finally:
                nursery.cancel_scope.cancel()

    def transport(self, upstream: UpstreamConfig) -> H11Transport:
        """proxai's pooled HTTP/1.1 transport, connecting to this upstream in memory."""
        transport = H11Transport(
            max_keepalive_connections=upstream.max_idle_connections,
            keepalive_expiry=upstream.keepalive_expiry,
            connect=self._connect,
        )
        self._transports.append(transport)
        return transport

    def pool_statistics(self) -> PoolStatistics:
        """The connections proxai's pools hold to this upstream."""
        listed = [c for t in self._transports for c in t.pool.connections]
        open_ = [c for c in listed if not c.is_closed()]
        return PoolStatistics(len(open_), sum(1 for c in open_ if c.is_idle()), len(listed))

    def task_count(self) -> int:
        """The tasks serving this upstream's connections (a test counting the tasks of
        its trio run leaves them out: an idle pooled connection keeps its server's)."""

        def count(task: trio.lowlevel.Task) -> int:
            return 1 + sum(count(t) for n in task.child_nurseries for t in n.child_tasks)

        if self._nursery is None:
            return 0
        return sum(count(t) for t in self._nursery.child_tasks)

    @property
    def open_connections(self) -> int:
        return self.connections_opened - self.connections_closed

    async def wait_for_exchanges(self, count: int) -> list[SteppedExchange]:
        async with self._arrived:
            while len(self.exchanges) < count:
                await self._arrived.wait()
        return self.exchanges[:count]

    async def _connect(self, host: str, port: int) -> trio.abc.Stream:
        assert self._nursery is not None, "serve the upstream first: async with running()"
        client, server = trio.testing.memory_stream_pair()
        number = self.connections_opened
        self.connections_opened += 1
        self._nursery.start_soon(self._serve, server, number)
        return client

    async def _serve(self, stream: trio.abc.Stream, number: int) -> None:
        conn = h11.Connection(h11.SERVER)
        try:
            while True:
                request = await receive_request(stream, conn)
                if request is None:
                    break
                exchange = SteppedExchange(request, number, stream, conn)
                self.exchanges.append(exchange)
                if self._on_exchange is not None:
                    self._on_exchange(exchange)
                async with self._arrived:
                    self._arrived.notify_all()
                await self._watch(stream, conn, exchange)
                if not exchange.ended:
                    break
                request.response_done_at = trio.current_time()
                conn.start_next_cycle()
        except (*_GONE, h11.RemoteProtocolError, h11.LocalProtocolError):
            pass
        finally:
            self.connections_closed += 1
            with trio.CancelScope(shield=True):
                await stream.aclose()

    async def _watch(
        self, stream: trio.abc.Stream, conn: h11.Connection, exchange: SteppedExchange
    ) -> None:
        """Until the exchange is finished: read what proxai sends on the connection (it
        should send nothing until the response has ended; an end of file is proxai
        closing it)."""
        async with trio.open_nursery() as nursery:

            async def read() -> None:
                while True:
                    try:
                        data = await stream.receive_some(65536)
                    except _GONE:
                        data = b""
                    if not data:
                        exchange._left()
                        return
                    if not exchange.finished:
                        self.violations.append(
                            f"connection {exchange.connection}: {len(data)} bytes of another "
                            f"request while the response to {exchange.request.target} "
                            "was being sent"
                        )
                    conn.receive_data(bytes(data))

            nursery.start_soon(read)
            await exchange._finished.wait()
            nursery.cancel_scope.cancel()
