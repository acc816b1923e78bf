"""The writer: the only code that sends the response to the client.

It writes through a :class:`Downstream`, the carrier at the edge (SSE over HTTP:
:mod:`proxai.service.asgi_io`; the Responses WebSocket: :mod:`proxai.service.socket_io`),
so the relay knows nothing of ASGI. Each body write carries its bytes and the whole
events in them, framed once upstream of it: a carrier writes the events its way. It holds
the response head back until the first body bytes, so a stream that fails
before its first byte becomes a plain HTTP error the client can retry; joins
bytes that queued behind a slow send; and makes the response's last send.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Protocol

import attrs
import trio

from ..errors import ErrorShape, ProxyError
from ..outcome import Outcome
from ..wire.headers import Headers, response_headers_for_client
from ..wire.sse import SSEFrame
from .exchange import Tap
from .messages import Chunk, Head, Out, ToWriter, merged

__all__ = ["JOIN_MAX_BYTES", "Closing", "Downstream", "Writer", "error_response", "send_error"]

#: The most bytes the writer joins into one send: httpcore's read size, so a joined
#: send is never larger than a single upstream read can be.
JOIN_MAX_BYTES = 64 * 1024


class Downstream(Protocol):
    """Where a response goes: the client's side of the exchange."""

    async def send_head(self, status: int, headers: Headers) -> None:
        """The status line and headers."""
        ...

    async def send_body(
        self, data: bytes, *, more: bool = True, frames: Sequence[SSEFrame] = ()
    ) -> None:
        """Body bytes; ``more=False`` ends the body (``data`` may be empty). ``frames``:
        the whole events in ``data`` of an event stream, as the relay framed them (an SSE
        carrier writes ``data``; another writes the events, and never parses ``data``)."""
        ...

    async def wait_disconnect(self) -> None:
        """Return once the client is gone (the server only says so here)."""
        ...

    @property
    def sends(self) -> trio.CancelScope | None:
        """A scope the carrier cancels to cut the writer's sends short (the socket's,
        for a frame blocked too long: one scope per response, not one per send);
        ``None``: the carrier never cuts them (over HTTP the server bounds its sends)."""
        ...


def error_response(
    error: ProxyError, shape: ErrorShape, extra_headers: Sequence[tuple[bytes, bytes]] = ()
) -> tuple[Headers, bytes]:
    """The headers and body of ``error`` as an HTTP response in the route's error format."""
    body = error.body(shape)
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        *error.headers,
        *extra_headers,
    ]
    return headers, body


async def send_error(
    downstream: Downstream,
    error: ProxyError,
    shape: ErrorShape = ErrorShape.OPENAI,
    extra_headers: Sequence[tuple[bytes, bytes]] = (),
) -> bytes:
    """Answer with ``error``; the body sent."""
    headers, body = error_response(error, shape, extra_headers)
    await downstream.send_head(error.status, headers)
    await downstream.send_body(body, more=False)
    return body


@attrs.frozen
class Closing:
    """How the writer ends the body, once the observer task has sent its last bytes: the
    observer task's one word on it (its default: a plain end)."""

    #: What to send once a stalled client reads again (the observer task could not hand
    #: it over: the writer was blocked on the client).
    after_stall: Out | None = None
    #: End the body without its final message: the server then closes the connection, and
    #: the client sees the body broken, as the upstream's was.
    abort: bool = False


class Writer:
    """The relay's writer task and the state the observer task shares with it."""

    #: One per stream: no instance dict.
    __slots__ = (
        "_client_write",
        "_closing",
        "_downstream",
        "_error_shape",
        "_outcome",
        "_response_headers",
        "_tap",
        "_time",
        "delivered",
        "queued",
        "writing_since",
    )

    def __init__(
        self,
        downstream: Downstream,
        outcome: Outcome,
        *,
        client_write: float,
        error_shape: ErrorShape,
        response_headers: Sequence[tuple[bytes, bytes]],
        tap: Tap | None,
    ) -> None:
        self._downstream = downstream
        self._outcome = outcome
        self._client_write = client_write
        self._error_shape = error_shape
        self._response_headers = list(response_headers)
        self._tap = tap
        #: Trio's time, read through the run's clock (set by :meth:`run`: once per send,
        #: two calls fewer than ``trio.current_time``).
        self._time: Callable[[], float] = trio.current_time
        #: When the current send began (None between sends): the observer task bounds
        #: a blocked send by ``client_write`` from here.
        self.writing_since: float | None = None
        #: Body chunks the observer task has handed over that this task has not taken
        #: (a moment below zero when it takes one before the count): it looks for more
        #: to join to a send only when there are, not with a failed take once per event.
        self.queued = 0
        #: How to end the body (:meth:`close_with`; read once the observer closed its channel).
        self._closing = Closing()
        #: Every body byte has been handed to the server: a disconnect after that is the
        #: client closing a finished exchange, not an abort.
        self.delivered = False

    def close_with(self, closing: Closing) -> None:
        """The observer task's last word, before it closes the channel: how the body ends.
        Never blocks (the writer may be blocked on the client)."""
        self._closing = closing

    async def run(
        self, channel: trio.MemoryReceiveChannel[ToWriter], request_scope: trio.CancelScope
    ) -> None:
        """Write until the observer closes ``channel``, then cancel ``request_scope`` (the
        response is done, so the disconnect watcher can stop)."""
        self._time = trio.lowlevel.current_clock().current_time
        async with channel:
            sends = self._downstream.sends
            if sends is None:
                done = await self._write(channel)
            else:
                with sends:
                    done = await self._write(channel)
                if sends.cancelled_caught:
                    # The carrier cut its sends (and can send nothing more): what the
                    # observer still hands on goes nowhere, but it is taken, so the
                    # observer ends as it would have.
                    async for _ in channel:
                        pass
                    done = True
        if done:
            request_scope.cancel()

    async def _write(self, channel: trio.MemoryReceiveChannel[ToWriter]) -> bool:
        """The response, from the observer's messages; whether it is done (``False``:
        the observer ended without a word)."""
        try:
            message: ToWriter | None = await channel.receive()
        except trio.EndOfChannel:
            # The observer ended without a word: the reader failed, and its error is
            # the request's. Cancelling here could catch the reader in a checkpoint
            # of its cleanup and replace that error with a Cancelled.
            return False
        if isinstance(message, Head):
            head = message
            # The head is held until the first body bytes: until then the stream
            # can still turn into an HTTP error.
            try:
                message = await channel.receive()
            except trio.EndOfChannel:
                message = None
            if not isinstance(message, ProxyError):
                await self._send_head(head)
                del head
                # The body, until the observer closes the channel. The wait for the next
                # message is taken here, with nothing sent still held (a held stream
                # keeps this frame, and what is in it, for its life).
                while message is not None:
                    message, ended = await self._send_batch(message, channel)
                    if ended:
                        break
                    if message is None:
                        try:
                            message = await channel.receive()
                        except trio.EndOfChannel:
                            break
                closing = self._closing
                if closing.after_stall is not None and closing.after_stall.data:
                    await self._send_body(closing.after_stall)
                self.delivered = True
                if not closing.abort:
                    with self._closing_send(), self._sending():
                        await self._downstream.send_body(b"", more=False)
        if isinstance(message, ProxyError):
            self._outcome.status = message.status
            self.delivered = True
            with self._closing_send():
                body = await self._send_error(message)
            if self._tap is not None:
                self._tap.client.add(body)
        return True

    async def _send_batch(
        self, message: ToWriter, channel: trio.MemoryReceiveChannel[ToWriter]
    ) -> tuple[ToWriter | None, bool]:
        """Send ``message`` and the body bytes already queued behind it, in one send (up
        to :data:`JOIN_MAX_BYTES`); the message taken that did not fit (the next send's),
        and whether the observer has closed the channel.

        Under load that saves a send per read, and nothing waits to be joined. The cap
        keeps one send no larger than one upstream read can be, so ``client_write``,
        which bounds one send, means what it did."""
        assert not isinstance(message, (Head, ProxyError))
        self.queued -= 1
        batch: list[Chunk] = [message]
        size = len(message.data)
        following: ToWriter | None = None
        ended = False
        while size < JOIN_MAX_BYTES and self.queued > 0:
            try:
                queued = channel.receive_nowait()
            except trio.WouldBlock:
                break
            except trio.EndOfChannel:
                ended = True
                break
            assert not isinstance(queued, (Head, ProxyError))
            if size + len(queued.data) > JOIN_MAX_BYTES:
                following = queued  # the next send's (counted off when it is sent)
                break
            self.queued -= 1
            batch.append(queued)
            size += len(queued.data)
        await self._send_body(batch[0] if len(batch) == 1 else merged(batch))
        return following, ended

    def _closing_send(self) -> trio.CancelScope:
        """A scope for the response's last send. The server may close the connection
        inside it (shutting down, or ``Connection: close``), which tells the watcher
        the client is gone; the watcher's cancel must not cut that close short and
        leave the socket open. Bounded like any write to the client."""
        return trio.CancelScope(shield=True, deadline=trio.current_time() + self._client_write)

    @contextmanager
    def _sending(self) -> Iterator[None]:
        """Around one send to the client: notes when it started (``writing_since``)."""
        self.writing_since = trio.current_time()
        try:
            yield
        finally:
            self.writing_since = None

    async def _send_error(self, error: ProxyError) -> bytes:
        headers, body = error_response(error, self._error_shape, self._response_headers)
        with self._sending():
            await self._downstream.send_head(error.status, headers)
        with self._sending():
            await self._downstream.send_body(body, more=False)
        return body

    async def _send_head(self, head: Head) -> None:
        headers = response_headers_for_client(head.headers, keep_content_length=not head.sse)
        if self._response_headers:  # proxai's own replace the upstream's (a chained proxai)
            own = {name for name, _ in self._response_headers}
            headers = [(n, v) for n, v in headers if n not in own] + self._response_headers
        with self._sending():
            await self._downstream.send_head(head.status, headers)

    async def _send_body(self, chunk: Chunk) -> None:
        data = chunk.data
        self._outcome.bytes_out += len(data)
        if self._tap is not None:
            self._tap.client.add(data)
        # _sending(), inline: this runs once per relayed event.
        self.writing_since = self._time()
        try:
            await self._downstream.send_body(data, frames=chunk.frames)
        finally:
            self.writing_since = None
