"""A scripted Responses WebSocket upstream: a real WebSocket server on loopback.

Each ``response.create`` frame it receives gets a :class:`SocketScript`: text frames
to send (:class:`~proxai.testing.upstream.Send`, one frame each), pauses, a stall
until the client closes, an abrupt close or a reset, a ping, a closing handshake. A
handshake can be refused with a status instead (:class:`Refuse`). It records every
socket's handshake and frames, and when the client closed it, so tests can check what
proxai sent and how fast it let go.

It speaks RFC 6455 with ``wsproto`` over trio sockets (TLS with ``ssl_context``), and
can serve a connection in memory too (:meth:`ScriptedSocketUpstream.open_stream`, for
tests on trio's virtual clock).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import suppress
from typing import Any

import attrs
import trio
import trio.testing
import wsproto
import wsproto.utilities
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Event,
    Pong,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)
from wsproto.events import Ping as PingEvent

from .upstream import (
    Close,
    Reset,
    Send,
    Sleep,
    Stall,
    in_order,
    loopback_listeners,
    reset_on_close,
)

__all__ = [
    "Binary",
    "CloseFrame",
    "Ping",
    "RecordedFrame",
    "RecordedSocket",
    "Refuse",
    "ScriptedSocketUpstream",
    "SocketScript",
    "socket_frame",
]


@attrs.frozen
class Ping:
    """Send a ping (the client's pong is recorded)."""

    payload: bytes = b"ping"


@attrs.frozen
class CloseFrame:
    """Close the WebSocket with a closing handshake's first frame, then the connection."""

    code: int = 1000
    reason: str = ""


@attrs.frozen
class Binary:
    """Send these bytes as one binary message (the API never does)."""

    data: bytes


SocketStep = Send | Sleep | Stall | Close | Reset | Ping | CloseFrame | Binary


@attrs.frozen
class Refuse:
    """Refuse the handshake: this status, headers and body instead of 101."""

    status: int = 403
    headers: Sequence[tuple[str, str]] = (("content-type", "application/json"),)
    body: bytes = b'{"error":{"message":"refused","type":"invalid_request_error"}}'


def socket_frame(event: Mapping[str, Any]) -> bytes:
    """An event as the API sends it over a socket: compact JSON, one frame."""
    return json.dumps(event, ensure_ascii=False, separators=(",", ":")).encode()


@attrs.frozen
class SocketScript:
    """What the upstream does for one ``response.create``: its steps, in order. When
    they run out the socket waits for the next frame."""

    steps: Sequence[SocketStep] = ()

    @classmethod
    def events(
        cls,
        events: Iterable[bytes | Mapping[str, Any]],
        *,
        delay: float = 0.0,
        then: Sequence[SocketStep] = (),
    ) -> SocketScript:
        """Each event as one frame, ``delay`` seconds apart, then ``then``."""
        steps: list[SocketStep] = []
        for i, event in enumerate(events):
            if delay and i:
                steps.append(Sleep(delay))
            steps.append(Send(event if isinstance(event, bytes) else socket_frame(event)))
        steps.extend(then)
        return cls(tuple(steps))

    @classmethod
    def error(
        cls,
        status: int,
        error: Mapping[str, Any],
        headers: Mapping[str, str] | None = None,
    ) -> SocketScript:
        """A request-level error frame (``{"type": "error", "status": ...}``)."""
        frame: dict[str, Any] = {"type": "error", "status": status, "error": dict(error)}
        if headers is not None:
            frame["headers"] = dict(headers)
        return cls((Send(socket_frame(frame)),))

    @property
    def frames(self) -> list[bytes]:
        """The text frames the steps send, in order."""
        return [s.data for s in self.steps if isinstance(s, Send)]


@attrs.define
class RecordedSocket:
    """A socket as the scripted upstream saw it (times are ``trio.current_time()``)."""

    index: int
    target: str
    #: The handshake's headers (``host`` included; wsproto's own among them).
    headers: list[tuple[bytes, bytes]]
    #: The extensions the client offered (``Sec-WebSocket-Extensions``).
    extensions: list[str]
    opened_at: float
    frames: list[RecordedFrame] = attrs.field(factory=list)
    pongs: list[bytes] = attrs.field(factory=list)
    #: When the connection ended, and whether the client ended it (a close frame, its
    #: FIN or a reset) rather than the script.
    closed_at: float | None = None
    closed_by_client: bool = False
    #: The code of the client's close frame, if it sent one.
    close_code: int | None = None
    _closed: trio.Event = attrs.field(factory=trio.Event, repr=False)

    def header(self, name: str) -> str | None:
        """The first value of handshake header ``name`` (case-insensitive), decoded."""
        key = name.lower().encode()
        for n, v in self.headers:
            if n.lower() == key:
                return v.decode("latin-1")
        return None

    async def wait_closed(self) -> float:
        """Wait until the connection has ended; return when it did."""
        await self._closed.wait()
        assert self.closed_at is not None
        return self.closed_at

    def _mark_closed(self, *, by_client: bool) -> None:
        if self.closed_at is None:
            self.closed_at = trio.current_time()
            self.closed_by_client = by_client
            self._closed.set()


@attrs.define
class RecordedFrame:
    """A text frame the upstream received."""

    text: str
    received_at: float
    socket: RecordedSocket = attrs.field(repr=False)

    def json(self) -> Any:
        return json.loads(self.text)


Responder = Callable[[RecordedFrame], SocketScript]
Refuser = Callable[[RecordedSocket], Refuse | None]


class _Peer:
    """One connection's stream and wsproto state, with sends serialized."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.ws = wsproto.WSConnection(wsproto.ConnectionType.SERVER)
        self._lock = trio.Lock()

    async def send(self, event: Event) -> None:
        async with self._lock:
            await self.stream.send_all(self.ws.send(event))

    async def events(self) -> list[Event] | None:
        """The events of the next read; ``None`` at the client's FIN."""
        data = await self.stream.receive_some(65536)
        if not data:
            return None
        self.ws.receive_data(bytes(data))
        return list(self.ws.events())


class ScriptedSocketUpstream:
    """Serve socket scripts on a loopback port chosen by the OS.

    ``responder`` maps each received frame to its script, or is a sequence of scripts
    played in the order frames arrive, across sockets (the last one repeats).
    ``refuse`` refuses handshakes: one :class:`Refuse` for all, or a function of the
    socket. Start it with ``url = await nursery.start(upstream.serve)``; ``url`` is an
    ``http(s)://127.0.0.1:PORT/v1`` base URL (proxai maps it to ``ws(s)://``).
    """

    def __init__(
        self,
        responder: Responder | Sequence[SocketScript],
        *,
        refuse: Refuse | Refuser | None = None,
        ssl_context: Any = None,
    ) -> None:
        self._ssl_context = ssl_context
        self._responder: Responder = (
            responder
            if callable(responder)
            else in_order(responder, lambda: len(self.frames), "ScriptedSocketUpstream")
        )
        if refuse is None or isinstance(refuse, Refuse):
            fixed = refuse

            def refuser(socket: RecordedSocket) -> Refuse | None:
                return fixed

            self._refuser: Refuser = refuser
        else:
            self._refuser = refuse
        self.sockets: list[RecordedSocket] = []
        self.frames: list[RecordedFrame] = []
        self.port = 0
        self._changed = trio.Condition()
        self._nursery: trio.Nursery | None = None

    @property
    def base_url(self) -> str:
        scheme = "https" if self._ssl_context is not None else "http"
        return f"{scheme}://127.0.0.1:{self.port}/v1"

    async def serve(self, *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen on 127.0.0.1 (port 0) and serve until cancelled."""
        self.port, listeners = await loopback_listeners(self._ssl_context)
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(trio.serve_listeners, self._handle, listeners)
            task_status.started(self.base_url)

    async def open_stream(self, host: str, port: int) -> trio.abc.Stream:
        """A connection to this upstream in memory (an ``open_stream`` for
        :class:`~proxai.upstream.websocket.UpstreamSocket`); needs :meth:`serve` running."""
        assert self._nursery is not None, "serve() first"
        client, server = trio.testing.memory_stream_pair()
        self._nursery.start_soon(self._handle, server)
        await trio.lowlevel.checkpoint()
        return client

    async def wait_for_frames(self, count: int) -> list[RecordedFrame]:
        """Wait until at least ``count`` frames have arrived."""
        async with self._changed:
            while len(self.frames) < count:
                await self._changed.wait()
        return self.frames[:count]

    async def wait_for_sockets(self, count: int) -> list[RecordedSocket]:
        """Wait until at least ``count`` sockets have completed their handshake."""
        async with self._changed:
            while len(self.sockets) < count:
                await self._changed.wait()
        return self.sockets[:count]

    @property
    def open_sockets(self) -> int:
        return sum(1 for s in self.sockets if s.closed_at is None)

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def _handle(self, stream: trio.abc.Stream) -> None:
        peer = _Peer(stream)
        record: RecordedSocket | None = None
        by_client = True
        try:
            request = await self._handshake(peer)
            if request is None:
                return
            record = RecordedSocket(
                len(self.sockets),
                request.target,
                [(b"host", request.host.encode()), *request.extra_headers],
                [str(e) for e in request.extensions],
                trio.current_time(),
            )
            self.sockets.append(record)
            await self._notify()
            refusal = self._refuser(record)
            if refusal is not None:
                by_client = False
                await self._refuse(peer, refusal)
                return
            await peer.send(AcceptConnection())
            by_client = await self._run(peer, record)
        except (
            trio.BrokenResourceError,
            trio.ClosedResourceError,
            wsproto.utilities.RemoteProtocolError,
        ):
            pass
        finally:
            if record is not None:
                record._mark_closed(by_client=by_client)
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(stream)
                await self._notify()

    async def _handshake(self, peer: _Peer) -> Request | None:
        while True:
            events = await peer.events()
            if events is None:
                return None
            for event in events:
                if isinstance(event, Request):
                    return event

    async def _refuse(self, peer: _Peer, refusal: Refuse) -> None:
        headers = [(k.encode(), v.encode()) for k, v in refusal.headers]
        headers.append((b"content-length", str(len(refusal.body)).encode()))
        await peer.send(
            RejectConnection(status_code=refusal.status, headers=headers, has_body=True)
        )
        await peer.send(RejectData(data=refusal.body, body_finished=True))

    async def _run(self, peer: _Peer, record: RecordedSocket) -> bool:
        """Serve an accepted socket; whether the client ended it."""
        incoming_send, incoming = trio.open_memory_channel[RecordedFrame](math.inf)
        client_ended = False
        async with trio.open_nursery() as nursery:

            async def receive() -> None:
                nonlocal client_ended
                parts: list[str] = []
                with suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                    while (events := await peer.events()) is not None:
                        if not await self._received(peer, record, events, parts, incoming_send):
                            break
                client_ended = True
                record._mark_closed(by_client=True)
                nursery.cancel_scope.cancel()

            async def play() -> None:
                async for frame in incoming:
                    if not await self._play(peer, self._responder(frame)):
                        record._mark_closed(by_client=False)
                        nursery.cancel_scope.cancel()
                        return

            nursery.start_soon(receive)
            nursery.start_soon(play)
        return client_ended

    async def _received(
        self,
        peer: _Peer,
        record: RecordedSocket,
        events: list[Event],
        parts: list[str],
        incoming: trio.MemorySendChannel[RecordedFrame],
    ) -> bool:
        """Record one read's events (``parts``: a text message so far); False at the
        client's close frame."""
        for event in events:
            if isinstance(event, TextMessage):
                parts.append(event.data)
                if event.message_finished:
                    frame = RecordedFrame("".join(parts), trio.current_time(), record)
                    parts.clear()
                    record.frames.append(frame)
                    self.frames.append(frame)
                    await self._notify()
                    incoming.send_nowait(frame)
            elif isinstance(event, PingEvent):
                await peer.send(event.response())
            elif isinstance(event, Pong):
                record.pongs.append(bytes(event.payload))
            elif isinstance(event, CloseConnection):
                record.close_code = event.code
                return False
        return True

    async def _play(self, peer: _Peer, script: SocketScript) -> bool:
        """Play one script; False once it ended the connection."""
        for step in script.steps:
            if isinstance(step, Send):
                await peer.send(TextMessage(data=step.data.decode()))
            elif isinstance(step, Binary):
                await peer.send(BytesMessage(data=step.data))
            elif isinstance(step, Ping):
                await peer.send(PingEvent(payload=step.payload))
            elif isinstance(step, Sleep):
                await trio.sleep(step.seconds)
            elif isinstance(step, Stall):
                await trio.sleep(math.inf)
            elif isinstance(step, CloseFrame):
                await peer.send(CloseConnection(code=step.code, reason=step.reason))
                await peer.stream.aclose()
                return False
            else:
                if isinstance(step, Reset) and isinstance(
                    peer.stream, trio.SocketStream | trio.SSLStream
                ):
                    reset_on_close(peer.stream)
                await peer.stream.aclose()
                return False
        return True
