"""ASGI's message shapes, in one place: proxai's other code sends and receives through these.

:class:`AsgiDownstream` is the relay's :class:`~proxai.relay.writer.Downstream`
over ASGI ``send``/``receive``; :func:`read_body` reads a request body under
proxai's limits; :func:`send_plain` answers a whole small response.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import trio

from ..errors import ProxyError, request_too_large
from ..outcome import OutcomeKind
from ..wire.headers import Headers
from ..wire.sse import SSEFrame

__all__ = ["ASGIReceive", "ASGISend", "AsgiDownstream", "read_body", "send_plain"]

ASGISend = Callable[[dict[str, Any]], Awaitable[None]]
ASGIReceive = Callable[[], Awaitable[dict[str, Any]]]


class AsgiDownstream:
    """The client's side of one HTTP exchange, as ASGI gives it."""

    #: Never cut by proxai: the server bounds its sends (``drop_stalled_clients``).
    sends: trio.CancelScope | None = None

    def __init__(
        self,
        send: ASGISend,
        receive: ASGIReceive,
        extra_headers: Sequence[tuple[bytes, bytes]] = (),
    ) -> None:
        self._send = send
        self._receive = receive
        #: Headers every response head of the exchange carries (CORS, for an allowed origin).
        self._extra = list(extra_headers)

    def add_headers(self, headers: Sequence[tuple[bytes, bytes]]) -> None:
        """Headers of proxai's own that every response head carries from now on,
        replacing the upstream's of the same name (``x-ratelimit-*``)."""
        self._extra += headers

    async def send_head(self, status: int, headers: Headers) -> None:
        if self._extra:
            own = {name for name, _ in self._extra}
            headers = [(n, v) for n, v in headers if n not in own] + self._extra
        await self._send({"type": "http.response.start", "status": status, "headers": headers})

    async def send_body(
        self, data: bytes, *, more: bool = True, frames: Sequence[SSEFrame] = ()
    ) -> None:
        # SSE over HTTP: the events' bytes are the body as they are.
        await self._send({"type": "http.response.body", "body": data, "more_body": more})

    async def wait_disconnect(self) -> None:
        # Hypercorn reports a client that hung up only here: send() never raises.
        while (await self._receive())["type"] != "http.disconnect":
            pass


async def send_plain(
    downstream: AsgiDownstream,
    status: int,
    content_type: bytes,
    body: bytes,
    *,
    with_body: bool = True,
) -> None:
    """A whole response; ``with_body=False`` answers a HEAD (the length, no body)."""
    headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]
    await downstream.send_head(status, headers)
    await downstream.send_body(body if with_body else b"", more=False)


async def read_body(headers: Headers, receive: ASGIReceive, *, limit: int, seconds: float) -> bytes:
    """The whole request body, refused with 413 as soon as it passes ``limit`` bytes and
    with 408 if it takes longer than ``seconds`` to arrive."""
    for name, value in headers:
        if name == b"content-length":
            try:
                declared = int(value)
            except ValueError:
                raise ProxyError.invalid_request("invalid Content-Length header") from None
            if declared > limit:
                raise request_too_large(limit)
    chunks: list[bytes] = []
    size = 0
    with trio.move_on_after(seconds):
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise ProxyError(
                    499,
                    "the client went away before its request body was read",
                    "invalid_request_error",
                    kind=OutcomeKind.CLIENT_DISCONNECTED,
                )
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise request_too_large(limit)
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)
    raise ProxyError(
        408,
        f"the request body did not arrive within {seconds} s (timeouts.request_body)",
        "invalid_request_error",
        code="request_timeout",
        kind=OutcomeKind.REQUEST_BODY_TIMEOUT,
    )
