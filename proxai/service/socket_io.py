"""ASGI's WebSocket message shapes, in one place, and a socket turn as a relay
:class:`~proxai.relay.writer.Downstream`.

:class:`ClientSocket` is one client socket (deny before accepting, accept, send a
text frame, close, receive); :class:`TurnDownstream` is where one response of the
socket goes: the relay writes it an HTTP-shaped answer (a head, then body bytes on
event boundaries) and it sends the client frames: each SSE event's ``data`` as one
text frame, or a whole error body as one ``error`` frame.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

import attrs
import trio

from ..protocols.table import SOCKETS, ResponseRecord
from ..relay.reader import is_event_stream
from ..wire.headers import Headers
from ..wire.sse import SSEFrame
from .asgi_io import ASGIReceive, ASGISend

__all__ = ["CLOSE_SECONDS", "Binary", "ClientSocket", "Gone", "TooLarge", "TurnDownstream"]

#: The most of an error body (an upstream's 4xx JSON) a turn holds to make its frame.
ERROR_BODY_BYTES = 256 * 1024

#: How long a close frame may take to leave: a client that does not read gets no
#: more of proxai's time than this once its socket is being ended.
CLOSE_SECONDS = 1.0


class CloseCode(enum.IntEnum):
    """RFC 6455 section 7.4.1's codes proxai closes with."""

    NORMAL = 1000
    GOING_AWAY = 1001
    UNSUPPORTED_DATA = 1003  # a binary frame: the Responses WebSocket is text only
    POLICY_VIOLATION = 1008
    MESSAGE_TOO_BIG = 1009


@attrs.frozen
class Gone:
    """The client closed the socket (or the connection broke)."""

    code: int | None


@attrs.frozen
class Binary:
    """A binary frame."""


@attrs.frozen
class TooLarge:
    """A text frame past the socket's limit."""

    size: int


class ClientSocket:
    """One client WebSocket, as ASGI gives it. Sends are serialized (a frame is never
    cut by another) and stop once the socket is closed.

    A send notes when it started (:attr:`sending_since`) and nothing more: no deadline
    scope per frame. :meth:`watch_sends`, one task per socket, cuts a turn's frame that
    is still blocked ``bound`` seconds after it started, by cancelling the turn's
    :attr:`turn_sends` (the writer's one scope for all its sends)."""

    def __init__(self, send: ASGISend, receive: ASGIReceive, *, max_message_bytes: int) -> None:
        self._send = send
        self._receive = receive
        self._max = max_message_bytes
        self._lock = trio.Lock()
        self.closed = False
        #: A send was cut short (a deadline passed mid-frame): nothing more can follow.
        self.broken = False
        #: Set once the client is gone (:meth:`receive` saw it).
        self.gone = trio.Event()
        self.frames_out = 0
        #: When the send in flight began (``None`` between sends), and how many began.
        self.sending_since: float | None = None
        self._sends_started = 0
        #: The turn in flight's sends (:attr:`TurnDownstream.sends`): what a cut cancels.
        self.turn_sends: trio.CancelScope | None = None
        #: Set by the next send once :meth:`watch_sends` waits for one.
        self._send_started: trio.Event | None = None

    async def deny(self, status: int, headers: Headers, body: bytes, *, can_answer: bool) -> None:
        """Refuse the upgrade with an HTTP response (a bare 403 where the server
        cannot send one: ASGI's ``websocket.http.response`` extension)."""
        if not can_answer:
            await self._send({"type": "websocket.close", "code": CloseCode.POLICY_VIOLATION})
            return
        await self._send(
            {"type": "websocket.http.response.start", "status": status, "headers": headers}
        )
        await self._send({"type": "websocket.http.response.body", "body": body, "more_body": False})

    async def accept(self, headers: Headers = ()) -> None:  # type: ignore[assignment]
        await self._send({"type": "websocket.accept", "headers": list(headers)})

    async def send_text(self, data: bytes) -> None:
        """Send one frame (bounded: a turn's by :meth:`watch_sends`, proxai's own
        frames by :meth:`send_within`)."""
        # The lock without a round trip through the scheduler when nobody holds it (the
        # send below checkpoints anyway); a wait only behind another frame.
        try:
            self._lock.acquire_nowait()
        except trio.WouldBlock:
            await self._lock.acquire()
        try:
            if self.closed or self.broken:
                return
            self.sending_since = trio.current_time()
            self._sends_started += 1
            if self._send_started is not None:
                self._send_started.set()
                self._send_started = None
            try:
                await self._send(
                    {"type": "websocket.send", "text": data.decode("utf-8", "replace")}
                )
            except trio.Cancelled:
                self.broken = True
                raise
            finally:
                self.sending_since = None
            self.frames_out += 1
        finally:
            self._lock.release()

    async def watch_sends(self, bound: float) -> None:
        """Cut the frame in flight once it has been blocked ``bound`` seconds: the socket
        is broken, the turn's sends are cancelled. Runs as long as the socket; wakes once
        per ``bound`` at most while frames flow, not once per frame."""
        while True:
            since, started = self.sending_since, self._sends_started
            if since is not None:
                await trio.sleep_until(since + bound)
                if self.sending_since != since or self._sends_started != started:
                    continue  # that send ended: look at the one in flight now, if any
                self.broken = True
                if self.turn_sends is not None:
                    self.turn_sends.cancel()
            # Nothing in flight, or the frame in flight is cut (it may not end at once:
            # a send outside a turn has no scope here): wait for the next send to begin.
            self._send_started = event = trio.Event()
            await event.wait()

    async def send_within(self, data: bytes, seconds: float) -> bool:
        """Send one of proxai's own frames (an error frame outside a turn), giving up
        after ``seconds``; ``False``: the client does not read, the socket is broken."""
        with trio.move_on_after(seconds):
            await self.send_text(data)
            return not self.broken
        self.broken = True
        return False

    async def close(self, code: int = CloseCode.NORMAL, reason: str = "") -> None:
        """Close the socket: at most :data:`CLOSE_SECONDS`, and no close frame after
        a cut frame or once the client is gone (the server then drops the connection)."""
        with trio.move_on_after(CLOSE_SECONDS):
            async with self._lock:
                if self.closed:
                    return
                self.closed = True
                if not self.gone.is_set() and not self.broken:
                    await self._send(
                        {"type": "websocket.close", "code": int(code), "reason": reason}
                    )
        self.closed = True

    async def connected(self) -> bool:
        """Wait for the handshake's ``websocket.connect`` (``False``: the client left)."""
        message = await self._receive()
        if message["type"] == "websocket.connect":
            return True
        self.gone.set()
        return False

    async def receive(self) -> str | Binary | TooLarge | Gone:
        """The client's next frame."""
        message = await self._receive()
        if message["type"] == "websocket.disconnect":
            self.gone.set()
            return Gone(message.get("code"))
        text = message.get("text")
        if text is None:
            return Binary()
        # Counted in characters first: a frame is never shorter in UTF-8.
        if len(text) > self._max or len(text.encode()) > self._max:
            return TooLarge(len(text.encode()))
        return str(text)


class TurnDownstream:
    """Where one response of a socket goes, as the relay writes it."""

    def __init__(self, socket: ClientSocket, record: ResponseRecord) -> None:
        self._socket = socket
        self._record = record
        #: The writer's scope for all of this turn's sends: the socket's watch cuts them.
        self.sends = socket.turn_sends = trio.CancelScope()
        self._status = 0
        self._headers: Headers = []
        self._sse = False
        self._error = bytearray()
        #: Whether anything of the response went to the client (its error frame too).
        self.sent = False

    async def send_head(self, status: int, headers: Headers) -> None:
        self._status, self._headers = status, headers
        self._sse = is_event_stream(status, headers)

    async def send_body(
        self, data: bytes, *, more: bool = True, frames: Sequence[SSEFrame] = ()
    ) -> None:
        if self._sse:
            # Each event, as the relay framed it, is one text frame (its data); the
            # bytes of SSE around them are not the socket's.
            for frame in frames:
                if frame.data is not None:
                    self._record.event(frame.data)
                    self.sent = True
                    await self._send(frame.data)
            return
        room = ERROR_BODY_BYTES - len(self._error)
        if room > 0:
            self._error += data[:room]
        if not more:
            status = self._status if self._status >= 400 else 502
            body = bytes(self._error)
            if self._status < 400:
                body = (
                    b'{"error": {"type": "server_error", "code": "upstream_invalid_response", '
                    b'"message": "the upstream answered a streaming request without an event '
                    b"stream (HTTP " + str(self._status).encode() + b')"}}'
                )
            self.sent = True
            await self._send(SOCKETS.error_frame(status, body, self._headers))

    async def _send(self, frame: bytes) -> None:
        # Bounded by the socket's watch (ClientSocket.watch_sends), not a scope per frame.
        await self._socket.send_text(frame)

    async def wait_disconnect(self) -> None:
        await self._socket.gone.wait()
