"""An upstream that answers with raw bytes: the responses no well-behaved server sends.

:class:`~proxai.testing.upstream.ScriptedUpstream` writes its responses through h11,
which refuses to frame a message wrongly. This one parses each request with h11 and
answers with whatever bytes its responder returns, written in one ``send_all``, then
reads the next request on the same connection: a body longer than its
``Content-Length``, data after the last chunk, a body on a ``HEAD`` response, both
``Content-Length`` and ``Transfer-Encoding``. With ``ssl_context`` it serves https.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Sequence

import h11
import trio

from .upstream import RecordedRequest, loopback_listeners, receive_request

__all__ = ["RawUpstream", "raw_response"]

RawResponder = Callable[[RecordedRequest], bytes]


def raw_response(
    body: bytes,
    *,
    status: int = 200,
    headers: Sequence[tuple[str, str]] = (("content-type", "application/json"),),
    content_length: int | None = None,
) -> bytes:
    """An HTTP/1.1 response's bytes: ``headers``, then a ``Content-Length`` (``body``'s
    own unless ``content_length`` says otherwise; ``-1``: none), then ``body`` as it is."""
    lines = [f"HTTP/1.1 {status} X".encode()]
    lines += [f"{name}: {value}".encode("latin-1") for name, value in headers]
    length = len(body) if content_length is None else content_length
    if length >= 0:
        lines.append(b"content-length: %d" % length)
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


class RawUpstream:
    """Serve raw responses on a loopback port chosen by the OS (``base_url`` ends in /v1)."""

    def __init__(self, responder: RawResponder, *, ssl_context: ssl.SSLContext | None = None):
        self._responder = responder
        self._ssl_context = ssl_context
        self.requests: list[RecordedRequest] = []
        self.connections_opened = 0
        self.connections_closed = 0
        self.port = 0

    @property
    def base_url(self) -> str:
        scheme = "https" if self._ssl_context is not None else "http"
        return f"{scheme}://127.0.0.1:{self.port}/v1"

    @property
    def open_connections(self) -> int:
        return self.connections_opened - self.connections_closed

    async def serve(self, *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen on 127.0.0.1 (port 0) and serve until cancelled."""
        self.port, listeners = await loopback_listeners(self._ssl_context)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.serve_listeners, self._handle, listeners)
            task_status.started(self.base_url)

    async def _handle(self, stream: trio.abc.Stream) -> None:
        self.connections_opened += 1
        pending = b""  # bytes of the next request already read
        try:
            while True:
                request, pending = await self._read_request(stream, pending)
                if request is None:
                    return
                await stream.send_all(self._responder(request))
        except (trio.BrokenResourceError, trio.ClosedResourceError, h11.RemoteProtocolError):
            pass
        finally:
            self.connections_closed += 1
            with trio.CancelScope(shield=True):
                await stream.aclose()

    async def _read_request(
        self, stream: trio.abc.Stream, pending: bytes
    ) -> tuple[RecordedRequest | None, bytes]:
        """The next request (``None`` once the client closed) and what followed it: each
        request gets a fresh h11 connection, since h11 would insist on answering the last."""
        conn = h11.Connection(h11.SERVER)
        if pending:  # (an empty read is h11's end of stream)
            conn.receive_data(pending)
        request = await receive_request(stream, conn)
        if request is None:
            return None, b""
        self.requests.append(request)
        return request, conn.trailing_data[0]
