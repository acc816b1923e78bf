"""A WebSocket client of an ASGI app in memory, for virtual-time tests.

:func:`open_memory_socket` runs the app's ``websocket`` scope in the caller's
nursery and gives a :class:`MemorySocket`: send text or binary frames, read the
server's frames (with their virtual times), close, or stop reading (the server's
sends then block after ``buffer`` frames, as a socket's would).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import attrs
import trio

__all__ = ["Closed", "Denied", "MemorySocket", "open_memory_socket"]

ASGIApp = Callable[
    [
        dict[str, Any],
        Callable[[], Awaitable[dict[str, Any]]],
        Callable[[dict[str, Any]], Awaitable[None]],
    ],
    Awaitable[None],
]


@attrs.frozen
class Closed:
    """The server closed the socket."""

    code: int
    reason: str = ""


@attrs.frozen
class Denied:
    """The server refused the upgrade (with an HTTP answer, or a bare close: 403)."""

    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@attrs.define(eq=False)
class MemorySocket:
    """The client's side of one in-memory socket."""

    _to_app: trio.MemorySendChannel[dict[str, Any]]
    _from_app: trio.MemoryReceiveChannel[tuple[float, str | Closed | Denied]]
    _app_out: trio.MemorySendChannel[tuple[float, str | Closed | Denied]]
    accepted: trio.Event = attrs.field(factory=trio.Event)
    #: Set once the app's handler has returned.
    finished: trio.Event = attrs.field(factory=trio.Event)
    denied: Denied | None = None
    #: Every frame (or close) the app has handed the client so far, read or not, with
    #: the virtual time it did: what a test compares against what it has read.
    delivered: list[tuple[float, str | Closed | Denied]] = attrs.field(factory=list)
    #: The app's sends blocked on the client's window (they return once it leaves).
    _blocked: set[trio.CancelScope] = attrs.field(factory=set)

    async def send(self, frame: dict[str, Any] | str) -> None:
        text = frame if isinstance(frame, str) else json.dumps(frame)
        await self._to_app.send({"type": "websocket.receive", "text": text})

    async def send_bytes(self, data: bytes) -> None:
        await self._to_app.send({"type": "websocket.receive", "bytes": data})

    #: Set once the client has hung up or sent its close frame: the server sends
    #: nothing more to it, and a send blocked on its window returns (as hypercorn's do).
    left: trio.Event = attrs.field(factory=trio.Event)
    #: The code of the client's close frame, if it sent one (not for a hang-up).
    close_frame_code: int | None = None

    async def close(self, code: int = 1000) -> None:
        """Hang up: the connection is gone (the app's next receive says so, with
        ``code``), and nothing the app sends after reaches the client."""
        await self._leave(code)

    async def send_close(self, code: int = 1000) -> None:
        """Send a close frame, as the SDK's ``connection.close()`` does: the server
        answers it at once (the ``Closed`` reply is the last thing the client reads,
        before any frame the app sends after), then tells the app the client is gone;
        the app's later frames are dropped, as hypercorn drops them."""
        if self.left.is_set():
            return
        self.close_frame_code = code
        self._delivered_close(Closed(code))
        await self._leave(code)

    def _delivered_close(self, reply: Closed) -> None:
        # Past a full window the reply is in `delivered` only (it waits in the socket's
        # buffer behind the unread frames): a test that reads everything still sees it.
        with contextlib.suppress(
            trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError
        ):
            self._app_out.send_nowait((trio.current_time(), reply))
        self.delivered.append((trio.current_time(), reply))

    async def _leave(self, code: int) -> None:
        self.left.set()
        for scope in self._blocked:
            scope.cancel()
        with (
            trio.CancelScope(shield=True),
            contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError),
        ):
            await self._to_app.send({"type": "websocket.disconnect", "code": code})

    async def receive(self) -> tuple[float, str | Closed | Denied]:
        """The server's next frame (or close), with the virtual time it was sent."""
        return await self._from_app.receive()

    def receive_nowait(self) -> tuple[float, str | Closed | Denied] | None:
        """The next frame the app has already sent, or ``None``: a read that never waits
        (a stateful test reads exactly what is there)."""
        try:
            return self._from_app.receive_nowait()
        except trio.WouldBlock:
            return None

    async def frame(self) -> dict[str, Any] | Closed | Denied:
        """The next frame parsed (a text frame is JSON here), or how the socket ended."""
        _, item = await self.receive()
        return json.loads(item) if isinstance(item, str) else item

    async def response(self) -> list[dict[str, Any]]:
        """The frames of one response: up to its terminal event or an ``error`` frame
        with a ``status`` (or the socket's end, as the last item)."""
        frames: list[dict[str, Any]] = []
        while True:
            item = await self.frame()
            if not isinstance(item, dict):
                raise AssertionError(  # noqa: TRY004 - a failed test's assertion
                    f"socket ended before the response did: {item}; {frames}"
                )
            frames.append(item)
            kind = item.get("type")
            if kind in ("response.completed", "response.incomplete", "response.failed"):
                return frames
            if kind == "error" and "status" in item:
                return frames


@asynccontextmanager
async def open_memory_socket(
    app: ASGIApp,
    *,
    path: str = "/v1/responses",
    headers: Sequence[tuple[bytes, bytes]] = (),
    buffer: int = 1024,
    http_response: bool = True,
) -> AsyncIterator[MemorySocket]:
    """Open a socket to ``app``; on exit, hang up and wait for the app to end.

    ``buffer``: the frames the server may send before it blocks on a client that
    does not read. ``http_response``: the server offers ASGI's
    ``websocket.http.response`` extension (hypercorn does), so a refusal can be an
    HTTP answer.
    """
    to_app, app_in = trio.open_memory_channel[dict[str, Any]](64)
    app_out, from_app = trio.open_memory_channel[tuple[float, str | Closed | Denied]](buffer)
    socket = MemorySocket(to_app, from_app, app_out)
    denial: dict[str, Any] = {}
    closed = False

    async def receive() -> dict[str, Any]:
        try:
            return await app_in.receive()
        except trio.EndOfChannel:
            await trio.sleep_forever()
            raise AssertionError("unreachable") from None

    async def deliver(item: str | Closed) -> None:
        """Hand the client ``item`` (waiting while its window is full), or drop it once
        the client has left: hypercorn's sends to a gone client return at once."""
        if socket.left.is_set():
            return
        now = trio.current_time()
        with trio.CancelScope() as blocked:
            socket._blocked.add(blocked)
            try:
                await app_out.send((now, item))
            finally:
                socket._blocked.discard(blocked)
        if not blocked.cancelled_caught:
            socket.delivered.append((trio.current_time(), item))

    async def send(message: dict[str, Any]) -> None:
        nonlocal closed
        await trio.lowlevel.checkpoint()
        kind = message["type"]
        now = trio.current_time()
        if kind == "websocket.accept":
            socket.accepted.set()
        elif kind == "websocket.send":
            if closed:
                raise AssertionError("the app sent a frame after closing the socket")
            assert "text" in message, "the Responses WebSocket sends text frames"
            await deliver(message["text"])
        elif kind == "websocket.close":
            closed = True
            if socket.left.is_set():
                return
            if not socket.accepted.is_set():
                socket.denied = Denied(403, [], b"")
                await app_out.send((now, socket.denied))
                socket.delivered.append((trio.current_time(), socket.denied))
            else:
                await deliver(Closed(message.get("code", 1000), message.get("reason", "")))
        elif kind == "websocket.http.response.start":
            denial.update(status=message["status"], headers=list(message["headers"]))
        elif kind == "websocket.http.response.body":
            denial["body"] = denial.get("body", b"") + message.get("body", b"")
            if not message.get("more_body", False):
                socket.denied = Denied(denial["status"], denial["headers"], denial["body"])
                await app_out.send((now, socket.denied))
                socket.delivered.append((trio.current_time(), socket.denied))

    scope = {
        "type": "websocket",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": [(b"host", b"localhost"), *headers],
        "http_version": "1.1",
        "scheme": "ws",
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8080),
        "subprotocols": [],
        "extensions": {"websocket.http.response": {}} if http_response else {},
    }

    async def run() -> None:
        try:
            await app(scope, receive, send)
        finally:
            socket.finished.set()

    async with trio.open_nursery() as nursery:
        await to_app.send({"type": "websocket.connect"})
        nursery.start_soon(run)
        try:
            yield socket
        finally:
            await socket.close()
            with trio.CancelScope(shield=True):
                # Whatever the client left unread must not hold the app's sends.
                async def drain() -> None:
                    async for _ in from_app:
                        pass

                nursery.start_soon(drain)
                with trio.move_on_after(3600):
                    await socket.finished.wait()
                nursery.cancel_scope.cancel()
            if not socket.finished.is_set():
                raise AssertionError("the app did not end within an hour of the client leaving")
