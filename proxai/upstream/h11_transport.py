"""A lean HTTP/1.1 transport for plain-http upstreams: h11 on trio sockets, behind httpx.

A streamed response from a local vLLM or llama.cpp pays its read path once per
event: through httpcore that is an async generator per layer and an exception-
mapping block per h11 event. Here one connection object reads the socket, feeds
h11 and returns the body's bytes, with nothing entered per read. httpx stays the
client API (this is an ``httpx.AsyncBaseTransport``); https upstreams keep
:class:`~proxai.upstream.transport.PoolTransport` (TLS, verification).

A connection goes back to the pool only when its response was read to the end,
both sides may start another cycle, and nothing is left over: bytes past the
response's end (:mod:`proxai.upstream.framing`) would answer the next request.
Any other end closes it.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable

import h11
import httpx
import trio

from .framing import ReceivingBody

__all__ = ["Connect", "H11Pool", "H11Transport"]

READ_SIZE = 64 * 1024

#: Opens a connection to ``(host, port)``: TCP by default; a test's in-memory upstream
#: (:class:`proxai.testing.stepped.SteppedUpstream`) hands out memory streams.
Connect = Callable[[str, int], Awaitable[trio.abc.Stream]]


class H11Connection:
    """One keep-alive connection to the upstream."""

    def __init__(self, stream: trio.abc.Stream, keepalive_expiry: float) -> None:
        self._stream = stream
        self._h11 = h11.Connection(h11.CLIENT)
        self._expiry = keepalive_expiry
        self._idle_since: float | None = None
        self._closed = False
        #: Bytes the upstream sent past the end of the last response (read with it).
        self.surplus = 0
        #: The current response's body has been read to its end.
        self.complete = False

    def is_idle(self) -> bool:
        return self._idle_since is not None and not self._closed

    def is_closed(self) -> bool:
        return self._closed

    def has_expired(self) -> bool:
        """Idle past the keep-alive expiry, or closed by the server meanwhile (an idle
        connection that turns readable has nothing to say but its end)."""
        if self._idle_since is None:
            return False
        if time.monotonic() - self._idle_since > self._expiry:
            return True
        # An in-memory stream (a test's) has no socket to ask.
        return isinstance(self._stream, trio.SocketStream) and self._stream.socket.is_readable()

    def take(self) -> None:
        self._idle_since = None

    def retire(self) -> None:
        """Closed from now on, as far as any request can tell (:meth:`aclose` does the I/O)."""
        self._closed = True
        self._idle_since = None

    async def aclose(self) -> None:
        self.retire()
        await self._stream.aclose()

    async def send(self, request: httpx.Request) -> tuple[int, list[tuple[bytes, bytes]]]:
        """Write the request; the response's status and headers."""
        url = request.url
        head = h11.Request(
            method=request.method, target=url.raw_path, headers=list(request.headers.raw)
        )
        try:
            await self._stream.send_all(self._h11.send(head) or b"")
            assert isinstance(request.stream, httpx.AsyncByteStream)
            async for chunk in request.stream:
                await self._stream.send_all(self._h11.send(h11.Data(data=chunk)) or b"")
            await self._stream.send_all(self._h11.send(h11.EndOfMessage()) or b"")
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            raise httpx.WriteError(str(exc) or type(exc).__name__) from exc
        except h11.LocalProtocolError as exc:
            raise httpx.LocalProtocolError(str(exc)) from exc
        self.complete = False
        while True:
            event = await self._next_event()
            if isinstance(event, h11.Response):
                return event.status_code, list(event.headers.raw_items())
            if isinstance(event, h11.ConnectionClosed):
                raise httpx.RemoteProtocolError("Server disconnected without sending a response.")
            # InformationalResponse (100 Continue and the like): wait for the real one.

    async def _next_event(self) -> h11.Event | type[h11.PAUSED]:
        while True:
            try:
                event = self._h11.next_event()
            except h11.RemoteProtocolError as exc:
                raise httpx.RemoteProtocolError(str(exc)) from exc
            if event is not h11.NEED_DATA:
                return event  # type: ignore[return-value]  # NEED_DATA is ruled out
            try:
                data = await self._stream.receive_some(READ_SIZE)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                raise httpx.ReadError(str(exc) or type(exc).__name__) from exc
            if not data and self._h11.their_state is h11.SEND_RESPONSE:
                raise httpx.RemoteProtocolError("Server disconnected without sending a response.")
            self._h11.receive_data(bytes(data))  # bytes already from a socket: no copy

    async def receive_body(self) -> bytes:
        """The response body's next bytes as they arrive; ``b""`` at its end (and after).

        The socket is read here, not in :meth:`_next_event`: a held stream waits in this
        frame, one coroutine above trio's, for as long as the upstream says nothing."""
        conn = self._h11
        while not self.complete:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as exc:
                raise httpx.RemoteProtocolError(str(exc)) from exc
            if event is h11.NEED_DATA:
                try:
                    data = await self._stream.receive_some(READ_SIZE)
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                    raise httpx.ReadError(str(exc) or type(exc).__name__) from exc
                conn.receive_data(bytes(data))  # bytes already from a socket: no copy
            elif isinstance(event, h11.Data):
                if event.data:
                    return bytes(event.data)
            elif isinstance(event, h11.EndOfMessage):
                self.surplus = len(conn.trailing_data[0])
                self.complete = True
            elif isinstance(event, h11.ConnectionClosed):
                raise httpx.RemoteProtocolError(
                    "peer closed connection without sending complete message body"
                )
        return b""

    def reusable(self) -> bool:
        """The exchange ended cleanly, both sides may go on and nothing is left unread
        (nor has the upstream closed): start the next cycle."""
        left, closed = self._h11.trailing_data
        if left or closed:
            return False
        if self._h11.our_state is h11.DONE and self._h11.their_state is h11.DONE:
            self._h11.start_next_cycle()
            return True
        return False

    def release(self) -> None:
        self._idle_since = time.monotonic()


class H11Pool:
    """The connections to one origin: the idle ones a stack (the last released is the
    next taken, as in nginx's keepalive cache: a light load keeps reusing its warm
    connections, the others expire), the busy ones a set.

    Every change to them is synchronous and made before any await: a connection leaves
    the pool, then it is closed. So no task that awaits ever sees them change under it,
    and what :attr:`connections` returns is a snapshot, not the live lists.
    """

    def __init__(
        self,
        max_keepalive_connections: int,
        keepalive_expiry: float,
        connect: Connect = trio.open_tcp_stream,
    ) -> None:
        self._idle: list[H11Connection] = []
        self._busy: set[H11Connection] = set()
        self._max_idle = max_keepalive_connections
        self._expiry = keepalive_expiry
        self._connect = connect

    @property
    def connections(self) -> list[H11Connection]:
        """Every connection of the pool now: the idle ones in the order they would be
        taken, then the busy ones."""
        return [*reversed(self._idle), *self._busy]

    async def acquire(self, host: str, port: int, connect_timeout: float | None) -> H11Connection:
        """The idle connection released last, if still good (expired ones on the way are
        closed), else a new one."""
        expired: list[H11Connection] = []
        taken: H11Connection | None = None
        while self._idle:
            connection = self._idle.pop()
            if not connection.has_expired():
                taken = connection
                break
            connection.retire()
            expired.append(connection)
        if taken is not None:
            taken.take()
            self._busy.add(taken)
        await _close(expired)
        if taken is not None:
            return taken
        try:
            with trio.fail_after(float("inf") if connect_timeout is None else connect_timeout):
                stream = await self._connect(host, port)
        except trio.TooSlowError as exc:
            raise httpx.ConnectTimeout(f"timed out connecting to {host}:{port}") from exc
        except OSError as exc:
            raise httpx.ConnectError(str(exc) or type(exc).__name__) from exc
        connection = H11Connection(stream, self._expiry)
        self._busy.add(connection)
        return connection

    async def release(self, connection: H11Connection, *, reuse: bool) -> None:
        """A request is done with ``connection``: kept idle if it may be reused and the
        pool has room, else closed."""
        self._busy.discard(connection)
        if reuse and not connection.is_closed() and len(self._idle) < self._max_idle:
            connection.release()
            self._idle.append(connection)
            return
        connection.retire()
        await _close([connection])

    async def close_idle(self, connections: Iterable[H11Connection]) -> int:
        """Close those of ``connections`` (a snapshot of :attr:`connections`) that are
        still idle; how many. A request may have taken one since."""
        doomed = {c for c in connections if c.is_idle()}  # idle: in self._idle
        if not doomed:
            return 0
        self._idle = [c for c in self._idle if c not in doomed]
        for connection in doomed:
            connection.retire()
        await _close(doomed)
        return len(doomed)

    async def aclose(self) -> None:
        closing = [*self._idle, *self._busy]
        self._idle, self._busy = [], set()
        for connection in closing:
            connection.retire()
        await _close(closing)


async def _close(connections: Iterable[H11Connection]) -> None:
    """Close connections already out of their pool (shielded: a cancelled request
    must not leave its socket to the garbage collector)."""
    with trio.CancelScope(shield=True):
        for connection in connections:
            await connection.aclose()


class _Body(ReceivingBody):
    def __init__(self, pool: H11Pool, connection: H11Connection) -> None:
        self._pool = pool
        self._connection = connection
        self._released = False
        #: The connection's own read: no frame of this object's between it and the relay.
        self.receive = connection.receive_body  # type: ignore[method-assign]

    async def aclose(self) -> None:
        if self._released:
            return
        self._released = True
        self.surplus = self._connection.surplus
        reuse = self._connection.complete and self._connection.reusable()
        await self._pool.release(self._connection, reuse=reuse)


class H11Transport(httpx.AsyncBaseTransport):
    """HTTP/1.1 over plain TCP to one upstream origin, pooled."""

    def __init__(
        self,
        *,
        max_keepalive_connections: int,
        keepalive_expiry: float,
        connect: Connect = trio.open_tcp_stream,
    ) -> None:
        self.pool = H11Pool(max_keepalive_connections, keepalive_expiry, connect)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        if url.scheme != "http":
            raise httpx.UnsupportedProtocol(
                f"the lean transport speaks http only, not {url.scheme}"
            )
        timeouts = request.extensions.get("timeout", {})
        connection = await self.pool.acquire(url.host, url.port or 80, timeouts.get("connect"))
        try:
            status, headers = await connection.send(request)
        except BaseException:
            await self.pool.release(connection, reuse=False)
            raise
        return httpx.Response(
            status_code=status,
            headers=headers,
            stream=_Body(self.pool, connection),
            extensions={"http_version": b"HTTP/1.1"},
        )

    async def aclose(self) -> None:
        await self.pool.aclose()
