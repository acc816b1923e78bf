"""The relay: one trio nursery per proxied request.

Four tasks share the request's nursery, linked by bounded memory channels so
that a slow client slows the upstream read instead of filling proxai's memory::

    upstream ──httpx──▶ reader ──(frames)──▶ observer ──(bytes)──▶ writer ──ASGI──▶ client
                                                                   watcher ◀──ASGI receive()

- the **reader** is the only task that touches the upstream response: it waits
  for the headers (bounded by ``first_byte``), frames SSE bodies into whole
  events and reports how the body ended;
- the **observer** feeds each batch of frames to the protocol's sans-io
  observer, forwards the bytes unchanged, and waits for the next batch no
  longer than the observer's deadline; when that passes it cancels the reader
  (closing the upstream connection) and appends the observer's closing bytes;
- the **writer** is the only task that calls ASGI ``send()``;
- the **watcher** waits on ASGI ``receive()``, where hypercorn reports a client
  disconnect, and then cancels the whole nursery: the upstream connection is
  closed at once and nothing of the request outlives it.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from typing import Any

import attrs
import trio

from .config import TimeoutsConfig
from .errors import ProxyError
from .headers import Headers, response_headers_for_client
from .observer import PassThroughObserver, StreamObserver, Verdict
from .outcome import Outcome, OutcomeKind
from .sse import SSEFrame, SSEFramer
from .upstream import UpstreamBroken, UpstreamClient

__all__ = ["ProxiedRequest", "Relay", "send_error"]

ASGISend = Callable[[dict[str, Any]], Awaitable[None]]
ASGIReceive = Callable[[], Awaitable[dict[str, Any]]]
ObserverFactory = Callable[[], StreamObserver]

# Channel capacities, in messages (one upstream read or one batch of frames each).
# Small on purpose: backpressure from a slow client must reach the upstream socket.
READER_CHANNEL_SIZE = 4
WRITER_CHANNEL_SIZE = 4


@attrs.frozen
class ProxiedRequest:
    """What the client asked for, as the relay forwards it."""

    method: str
    path: str
    query: bytes
    headers: Headers
    body: bytes


@attrs.frozen
class _Head:
    """The upstream's status and headers; ``sse`` when the body is an event stream."""

    status: int
    headers: Headers
    sse: bool


@attrs.frozen
class _Body:
    """Bytes of one upstream read: whole frames only when the body is SSE."""

    data: bytes
    frames: Sequence[SSEFrame]


@attrs.frozen
class _End:
    """The upstream body ended; ``tail`` is an unfinished SSE frame's bytes."""

    broken: bool
    tail: bytes = b""
    detail: str | None = None


async def send_error(send: ASGISend, error: ProxyError) -> None:
    """Answer with ``error`` as an HTTP response in OpenAI's error format."""
    body = error.body()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        *error.headers,
    ]
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


def _is_event_stream(status: int, headers: Headers) -> bool:
    if not 200 <= status < 300:
        return False
    for name, value in headers:
        if name.lower() == b"content-type":
            return value.split(b";", 1)[0].strip().lower() == b"text/event-stream"
    return False


class Relay:
    """Proxies one request to the upstream and its response to the client."""

    def __init__(
        self,
        upstream: UpstreamClient,
        timeouts: TimeoutsConfig,
        request: ProxiedRequest,
        send: ASGISend,
        receive: ASGIReceive,
        *,
        observer_factory: ObserverFactory = PassThroughObserver,
    ) -> None:
        self._upstream = upstream
        self._timeouts = timeouts
        self._request = request
        self._send = send
        self._receive = receive
        self._observer_factory = observer_factory
        self._started = 0.0
        #: Cancelled by the observer task when it ends the stream itself, so the
        #: upstream connection closes while the closing bytes go out.
        self._reader_scope = trio.CancelScope()
        #: Set once every body byte has been handed to the server: a disconnect
        #: after that is the client closing a finished exchange, not an abort.
        self._delivered = False
        self.outcome = Outcome(request.method, request.path)

    def _elapsed(self) -> float:
        return trio.current_time() - self._started

    async def run(self) -> Outcome:
        """Relay until the response is complete or the client is gone."""
        self._started = trio.current_time()
        up_send, up_recv = trio.open_memory_channel[_Head | _Body | _End | ProxyError](
            READER_CHANNEL_SIZE
        )
        out_send, out_recv = trio.open_memory_channel[_Head | bytes | ProxyError](
            WRITER_CHANNEL_SIZE
        )
        async with trio.open_nursery() as nursery:
            # The nursery's scope is cancelled by the watcher (client gone) and by
            # the writer (response done, so the watcher can stop).
            nursery.start_soon(self._watch_disconnect, nursery.cancel_scope)
            nursery.start_soon(self._read_upstream, up_send)
            nursery.start_soon(self._observe, up_recv, out_send)
            nursery.start_soon(self._write_client, out_recv, nursery.cancel_scope)
        self.outcome.total_s = self._elapsed()
        return self.outcome

    async def _watch_disconnect(self, request_scope: trio.CancelScope) -> None:
        while True:
            message = await self._receive()
            if message["type"] == "http.disconnect":
                if not self._delivered:
                    self.outcome.kind = OutcomeKind.CLIENT_DISCONNECTED
                request_scope.cancel()
                return

    async def _read_upstream(
        self, channel: trio.MemorySendChannel[_Head | _Body | _End | ProxyError]
    ) -> None:
        request = self._request
        async with channel, AsyncExitStack() as stack:
            with self._reader_scope:
                try:
                    with trio.fail_after(self._timeouts.first_byte):
                        response = await stack.enter_async_context(
                            self._upstream.open(
                                request.method,
                                request.path,
                                request.query,
                                request.headers,
                                request.body,
                            )
                        )
                except trio.TooSlowError:
                    self.outcome.kind = OutcomeKind.STALLED_FIRST_BYTE
                    await channel.send(
                        ProxyError(
                            504,
                            "the upstream sent no response headers within "
                            f"{self._timeouts.first_byte} s (proxai first_byte timeout)",
                            "server_error",
                            code="upstream_timeout",
                        )
                    )
                    return
                except ProxyError as exc:
                    await channel.send(exc)
                    return
                self.outcome.first_byte_s = self._elapsed()
                sse = _is_event_stream(response.status, response.headers)
                await channel.send(_Head(response.status, response.headers, sse))
                framer = SSEFramer() if sse else None
                try:
                    async for data in response.iter_body():
                        self.outcome.bytes_in += len(data)
                        if framer is None:
                            await channel.send(_Body(data, ()))
                            continue
                        frames = framer.feed(data)
                        await channel.send(
                            _Body(b"".join([f.raw for f in frames]) if frames else b"", frames)
                        )
                except UpstreamBroken as exc:
                    tail = framer.close() if framer else b""
                    await channel.send(_End(broken=True, tail=tail, detail=str(exc)))
                    return
                await channel.send(_End(broken=False, tail=framer.close() if framer else b""))

    async def _observe(
        self,
        upstream: trio.MemoryReceiveChannel[_Head | _Body | _End | ProxyError],
        client: trio.MemorySendChannel[_Head | bytes | ProxyError],
    ) -> None:
        async with upstream, client:
            head = await upstream.receive()
            if isinstance(head, ProxyError):
                self.outcome.kind = self.outcome.kind or OutcomeKind.PROXY_ERROR
                self.outcome.detail = head.message
                await client.send(head)
                return
            assert isinstance(head, _Head)
            self.outcome.status = head.status
            self.outcome.streaming = head.sse
            observer = self._observer_factory() if head.sse else PassThroughObserver()
            await client.send(head)
            verdict = await self._relay_body(upstream, client, observer)
            if not 200 <= head.status < 300 and verdict.kind is OutcomeKind.COMPLETED:
                verdict = Verdict(OutcomeKind.UPSTREAM_ERROR, f"upstream answered {head.status}")
            self.outcome.kind = verdict.kind
            self.outcome.detail = verdict.detail
            if verdict.closing:
                await client.send(verdict.closing)

    async def _relay_body(
        self,
        upstream: trio.MemoryReceiveChannel[_Head | _Body | _End | ProxyError],
        client: trio.MemorySendChannel[_Head | bytes | ProxyError],
        observer: StreamObserver,
    ) -> Verdict:
        """Forward body bytes until the upstream ends or the observer's deadline passes."""
        while True:
            message = await self._next_message(upstream, observer)
            if message is None:  # the observer's deadline passed
                self._reader_scope.cancel()
                return observer.on_deadline(trio.current_time())
            if isinstance(message, _Body):
                if message.frames:
                    self._count(message.frames)
                    observer.on_frames(message.frames, trio.current_time())
                if message.data:
                    await client.send(message.data)
                continue
            assert isinstance(message, _End)
            verdict = observer.on_end(
                broken=message.broken, detail=message.detail, now=trio.current_time()
            )
            # An unfinished last event is forwarded when proxai adds nothing after
            # it (the client's parser drops it, as it would have without proxai);
            # it is dropped when proxai appends an event, which must start at a
            # boundary.
            if message.tail and (not verdict.closing or not message.tail.strip(b"\r\n")):
                await client.send(message.tail)
            return verdict

    async def _next_message(
        self,
        upstream: trio.MemoryReceiveChannel[_Head | _Body | _End | ProxyError],
        observer: StreamObserver,
    ) -> _Head | _Body | _End | ProxyError | None:
        """The reader's next message, or ``None`` if the observer's deadline passes first.

        A message already queued is taken without looking at the clock: it
        arrived while proxai was busy downstream, so the upstream was not silent.
        """
        try:
            return upstream.receive_nowait()
        except trio.WouldBlock:
            pass
        deadline = observer.deadline()
        if deadline == math.inf:
            return await upstream.receive()
        with trio.move_on_at(deadline):
            return await upstream.receive()
        return None

    def _count(self, frames: Sequence[SSEFrame]) -> None:
        events = sum(1 for f in frames if f.data is not None)
        if events and self.outcome.first_event_s is None:
            self.outcome.first_event_s = self._elapsed()
        self.outcome.events += events

    async def _write_client(
        self,
        channel: trio.MemoryReceiveChannel[_Head | bytes | ProxyError],
        request_scope: trio.CancelScope,
    ) -> None:
        async with channel:
            head = await channel.receive()
            if isinstance(head, ProxyError):
                self.outcome.status = head.status
                self._delivered = True
                await send_error(self._send, head)
            else:
                assert isinstance(head, _Head)
                headers = response_headers_for_client(
                    head.headers, keep_content_length=not head.sse
                )
                await self._send(
                    {"type": "http.response.start", "status": head.status, "headers": headers}
                )
                async for data in channel:
                    assert isinstance(data, bytes)
                    self.outcome.bytes_out += len(data)
                    await self._send(
                        {"type": "http.response.body", "body": data, "more_body": True}
                    )
                self._delivered = True
                await self._send({"type": "http.response.body", "body": b"", "more_body": False})
        request_scope.cancel()
