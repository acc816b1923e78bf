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
    cut by another) and stop once the socket is closed."""

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
        """Send one frame (the caller bounds the wait: a turn's writer by
        ``client_write``, proxai's own frames by :meth:`send_within`)."""
        async with self._lock:
            if self.closed or self.broken:
                return
            try:
                await self._send(
                    {"type": "websocket.send", "text": data.decode("utf-8", "replace")}
                )
            except trio.Cancelled:
                self.broken = True
                raise
            self.frames_out += 1

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

    def __init__(
        self, socket: ClientSocket, record: ResponseRecord, *, client_write: float
    ) -> None:
        self._socket = socket
        # The relay judges a client that reads nothing for ``client_write`` stalled and
        # lets go of the upstream, then holds its last bytes for the client; a socket
        # cannot hold a turn for later (the next turns wait behind it), so a frame
        # still blocked a moment after that is cut and the socket ends.
        self._bound = client_write + CLOSE_SECONDS
        self._record = record
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
        with trio.move_on_after(self._bound):
            await self._socket.send_text(frame)

    async def wait_disconnect(self) -> None:
        await self._socket.gone.wait()
