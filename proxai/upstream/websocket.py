"""One client socket's upstream WebSocket, for upstreams that speak the Responses
WebSocket mode themselves (``websocket = true`` on an ``openai`` or
``openai_responses`` upstream).

:class:`UpstreamSocket` looks to the relay like an :class:`~proxai.upstream.client.
UpstreamClient`: each :meth:`~UpstreamSocket.open` is one response. It sends the
request as one ``response.create`` frame and hands the relay each event frame that
comes back as an SSE event (:mod:`proxai.protocols.responses.socket_frames`), so the
reader, the Responses observer and their deadlines work on a socket as on HTTP. The
socket is opened by the first response and kept for the next ones (the upstream keeps
the socket's conversation: a later turn names the last one's id); a response left
before its terminal event (the client went, a deadline passed) closes it, since what
is still coming of that response would be read as the next one's, and the next
response opens a new socket.

It speaks RFC 6455 with ``wsproto`` on trio's TCP and TLS streams. It offers no
extension (permessage-deflate would inflate messages beyond any bound proxai reads
them in), answers pings while it reads, and reads a message no larger than
``max_message_bytes``.
"""

from __future__ import annotations

import ssl
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager, suppress

import attrs
import certifi
import h11
import httpx
import trio
import wsproto
import wsproto.utilities
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Event,
    Ping,
    Pong,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)

from ..config import TimeoutsConfig, UpstreamConfig
from ..errors import ProxyError
from ..outcome import OutcomeKind
from ..protocols.responses.socket_frames import (
    SOCKET_TERMINAL_TYPES,
    as_sse,
    create_frame,
    event_type,
    request_error,
)
from ..protocols.table import CLIENT_KEY_HEADERS, UPSTREAM_PROTOCOLS
from ..wire.headers import Headers, request_headers_for_upstream
from ..wire.sse import SSEFrame
from .client import (
    EventTooLarge,
    UpstreamBroken,
    _own_headers,
    _reason,
    _verify,
    closed_before_answer,
    connect_timeout,
    request_invalid,
    unreachable,
    upstream_url,
)

__all__ = ["CLOSE_GRACE", "SocketReply", "StreamOpener", "UpstreamSocket"]

#: Bytes asked of the connection per read.
READ_SIZE = 65536
#: How long the closing handshake may hold up :meth:`UpstreamSocket.aclose` (a healthy
#: connection takes its one small write at once; a stuck one is closed anyway).
CLOSE_GRACE = 1.0
#: The handshake's headers that are the WebSocket's own (wsproto writes them): the
#: client's key, version, extensions and subprotocols are of the client's socket.
_SOCKET_HEADER_PREFIX = b"sec-websocket-"
_EVENT_STREAM = [(b"content-type", b"text/event-stream; charset=utf-8")]
#: What the upstream says when a socket has lived as long as it allows (60 minutes at
#: OpenAI): the request never ran, and runs on a new socket.
_LIMIT_REACHED = b"websocket_connection_limit_reached"

#: Opens the TCP connection to ``(host, port)`` (tests pass an in-memory one).
StreamOpener = Callable[[str, int], Awaitable[trio.abc.Stream]]


class _Ended(Exception):
    """The connection ended: a close frame, the upstream's FIN, or a reset."""

    def __init__(self, detail: str, *, reset: bool = False) -> None:
        super().__init__(detail)
        self.reset = reset


class _Invalid(Exception):
    """The upstream broke the WebSocket protocol (or answered the handshake badly)."""


class _TooLarge(Exception):
    """A message over the bound; ``partial`` holds what was read of it."""

    def __init__(self, partial: bytes) -> None:
        super().__init__(f"{len(partial)} bytes")
        self.partial = partial


def _ended_by(event: CloseConnection) -> _Ended:
    if event.code == wsproto.frame_protocol.CloseReason.ABNORMAL_CLOSURE:
        return _Ended("the upstream closed the connection without closing the WebSocket")
    reason = f": {event.reason}" if event.reason else ""
    return _Ended(f"the WebSocket was closed (code {event.code}{reason})")


class _Link:
    """One upstream connection and wsproto's state of it."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.ws = wsproto.WSConnection(wsproto.ConnectionType.CLIENT)
        self.accepted = False
        self._events: deque[Event] = deque()

    async def send(self, event: Event) -> None:
        data = self.ws.send(event)
        try:
            await self.stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise _Ended(_reason(exc) or "the connection broke", reset=True) from None

    async def event(self) -> Event:
        """The next event, reading as needed."""
        while not self._events:
            try:
                data = await self.stream.receive_some(READ_SIZE)
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                raise _Ended(_reason(exc) or "the connection broke", reset=True) from None
            try:
                self.ws.receive_data(bytes(data) if data else None)
                self._events.extend(self.ws.events())
            except (wsproto.utilities.RemoteProtocolError, wsproto.utilities.LocalProtocolError):
                raise _Invalid("the upstream's answer to the handshake is not valid HTTP") from None
            if not data and not self._events:
                raise _Ended("the upstream closed the connection")
        return self._events.popleft()

    async def message(self, limit: int) -> bytes:
        """The next whole text message, as UTF-8; pings are answered on the way."""
        parts: list[bytes] = []
        size = 0
        while True:
            event = await self.event()
            if isinstance(event, TextMessage):
                piece = event.data.encode()
                parts.append(piece)
                size += len(piece)
                if size > limit:
                    raise _TooLarge(b"".join(parts))
                if event.message_finished:
                    return parts[0] if len(parts) == 1 else b"".join(parts)
            elif isinstance(event, Ping):
                await self.send(event.response())
            elif isinstance(event, Pong):
                continue
            elif isinstance(event, CloseConnection):
                raise _ended_by(event)
            elif isinstance(event, BytesMessage):
                raise _Invalid("the upstream sent a binary message, which the API never does")
            else:
                raise _Invalid(f"unexpected {type(event).__name__} on an open WebSocket")


@attrs.define
class SocketReply:
    """One response of an upstream socket, as the relay reads an HTTP response."""

    status: int
    headers: Headers
    _body: AsyncIterator[bytes] | None = None
    method: str = "POST"
    anomaly: str | None = None
    _events: AsyncIterator[SSEFrame] | None = None

    def iter_events(self) -> AsyncIterator[SSEFrame] | None:
        """A streamed response: one event per frame, until the terminal event (raises
        :class:`~proxai.upstream.client.UpstreamBroken` if the socket breaks first,
        :class:`~proxai.upstream.client.EventTooLarge` on a frame over the bound)."""
        return self._events

    def iter_body(self) -> AsyncIterator[bytes]:
        """A refusal's body (a request-level error frame, or a refused handshake)."""
        return self._body if self._body is not None else _once(b"")


async def _once(data: bytes) -> AsyncIterator[bytes]:
    yield data


@attrs.define
class _Turn:
    """One response on the socket: whether the upstream has said all of it (the socket
    may carry the next), and whether the relay let go of it."""

    settled: bool = False
    left: bool = False


def _ssl_context(upstream: UpstreamConfig) -> ssl.SSLContext:
    """The TLS settings HTTP uses for this upstream (``verify``, ``ca_bundle``)."""
    verify = _verify(upstream)
    if isinstance(verify, ssl.SSLContext):
        context = verify
    elif verify:
        context = ssl.create_default_context(cafile=certifi.where())
    else:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(["http/1.1"])
    return context


def _invalid(detail: str) -> ProxyError:
    return ProxyError(
        502,
        f"the upstream's WebSocket cannot be relayed: {detail}",
        "server_error",
        code="upstream_invalid_response",
        kind=OutcomeKind.PROXY_ERROR,
    )


class UpstreamSocket:
    """The upstream WebSocket of one client socket: one response at a time, each sent
    as a ``response.create`` frame and read back as an event stream.

    ``max_message_bytes`` bounds one message (``server.max_event_bytes``: a message
    over it ends its response as an event over that bound ends an HTTP stream).
    """

    def __init__(
        self,
        upstream: UpstreamConfig,
        timeouts: TimeoutsConfig,
        *,
        name: str = "default",
        max_message_bytes: int = 16 * 1024 * 1024,
        open_stream: StreamOpener | None = None,
    ) -> None:
        self.config = upstream
        self.name = name
        self.timeouts = timeouts
        self.max_message_bytes = max_message_bytes
        self._base = httpx.URL(upstream.url)
        self._base_path = UPSTREAM_PROTOCOLS[upstream.protocol].base_path
        self._own_headers = _own_headers(upstream)
        self._tls = self._base.scheme in ("https", "wss")
        self._ssl = _ssl_context(upstream) if self._tls else None
        self._open_stream: StreamOpener = open_stream or trio.open_tcp_stream
        self._link: _Link | None = None
        self._busy = False
        #: Sockets this one has opened (one, if the upstream kept it for every turn).
        self.connections_opened = 0

    @property
    def connected(self) -> bool:
        """Whether a socket is open, kept for the next response."""
        return self._link is not None and self._link.accepted

    @asynccontextmanager
    async def open(
        self,
        method: str,
        raw_path: bytes,
        query: bytes,
        client_headers: Iterable[tuple[bytes, bytes]],
        body: bytes,
    ) -> AsyncIterator[SocketReply]:
        """Send the request ``body`` (a Responses request's JSON) as one frame; yield
        once the first frame is in.

        The reply is an event stream (200), or what a request-level error frame or a
        refused handshake says (its status, headers and body). Raises
        :class:`ProxyError` (502) as :class:`UpstreamClient` does when no connection can
        be made or the upstream hangs up before answering. Leaving before the terminal
        event closes the socket (the next response opens a new one).
        """
        if self._busy:
            raise RuntimeError("an upstream socket carries one response at a time")
        frame = create_frame(body)
        self._busy = True
        turn = _Turn()
        try:
            yield await self._start(turn, frame, method, raw_path, query, client_headers)
        finally:
            turn.left = True
            self._busy = False
            if not turn.settled:
                await self._drop()

    async def _start(
        self,
        turn: _Turn,
        frame: str,
        method: str,
        raw_path: bytes,
        query: bytes,
        client_headers: Iterable[tuple[bytes, bytes]],
    ) -> SocketReply:
        client_headers = list(client_headers)
        while True:
            link = self._link
            kept = link is not None
            if link is None:
                link, refused = await self._connect(raw_path, query, client_headers, method)
                if refused is not None:
                    return refused
            try:
                await link.send(TextMessage(frame))
                first = await link.message(self.max_message_bytes)
            except _Ended as exc:
                await self._drop()
                if kept:
                    continue  # the kept socket was closed meanwhile: once, on a new one
                raise closed_before_answer(str(exc), reset=exc.reset) from None
            except _Invalid as exc:
                raise _invalid(str(exc)) from None
            except _TooLarge as exc:
                events = self._read(link, turn, exc)
                return SocketReply(200, list(_EVENT_STREAM), method=method, events=events)
            kind = event_type(first)
            if kind == b"error":
                refused_now = request_error(first)
                if refused_now is not None:
                    if kept and _LIMIT_REACHED in first:
                        await self._drop()  # the socket's time is up: once, on a new one
                        continue
                    turn.settled = True  # the request never ran: the socket is as it was
                    return SocketReply(
                        refused_now.status, refused_now.headers, _once(refused_now.body), method
                    )
            if kind in SOCKET_TERMINAL_TYPES:
                turn.settled = True
            events = self._read(link, turn, (first, kind))
            return SocketReply(200, list(_EVENT_STREAM), method=method, events=events)

    async def _connect(
        self,
        raw_path: bytes,
        query: bytes,
        client_headers: list[tuple[bytes, bytes]],
        method: str,
    ) -> tuple[_Link, SocketReply | None]:
        """Open the socket (``self._link`` from the moment a connection exists, so that
        leaving closes it); a reply instead when the upstream refuses the handshake."""
        url = upstream_url(self._base, self._base_path, raw_path, query)
        host = url.host
        port = url.port or (443 if self._tls else 80)
        stream: trio.abc.Stream | None = None
        try:
            with trio.move_on_after(self.timeouts.connect) as scope:
                stream = await self._open_stream(host, port)
                if self._ssl is not None:
                    stream = trio.SSLStream(
                        stream, self._ssl, server_hostname=host, https_compatible=True
                    )
                    await stream.do_handshake()
        except BaseException as exc:
            if stream is not None:
                await trio.aclose_forcefully(stream)
            if isinstance(exc, OSError | trio.BrokenResourceError):
                raise unreachable(exc) from None
            raise
        if scope.cancelled_caught or stream is None:
            if stream is not None:
                await trio.aclose_forcefully(stream)
            raise connect_timeout(self.timeouts.connect)
        link = self._link = _Link(stream)
        headers = [
            (n, v)
            for n, v in request_headers_for_upstream(
                client_headers, self._own_headers, credentials=CLIENT_KEY_HEADERS
            )
            if not n.lower().startswith(_SOCKET_HEADER_PREFIX)
        ]
        try:
            target = url.raw_path.decode("ascii")
            await link.send(
                Request(host=url.netloc.decode("ascii"), target=target, extra_headers=headers)
            )
            event = await link.event()
        except (h11.LocalProtocolError, wsproto.utilities.LocalProtocolError, UnicodeError):
            raise request_invalid() from None
        except _Ended as exc:
            raise closed_before_answer(str(exc), reset=exc.reset) from None
        except _Invalid as exc:
            raise _invalid(str(exc)) from None
        if isinstance(event, AcceptConnection):
            link.accepted = True
            self.connections_opened += 1
            return link, None
        if isinstance(event, RejectConnection):
            if event.status_code < 400:
                raise _invalid(
                    f"it answered the handshake with {event.status_code}, "
                    "not 101 Switching Protocols"
                )
            body = self._refusal_body(link) if event.has_body else _once(b"")
            return link, SocketReply(event.status_code, list(event.headers), body, method)
        raise _invalid(f"it answered the handshake with {type(event).__name__}")

    async def _refusal_body(self, link: _Link) -> AsyncIterator[bytes]:
        """A refused handshake's body, as it arrives (the socket is closed after it)."""
        while True:
            try:
                event = await link.event()
            except (_Ended, _Invalid) as exc:
                raise UpstreamBroken(str(exc)) from None
            if isinstance(event, RejectData):
                if event.data:
                    yield bytes(event.data)
                if event.body_finished:
                    return

    async def _read(
        self, link: _Link, turn: _Turn, first: tuple[bytes, bytes | None] | _TooLarge
    ) -> AsyncIterator[SSEFrame]:
        """The response's frames as SSE events, the first one already read, until the
        terminal event."""
        message = first
        while True:
            if isinstance(message, _TooLarge):
                raise EventTooLarge(
                    f"upstream sent an event over {self.max_message_bytes} bytes (max_event_bytes)"
                )
            text, kind = message
            yield as_sse(text, kind)
            if turn.settled:
                return
            if turn.left or link is not self._link:
                raise UpstreamBroken("the response was let go")
            try:
                text = await link.message(self.max_message_bytes)
            except _TooLarge as exc:
                message = exc
                continue
            except (_Ended, _Invalid) as exc:
                raise UpstreamBroken(str(exc)) from None
            kind = event_type(text)
            if kind in SOCKET_TERMINAL_TYPES:
                turn.settled = True
            message = (text, kind)

    async def _drop(self) -> None:
        """Close the socket at once (mid-response: what is left of it goes unread)."""
        link, self._link = self._link, None
        if link is not None:
            await trio.aclose_forcefully(link.stream)

    async def aclose(self) -> None:
        """Close the socket (its client socket ended): a closing handshake when no
        response is under way, within :data:`CLOSE_GRACE`, then the connection."""
        link, self._link = self._link, None
        if link is None:
            return
        with trio.CancelScope(shield=True):
            if link.accepted and not self._busy:
                with trio.move_on_after(CLOSE_GRACE):
                    with suppress(_Ended, wsproto.utilities.LocalProtocolError):
                        await link.send(CloseConnection(code=1000))
            await trio.aclose_forcefully(link.stream)
