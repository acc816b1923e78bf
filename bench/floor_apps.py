"""The stack's floor: minimal ASGI apps on hypercorn's trio worker.

Served by ``hypercorn --worker-class trio bench.floor_apps:<app>`` in
``bench/floor.py``, next to proxai and in front of the same upstream, so the
throughput bench can say how much of a stream's CPU is the stack itself:

- ``static``: answers every request with the pre-rendered 40-delta stream in one
  body send (no upstream): hypercorn + h11 + trio's request cycle alone;
- ``held``: sends the stream's first event and holds the stream open (memory);
- ``relay``: the straightforward relay the issue describes, httpx's
  ``AsyncClient.stream`` to the upstream, one ASGI send per upstream chunk, no
  framing, no observer, no deadlines;
- ``transport``: the same through httpx's transport (what proxai uses), one task.

The upstream's address comes from ``FLOOR_UPSTREAM`` (``http://127.0.0.1:PORT``)
and the static body from ``FLOOR_BODY`` (a file).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import httpx

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


class _Held:
    """Sends the head and the first event of ``FLOOR_BODY``, then holds the stream
    until the client leaves (the memory bench's held stream, without an upstream)."""

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        first = _floor_body().split(b"\n\n", 1)[0] + b"\n\n"
        await _read_body(receive)
        await send({"type": "http.response.start", "status": 200, "headers": _HEAD})
        await send({"type": "http.response.body", "body": first, "more_body": True})
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
            request = httpx.Request("POST", base + "/v1/responses", headers=headers, content=body)
            response = await self._transport.handle_async_request(request)
            try:
                await self._relay(response, send)
            finally:
                await response.aclose()
            return
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=60, limits=_LIMITS)
        async with self._client.stream(
            "POST", base + "/v1/responses", headers=headers, content=body
        ) as response:
            await self._relay(response, send)

    async def _relay(self, response: httpx.Response, send: Any) -> None:
        start = {"type": "http.response.start", "status": response.status_code, "headers": _HEAD}
        await send(start)
        async for chunk in response.aiter_raw():
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


static = _Static()
held = _Held()
relay = _Relay(transport_only=False)
transport = _Relay(transport_only=True)
