"""The stack's floor: minimal ASGI apps on hypercorn's trio worker.

Served by ``hypercorn --worker-class trio bench.floor_apps:<app>`` in
``bench/floor.py``, next to proxai and in front of the same upstream, so the
throughput bench can say how much of a stream's CPU is the stack itself:

- ``static``: answers every request with the pre-rendered 40-delta stream in one
  body send (no upstream): hypercorn + h11 + trio's request cycle alone;
- ``paced``: the per-event bench's stream (``bench/streams.py``, the variant named
  by the request's model) sent by the app itself, one ASGI send per event with the
  upstream's pauses (no upstream): hypercorn's cost per send, alone;
- ``socket_paced``: ``paced`` over the Responses WebSocket as well: a socket's every
  text message (a ``response.create`` naming a variant) is answered with that
  stream's events, each event's ``data`` one text frame, with the same pauses (no
  upstream): hypercorn's cost per WebSocket send, alone, beside its cost per SSE send
  (a ``POST`` to the same app is ``paced``'s answer);
- ``held``: sends the per-event bench's held stream (its preamble's Responses events)
  and holds the stream open (memory);
- ``relay``: the straightforward relay the issue describes, httpx's
  ``AsyncClient.stream`` to the upstream, one ASGI send per upstream chunk, no
  framing, no observer, no deadlines;
- ``transport``: the same through httpx's transport (what proxai uses), one task:
  the *stock relay*;
- ``h11relay``: the same relay reading the upstream with h11 on a trio socket (a
  LIFO keep-alive pool, no httpx): what the upstream read costs without httpcore.
- ``shaped``: the h11 relay in proxai's shape (a nursery per request: a reader, an
  observer and a writer linked by two memory channels of proxai's capacity, and a
  watcher of the client's disconnect), each task doing nothing but pass the chunk on:
  what the architecture costs per event and per stream before proxai does any work.

The relays forward the request's path. The upstream's address comes from
``FLOOR_UPSTREAM`` (``http://127.0.0.1:PORT``) and the static body from
``FLOOR_BODY`` (a file).
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import h11
import httpx
import trio

from bench.streams import Variant, variant_of, writes

Scope = dict[str, Any]

# No cap on connections (httpx's default is 100): the memory bench holds 1,000 streams.
_LIMITS = httpx.Limits(max_connections=None, max_keepalive_connections=100)
_HEAD = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]


async def _lifespan(receive: Any, send: Any) -> None:
    while True:
        message = await receive()
        await send({"type": message["type"] + ".complete"})
        if message["type"] == "lifespan.shutdown":
            return


async def _read_body(receive: Any) -> bytes:
    parts: list[bytes] = []
    while True:
        message = await receive()
        parts.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(parts)


def _floor_body() -> bytes:
    return Path(os.environ["FLOOR_BODY"]).read_bytes()


class _Static:
    def __init__(self) -> None:
        self._body: bytes | None = None

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if self._body is None:
            self._body = _floor_body()
        await _read_body(receive)
        await send({"type": "http.response.start", "status": 200, "headers": _HEAD})
        await send({"type": "http.response.body", "body": self._body, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


class _Paced:
    """Plays the per-event bench's stream itself: one body send per event, with the
    upstream's pauses (hypercorn's per-send cost without any upstream)."""

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        variant = variant_of(await _read_body(receive))
        await send({"type": "http.response.start", "status": 200, "headers": _HEAD})
        for write in writes(variant, "responses"):
            if write.pause:
                await trio.sleep(write.pause)
            await send({"type": "http.response.body", "body": write.data, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


class _SocketPaced:
    """``paced``, and the same stream over a WebSocket: one ``websocket.send`` per
    event (its ``data`` as text, made once per variant), the same pauses."""

    def __init__(self) -> None:
        self._http = _Paced()
        self._frames: dict[Variant, list[tuple[float, str]]] = {}

    def frames(self, variant: Variant) -> list[tuple[float, str]]:
        frames = self._frames.get(variant)
        if frames is None:
            frames = self._frames[variant] = [
                (write.pause, _data_of(write.data)) for write in writes(variant, "responses")
            ]
        return frames

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "websocket":
            await self._http(scope, receive, send)
            return
        if (await receive())["type"] != "websocket.connect":
            return
        await send({"type": "websocket.accept"})
        while True:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                return
            text = message.get("text") or ""
            for pause, frame in self.frames(variant_of(text.encode())):
                if pause:
                    await trio.sleep(pause)
                await send({"type": "websocket.send", "text": frame})


def _data_of(event: bytes) -> str:
    """The ``data`` of one SSE event (the per-event bench's are one line each)."""
    line = next(line for line in event.split(b"\n") if line.startswith(b"data: "))
    return line[6:].decode()


class _Held:
    """Sends the head and the per-event bench's held stream's events, then holds the
    stream until the client leaves (a held stream, without an upstream)."""

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        held = writes(Variant(hold=True), "responses")
        await _read_body(receive)
        await send({"type": "http.response.start", "status": 200, "headers": _HEAD})
        for write in held:
            await send({"type": "http.response.body", "body": write.data, "more_body": True})
        while (await receive())["type"] != "http.disconnect":
            pass


class _Relay:
    def __init__(self, *, transport_only: bool) -> None:
        self._transport_only = transport_only
        self._client: httpx.AsyncClient | None = None
        self._transport: httpx.AsyncHTTPTransport | None = None

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        base = os.environ["FLOOR_UPSTREAM"]
        body = await _read_body(receive)
        headers = [(b"content-type", b"application/json")]
        if self._transport_only:
            if self._transport is None:
                self._transport = httpx.AsyncHTTPTransport(limits=_LIMITS)
            request = httpx.Request("POST", base + scope["path"], headers=headers, content=body)
            response = await self._transport.handle_async_request(request)
            try:
                await self._relay(response, send)
            finally:
                await response.aclose()
            return
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=60, limits=_LIMITS)
        async with self._client.stream(
            "POST", base + scope["path"], headers=headers, content=body
        ) as response:
            await self._relay(response, send)

    async def _relay(self, response: httpx.Response, send: Any) -> None:
        start = {"type": "http.response.start", "status": response.status_code, "headers": _HEAD}
        await send(start)
        async for chunk in response.aiter_raw():
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _send_request(
    stream: trio.SocketStream, conn: h11.Connection, path: str, body: bytes
) -> None:
    """The client's POST, forwarded on ``conn`` (the h11 relays' one request shape)."""
    head = h11.Request(
        method="POST",
        target=path,
        headers=[
            ("host", urlsplit(os.environ["FLOOR_UPSTREAM"]).netloc),
            ("content-type", "application/json"),
            ("content-length", str(len(body))),
        ],
    )
    await stream.send_all(
        conn.send(head) + conn.send(h11.Data(data=body)) + conn.send(h11.EndOfMessage())
    )


Forward = Callable[[bytes], Awaitable[None]]


async def _read_response(
    stream: trio.SocketStream, conn: h11.Connection, send: Any, forward: Forward
) -> bool:
    """Read the upstream's response on ``conn``: its head to ``send``, each body chunk to
    ``forward``; whether the body ended (``False``: the upstream closed or broke the
    exchange first)."""
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(await stream.receive_some(65536))
        elif isinstance(event, h11.Response):
            start = {"type": "http.response.start", "status": event.status_code}
            await send({**start, "headers": _HEAD})
        elif isinstance(event, h11.Data):
            await forward(bytes(event.data))
        else:
            return isinstance(event, h11.EndOfMessage)


class _H11Relay:
    """One ASGI send per upstream chunk, reading the upstream with h11 on trio sockets.

    Keep-alive connections wait in a LIFO list; a connection goes back only when
    both sides finished the exchange cleanly. No timeouts and no retries: it is the
    floor of the read path, not a client.
    """

    def __init__(self) -> None:
        self._idle: list[tuple[trio.SocketStream, h11.Connection]] = []

    async def _connection(self) -> tuple[trio.SocketStream, h11.Connection]:
        if self._idle:
            return self._idle.pop()
        url = urlsplit(os.environ["FLOOR_UPSTREAM"])
        stream = await trio.open_tcp_stream(url.hostname or "127.0.0.1", url.port or 80)
        return stream, h11.Connection(h11.CLIENT)

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        body = await _read_body(receive)
        stream, conn = await self._connection()
        reusable = False
        try:
            await _send_request(stream, conn, scope["path"], body)
            ended = await self._relay(stream, conn, send, receive)
            reusable = ended and conn.our_state is h11.DONE and conn.their_state is h11.DONE
        finally:
            if reusable:
                conn.start_next_cycle()
                self._idle.append((stream, conn))
            else:
                await stream.aclose()

    async def _relay(
        self, stream: trio.SocketStream, conn: h11.Connection, send: Any, receive: Any
    ) -> bool:
        """Relay the response in this task; whether its body ended."""

        async def forward(data: bytes) -> None:
            await send({"type": "http.response.body", "body": data, "more_body": True})

        ended = await _read_response(stream, conn, send, forward)
        if ended:
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        return ended


class _ShapedRelay(_H11Relay):
    """:class:`_H11Relay` with proxai's four tasks per request and nothing else.

    Each upstream chunk goes reader → observer → writer over two channels of 4, as
    proxai's relay does (``proxai/relay/relay.py``); the watcher cancels the nursery
    when the client leaves. No framing, no deadlines, no observation.
    """

    async def _relay(
        self, stream: trio.SocketStream, conn: h11.Connection, send: Any, receive: Any
    ) -> bool:
        ended = False
        to_observer, observed = trio.open_memory_channel[bytes | None](4)
        to_writer, written = trio.open_memory_channel[bytes | None](4)

        async def reader() -> None:
            nonlocal ended
            async with to_observer:
                ended = await _read_response(stream, conn, send, to_observer.send)
                await to_observer.send(None)

        async def observer() -> None:
            async with observed, to_writer:
                async for chunk in observed:
                    await to_writer.send(chunk)

        async def writer() -> None:
            async with written:
                async for chunk in written:
                    if chunk is None:
                        await send({"type": "http.response.body", "body": b"", "more_body": False})
                        nursery.cancel_scope.cancel()
                        return
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})

        async def watcher() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            nursery.cancel_scope.cancel()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(reader)
            nursery.start_soon(observer)
            nursery.start_soon(writer)
            nursery.start_soon(watcher)
        return ended


static = _Static()
paced = _Paced()
socket_paced = _SocketPaced()
held = _Held()
relay = _Relay(transport_only=False)
transport = _Relay(transport_only=True)
h11relay = _H11Relay()
shaped = _ShapedRelay()
