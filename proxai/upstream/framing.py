"""Upstream responses whose framing is wrong: what proxai checks, and what it says.

Two faults, on either transport:

- **surplus bytes**: more than the framing allows (a body longer than its
  ``Content-Length``, data after the last chunk, a body on a ``HEAD``, ``204`` or
  ``304`` response). They are left in the connection's buffer once the response has
  ended, and a connection pooled with them would answer the next request, another
  client's, from them. The client gets its response as framed, the surplus is
  dropped with the connection, and the request's outcome notes it (as nginx logs
  "upstream sent more data than specified").
- **both Content-Length and Transfer-Encoding** (RFC 9112 section 6.3: a sender must
  not, and whoever relays it must not forward the ``Content-Length``): a 502 with
  ``code: "upstream_invalid_response"``, as nginx answers, and the connection is
  closed unread (:meth:`proxai.upstream.client.UpstreamClient.open`).

Each transport's body stream is an :class:`UpstreamBody` and counts its surplus.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx

from ..wire.headers import Headers

__all__ = ["ReceivingBody", "UpstreamBody", "conflicting_framing", "surplus_anomaly"]


class UpstreamBody(httpx.AsyncByteStream):
    """A transport's response body: once read to its end, ``surplus`` is the number of
    bytes the upstream sent past it (the connection is then closed, never pooled)."""

    surplus = 0


class ReceivingBody(UpstreamBody):
    """A body read one ``await receive()`` at a time (the lean transport's): the relay
    reads it with no async generator between it and the socket, each of which is one
    more frame a held stream keeps suspended (and one more registration with trio)."""

    async def receive(self) -> bytes:
        """The body's next bytes as they arrive; ``b""`` once it has ended."""
        raise NotImplementedError

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while data := await self.receive():
            yield data


def _has(headers: Headers, name: bytes) -> bool:
    return any(n.lower() == name for n, _ in headers)


def conflicting_framing(headers: Headers) -> bool:
    """Both ``Content-Length`` and ``Transfer-Encoding``: which one frames the body?"""
    return _has(headers, b"content-length") and _has(headers, b"transfer-encoding")


def surplus_anomaly(method: str, status: int, headers: Headers, surplus: int) -> str:
    """The outcome's note for a response followed by ``surplus`` bytes."""
    if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
        where = "a body on a response that has none"
    elif _has(headers, b"transfer-encoding"):
        where = "data after the last chunk"
    else:
        where = "a body longer than its Content-Length"
    return (
        f"upstream sent more data than its response's framing allows ({where}: "
        f"{surplus} bytes); dropped with the connection, which was not reused"
    )
