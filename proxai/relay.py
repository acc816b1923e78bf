"""The relay: one trio nursery per proxied request.

Four tasks share the request's nursery, linked by bounded memory channels so
that a slow client slows the upstream read instead of filling proxai's memory::

    upstream ──httpx──▶ reader ──(frames)──▶ observer ──(bytes)──▶ writer ──ASGI──▶ client
                                                                   watcher ◀──ASGI receive()

- the **reader** is the only task that touches the upstream response: it waits
  for the headers (bounded by ``first_byte`` and ``total``), frames SSE bodies
  into whole events, stamps each read with the upstream clock and reports how
  the body ended;
- the **observer** feeds each batch of frames to the protocol's sans-io
  observer, forwards the bytes unchanged, and waits for the next batch no
  longer than the observer's deadline (and the request's ``total``); when one
  passes it cancels the reader (closing the upstream connection) and appends
  the observer's closing bytes at a frame boundary;
- the **writer** is the only task that calls ASGI ``send()``. It holds the
  response head back until the first body bytes, so a stream that fails before
  its first byte becomes a plain HTTP error the client can retry;
- the **watcher** waits on ASGI ``receive()``, where hypercorn reports a client
  disconnect, and then cancels the whole nursery: the upstream connection is
  closed at once and nothing of the request outlives it.

The *upstream clock* measures only time the reader spent waiting for the
upstream: while the reader is blocked handing a read to a full channel (the
client is slow), the clock stands still. Observers get their times from it, so
their deadlines measure the upstream's silence, never proxai's own waiting.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AsyncExitStack
from typing import Any, Protocol

import attrs
import trio

from .config import TimeoutsConfig
from .errors import ErrorShape, ProxyError
from .headers import Headers, response_headers_for_client
from .observer import PassThroughObserver, StreamObserver, Verdict
from .outcome import AttemptRecord, Outcome, OutcomeKind
from .retry import RetryPlan, parse_retry_after
from .sse import SSEFrame, SSEFramer
from .upstream import UpstreamBroken, UpstreamClient, UpstreamResponse

__all__ = [
    "ObserverFactory",
    "ProxiedRequest",
    "Relay",
    "UpstreamClock",
    "UpstreamTarget",
    "pass_through",
    "send_error",
    "shutdown_error",
]

ASGISend = Callable[[dict[str, Any]], Awaitable[None]]
ASGIReceive = Callable[[], Awaitable[dict[str, Any]]]
#: Builds a stream's observer with the deadlines of the upstream that serves it.
ObserverFactory = Callable[[TimeoutsConfig], StreamObserver]

# Channel capacities, in messages (one upstream read or one batch of frames each).
# Small on purpose: backpressure from a slow client must reach the upstream socket.
READER_CHANNEL_SIZE = 4
WRITER_CHANNEL_SIZE = 4
#: The most bytes the writer joins into one send: httpcore's read size, so a joined
#: send is never larger than a single upstream read can be.
JOIN_MAX_BYTES = 64 * 1024


@attrs.frozen
class ProxiedRequest:
    """What the client asked for, as the relay forwards it."""

    method: str
    path: str  # decoded, for routing and records
    raw_path: bytes  # as the client encoded it, for forwarding
    query: bytes
    headers: Headers
    #: False for a generation request that asked for no stream: the upstream sends its
    #: headers only when the whole answer is ready, so only ``total`` bounds the wait.
    first_byte_applies: bool = True


class Tap(Protocol):
    """Sees the bytes of a request's exchange (captures): never changes them."""

    def upstream_head(self, status: int, headers: Headers) -> None: ...

    @property
    def upstream(self) -> _Sink: ...

    @property
    def client(self) -> _Sink: ...


class _Sink(Protocol):
    def add(self, data: bytes) -> None: ...


@attrs.frozen
class UpstreamTarget:
    """One upstream a request may go to: its client, deadlines and the body it gets
    (normalization and model rewrites can differ per upstream)."""

    client: UpstreamClient
    timeouts: TimeoutsConfig
    body: bytes


def pass_through(timeouts: TimeoutsConfig) -> StreamObserver:
    """The observer factory for bodies proxai does not interpret."""
    return PassThroughObserver()


@attrs.frozen
class _Head:
    """The upstream's status and headers; ``sse`` when the body is an event stream."""

    status: int
    headers: Headers
    sse: bool
    at: float  # on the upstream clock


@attrs.frozen
class _Body:
    """Bytes of one upstream read (whole frames only, for SSE), stamped on the upstream clock."""

    data: bytes
    frames: Sequence[SSEFrame]
    at: float


@attrs.frozen
class _End:
    """The upstream body ended, cleanly or cut short by ``fault``; ``tail`` is an
    unfinished SSE frame's bytes."""

    at: float
    fault: OutcomeKind | None = None
    tail: bytes = b""
    detail: str | None = None


class _WriterBlocked(Exception):
    """The writer has been blocked on the client too long: ``client_stalled``
    (``timeouts.client_write``) or ``total_timeout``. ``pending`` holds the bytes
    that could not be handed over (they are delivered if the client reads again)."""

    def __init__(self, kind: OutcomeKind, pending: bytes) -> None:
        super().__init__(kind.value)
        self.kind = kind
        self.pending = pending


_ToObserver = _Head | _Body | _End | ProxyError
_ToWriter = _Head | bytes | ProxyError


class UpstreamClock:
    """Trio time minus the time the reader spent blocked on a full channel."""

    def __init__(self) -> None:
        self._paused_total = 0.0
        self._paused_since: float | None = None

    def now(self) -> float:
        wall = trio.current_time()
        paused = self._paused_total
        if self._paused_since is not None:
            paused += wall - self._paused_since
        return wall - paused

    async def send_paused(
        self, channel: trio.MemorySendChannel[_ToObserver], message: _ToObserver
    ) -> None:
        """Send on ``channel``; the clock stands still while the send is blocked."""
        try:
            channel.send_nowait(message)
        except trio.WouldBlock:
            pass
        else:
            return
        self._paused_since = trio.current_time()
        try:
            await channel.send(message)
        finally:
            self._paused_total += trio.current_time() - self._paused_since
            self._paused_since = None


async def send_error(
    send: ASGISend,
    error: ProxyError,
    shape: ErrorShape = ErrorShape.OPENAI,
    extra_headers: Sequence[tuple[bytes, bytes]] = (),
) -> bytes:
    """Answer with ``error`` as an HTTP response in the route's error format; the body."""
    body = error.body(shape)
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        *error.headers,
        *extra_headers,
    ]
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})
    return body


def _retry_after(headers: Headers) -> float | None:
    for name, value in headers:
        if name.lower() == b"retry-after":
            return parse_retry_after(value, time.time())
    return None


def _is_event_stream(status: int, headers: Headers) -> bool:
    if not 200 <= status < 300:
        return False
    for name, value in headers:
        if name.lower() == b"content-type":
            return value.split(b";", 1)[0].strip().lower() == b"text/event-stream"
    return False


_UPSTREAM_END_CODES = {
    OutcomeKind.UPSTREAM_EOF: "upstream_closed",
    OutcomeKind.UPSTREAM_RESET: "upstream_reset",
    OutcomeKind.UPSTREAM_EVENT_TOO_LARGE: "upstream_event_too_large",
}
_UPSTREAM_ENDS = frozenset(_UPSTREAM_END_CODES)
_TIMEOUTS = frozenset(
    {OutcomeKind.STALLED_IDLE, OutcomeKind.STALLED_TOOL_ARGUMENTS, OutcomeKind.TOTAL_TIMEOUT}
)
#: Ends that leave the client's response cut short.
_FAULTS = _UPSTREAM_ENDS | _TIMEOUTS | {OutcomeKind.CLIENT_STALLED, OutcomeKind.SHUTDOWN}


def _error_before_first_byte(verdict: Verdict) -> ProxyError:
    """A stream that ended before any byte reached the client, as an HTTP error.

    Clients retry 5xx before a stream starts, which is what a stall or an
    early close before the first event deserves.
    """
    message = verdict.detail or "the upstream stream ended before its first event"
    if verdict.kind is OutcomeKind.SHUTDOWN:
        return shutdown_error(message)
    if verdict.kind in _UPSTREAM_ENDS:
        code = _UPSTREAM_END_CODES[verdict.kind]
        return ProxyError(502, message, "server_error", code=code, kind=verdict.kind)
    return ProxyError(504, message, "server_error", code="upstream_timeout", kind=verdict.kind)


SHUTDOWN_MESSAGE = "proxai is shutting down; retry the request"


def shutdown_error(message: str = SHUTDOWN_MESSAGE) -> ProxyError:
    """503 with ``Retry-After``: another proxai instance can take the request."""
    return ProxyError(
        503,
        message,
        "server_error",
        code="proxy_shutting_down",
        headers=((b"retry-after", b"1"),),
        kind=OutcomeKind.SHUTDOWN,
    )


class Relay:
    """Proxies one request to the upstream and its response to the client.

    ``targets`` holds every upstream of the request's route by name; ``plan``
    says which one to try and, while nothing has reached the client, which next.
    ``timeouts`` bounds the whole exchange (``total``, ``client_write``); each
    upstream's own deadlines come from its target.
    """

    def __init__(
        self,
        targets: Mapping[str, UpstreamTarget],
        plan: RetryPlan,
        timeouts: TimeoutsConfig,
        request: ProxiedRequest,
        send: ASGISend,
        receive: ASGIReceive,
        *,
        observer_factory: ObserverFactory = pass_through,
        outcome: Outcome | None = None,
        error_shape: ErrorShape = ErrorShape.OPENAI,
        max_event_bytes: int = 16 * 1024 * 1024,
        can_abort: bool = True,
        response_headers: Sequence[tuple[bytes, bytes]] = (),
        tap: Tap | None = None,
        on_attempt: Callable[[AttemptRecord, int], None] | None = None,
    ) -> None:
        #: Told of each attempt as soon as it is decided, with its index (metrics).
        self._on_attempt = on_attempt
        #: Headers proxai adds to the response (x-proxai-request-id).
        self._response_headers = list(response_headers)
        self._tap = tap
        #: Whether ending a response without its final message makes the server break
        #: the connection (HTTP/1.1). Hypercorn's HTTP/2 leaves such a stream open, so
        #: there a cut-short body is ended normally rather than left hanging.
        self._can_abort = can_abort
        self._error_shape = error_shape
        self._max_event_bytes = max_event_bytes
        #: When the writer's current ASGI send began (None between sends).
        self._writing_since: float | None = None
        #: Closing bytes the writer sends once a stalled client reads again.
        self._after_stall: bytes | None = None
        #: End the response without its final message: hypercorn then closes the
        #: connection, and the client sees the body broken, as the upstream's was.
        self._abort = False
        self._observer: StreamObserver = PassThroughObserver()
        self._targets = targets
        self._plan = plan
        self._timeouts = timeouts
        self._request = request
        self._send = send
        self._receive = receive
        self._observer_factory = observer_factory
        self._started = 0.0
        self._total_deadline = math.inf
        self._clock = UpstreamClock()
        #: Cancelled by the observer task when it ends the stream itself, so the
        #: upstream connection closes while the closing bytes go out.
        self._reader_scope = trio.CancelScope()
        #: Set by :meth:`stop` (shutdown): the reader ends the stream as a fault.
        self._stopping = False
        self._sent_head = False
        #: The upstream that answered (the last attempt's).
        self._target: UpstreamTarget | None = None
        #: Set once every body byte has been handed to the server: a disconnect
        #: after that is the client closing a finished exchange, not an abort.
        self._delivered = False
        self.outcome = outcome or Outcome(request.method, request.path)

    def _elapsed(self) -> float:
        return trio.current_time() - self._started

    async def run(self) -> Outcome:
        """Relay until the response is complete or the client is gone."""
        self._started = trio.current_time()
        self._total_deadline = self._started + self._timeouts.total
        up_send, up_recv = trio.open_memory_channel[_ToObserver](READER_CHANNEL_SIZE)
        out_send, out_recv = trio.open_memory_channel[_ToWriter](WRITER_CHANNEL_SIZE)
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
                if not self._delivered and self.outcome.kind is not OutcomeKind.CLIENT_STALLED:
                    self.outcome.kind = OutcomeKind.CLIENT_DISCONNECTED
                request_scope.cancel()
                return

    # -- reader ------------------------------------------------------------------------

    def snapshot(self) -> dict[str, object]:
        """The live view's picture of this request now (no content, only shape)."""
        outcome = self.outcome
        stage = "waiting for the upstream" if not self._sent_head else "streaming"
        if self._after_stall is not None:
            stage = "client stalled"
        return {
            "request_id": outcome.request_id,
            "method": outcome.method,
            "path": outcome.path,
            "model": outcome.model,
            "route": outcome.route,
            "upstream": outcome.upstream,
            "attempts": len(outcome.attempts),
            "stage": stage,
            "age_s": round(self._elapsed(), 3),
            "total_left": round(self._total_deadline - trio.current_time(), 3),
            "events": outcome.events,
            "bytes_out": outcome.bytes_out,
            **self._observer.snapshot(self._clock.now()),
        }

    def stop(self) -> None:
        """End the request now (proxai is shutting down): before the first byte as a
        503, after it with the protocol's error, like any upstream fault."""
        self._stopping = True
        self._reader_scope.cancel()

    async def _read_upstream(self, channel: trio.MemorySendChannel[_ToObserver]) -> None:
        send = self._clock.send_paused
        async with channel, AsyncExitStack() as stack:
            with self._reader_scope:
                opened = await self._open_upstream(stack)
                if isinstance(opened, ProxyError):
                    await send(channel, opened)
                    return
                await self._read_body(opened, channel)
            if self._stopping and self._reader_scope.cancelled_caught:
                # Cancelled by stop(): report it as the stream's end, which the
                # observer answers with its protocol's error.
                await send(
                    channel,
                    _End(self._clock.now(), OutcomeKind.SHUTDOWN, detail=SHUTDOWN_MESSAGE)
                    if self._sent_head
                    else shutdown_error(),
                )

    async def _open_upstream(self, stack: AsyncExitStack) -> UpstreamResponse | ProxyError:
        """Try the route's upstreams until one answers for good (see :mod:`proxai.retry`).

        The response of the last attempt is the answer, whatever its status; a
        failure before any response is a :class:`ProxyError`.
        """
        request = self._request
        name, delay = self._plan.first(), 0.0
        self.outcome.attempts = self._plan.attempts
        while True:
            if delay:
                await trio.sleep(delay)
            target = self._targets[name]
            attempt = AttemptRecord(name, self._elapsed())
            self._plan.attempts.append(attempt)
            self.outcome.upstream = name
            first_byte = math.inf
            if request.first_byte_applies:
                first_byte = trio.current_time() + target.timeouts.first_byte
            attempt_stack = await stack.enter_async_context(AsyncExitStack())
            result: UpstreamResponse | ProxyError
            try:
                with trio.fail_at(min(first_byte, self._total_deadline)):
                    result = await attempt_stack.enter_async_context(
                        target.client.open(
                            request.method,
                            request.raw_path,
                            request.query,
                            request.headers,
                            target.body,
                        )
                    )
            except trio.TooSlowError:
                result = self._head_timeout(first_byte, target.timeouts)
            except ProxyError as exc:
                result = exc
            if isinstance(result, ProxyError):
                attempt.kind, attempt.detail = result.kind, result.message
            else:
                attempt.status = result.status
                attempt.retry_after = _retry_after(result.headers)
            if self._on_attempt is not None:
                self._on_attempt(attempt, len(self._plan.attempts) - 1)
            following = self._plan.next_attempt(attempt)
            if following is None or trio.current_time() + following[1] >= self._total_deadline:
                self._target = target
                return result
            await attempt_stack.aclose()  # a retried response is closed, never relayed
            name, delay = following

    async def _read_body(
        self, response: UpstreamResponse, channel: trio.MemorySendChannel[_ToObserver]
    ) -> None:
        send = self._clock.send_paused
        self.outcome.first_byte_s = self._elapsed()
        tap = self._tap
        if tap is not None:
            tap.upstream_head(response.status, response.headers)
        sse = _is_event_stream(response.status, response.headers)
        await send(channel, _Head(response.status, response.headers, sse, self._clock.now()))
        self._sent_head = True
        framer = SSEFramer() if sse else None
        try:
            async for data in response.iter_body():
                at = self._clock.now()
                self.outcome.bytes_in += len(data)
                if tap is not None:
                    tap.upstream.add(data)
                if framer is None:
                    await send(channel, _Body(data, (), at))
                    continue
                frames = framer.feed(data)
                joined = b"".join([f.raw for f in frames]) if frames else b""
                # A read that completes no frame still tells the observer the
                # upstream is alive.
                await send(channel, _Body(joined, frames, at))
                if framer.pending > self._max_event_bytes:
                    # An event that never ends must not grow without bound.
                    limit = self._max_event_bytes
                    detail = f"upstream sent an event over {limit} bytes (max_event_bytes)"
                    fault = OutcomeKind.UPSTREAM_EVENT_TOO_LARGE
                    await send(channel, _End(self._clock.now(), fault, detail=detail))
                    return
        except UpstreamBroken as exc:
            tail = framer.close() if framer else b""
            fault = OutcomeKind.UPSTREAM_RESET
            await send(channel, _End(self._clock.now(), fault, tail, str(exc)))
            return
        await send(channel, _End(self._clock.now(), tail=framer.close() if framer else b""))

    def _head_timeout(self, first_byte_deadline: float, timeouts: TimeoutsConfig) -> ProxyError:
        if first_byte_deadline <= self._total_deadline:
            kind = OutcomeKind.STALLED_FIRST_BYTE
            limit = f"{timeouts.first_byte} s (proxai first_byte timeout)"
        else:
            kind = OutcomeKind.TOTAL_TIMEOUT
            limit = f"{self._timeouts.total} s (proxai total timeout)"
        return ProxyError(
            504,
            f"the upstream sent no response headers within {limit}",
            "server_error",
            code="upstream_timeout",
            kind=kind,
        )

    # -- observer ----------------------------------------------------------------------

    async def _observe(
        self,
        upstream: trio.MemoryReceiveChannel[_ToObserver],
        client: trio.MemorySendChannel[_ToWriter],
    ) -> None:
        async with upstream, client:
            head = await upstream.receive()
            if isinstance(head, ProxyError):
                self.outcome.kind = self.outcome.kind or head.kind or OutcomeKind.PROXY_ERROR
                self.outcome.detail = head.message
                await client.send(head)
                return
            assert isinstance(head, _Head)
            self.outcome.status = head.status
            self.outcome.streaming = head.sse
            assert self._target is not None
            timeouts = self._target.timeouts
            self._observer = self._observer_factory(timeouts) if head.sse else PassThroughObserver()
            self._observer.on_start(head.at)
            await client.send(head)
            try:
                verdict, forwarded = await self._relay_body(upstream, client)
            except _WriterBlocked as blocked:
                # The client has accepted nothing for too long: let go of the upstream
                # now; the writer delivers the closing bytes if the client ever reads.
                self._reader_scope.cancel()
                blocked.pending += self._drain_queued(upstream)
                if blocked.kind is OutcomeKind.CLIENT_STALLED:
                    verdict = self._observer.on_client_stalled(self._timeouts.client_write)
                else:
                    verdict = self._observer.on_total_timeout(self._clock.now())
                forwarded = True
                self._after_stall = blocked.pending + verdict.closing
            if not 200 <= head.status < 300 and verdict.kind is OutcomeKind.COMPLETED:
                verdict = Verdict(OutcomeKind.UPSTREAM_ERROR, f"upstream answered {head.status}")
            self._observer.fill(self.outcome)
            self.outcome.kind = verdict.kind
            self.outcome.detail = verdict.detail
            if not forwarded and (verdict.closing or verdict.kind in _FAULTS):
                error = _error_before_first_byte(verdict)
                self.outcome.status = error.status
                await client.send(error)
                return
            if verdict.closing and self._after_stall is None:
                try:
                    await self._to_writer(client, verdict.closing)
                except _WriterBlocked as blocked:
                    self._after_stall = blocked.pending
            elif (
                not verdict.closing
                and verdict.kind in _FAULTS
                and not self._observer.finished
                and self._can_abort
            ):
                # Nothing in the protocol's shape to say it (no observer knows this
                # body): end the response as broken, as the upstream's was, so the
                # client cannot take a cut-short body for a whole one.
                self._abort = True

    async def _relay_body(
        self,
        upstream: trio.MemoryReceiveChannel[_ToObserver],
        client: trio.MemorySendChannel[_ToWriter],
    ) -> tuple[Verdict, bool]:
        """Forward body bytes until the upstream ends or a deadline passes.

        Returns the verdict and whether any byte went to the client.
        """
        forwarded = False
        while True:
            message = await self._next_message(upstream, self._observer)
            if message is None:  # a deadline passed first
                self._reader_scope.cancel()
                if trio.current_time() >= self._total_deadline:
                    return self._observer.on_total_timeout(self._clock.now()), forwarded
                return self._observer.on_deadline(self._clock.now()), forwarded
            if isinstance(message, _Body):
                self._observe_frames(message)
                if message.data:
                    forwarded = True
                    await self._to_writer(client, message.data)
                continue
            assert isinstance(message, _End)
            verdict = self._observer.on_end(
                fault=message.fault, detail=message.detail, now=message.at
            )
            # An unfinished last event is forwarded when proxai adds nothing after
            # it (the client's parser drops it, as it would have without proxai);
            # it is dropped when proxai appends an event, which must start at a
            # boundary.
            if message.tail and (not verdict.closing or not message.tail.strip(b"\r\n")):
                forwarded = True
                await self._to_writer(client, message.tail)
            return verdict, forwarded

    def _drain_queued(self, upstream: trio.MemoryReceiveChannel[_ToObserver]) -> bytes:
        """The bytes of reads already queued by the reader, observed, for the writer."""
        data: list[bytes] = []
        while True:
            try:
                message = upstream.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel):
                return b"".join(data)
            if isinstance(message, _Body):
                self._observe_frames(message)
                data.append(message.data)

    def _observe_frames(self, message: _Body) -> None:
        """Count and feed a read's frames; if the observer fails on odd input, relay on
        without it."""
        if message.frames:
            self._count(message.frames)
        try:
            self._observer.on_frames(message.frames, message.at)
        except Exception as exc:
            self.outcome.anomalies.append(
                f"observer failed ({type(exc).__name__}: {exc}); relaying without it"
            )
            self._observer = PassThroughObserver()

    async def _to_writer(self, client: trio.MemorySendChannel[_ToWriter], data: bytes) -> None:
        """Hand bytes to the writer; raise :class:`_WriterBlocked` if the client has
        accepted nothing for ``client_write`` seconds, or ``total`` passes, meanwhile.

        Hypercorn shields its socket writes, so a writer blocked on a client that
        does not read cannot be cancelled; the upstream must not wait with it.
        """
        try:
            client.send_nowait(data)
        except trio.WouldBlock:
            pass
        else:
            return
        while True:
            since = self._writing_since
            if since is None:  # between two sends: it gets a full period from now
                since = trio.current_time()
            with trio.move_on_at(min(since + self._timeouts.client_write, self._total_deadline)):
                await client.send(data)
                return
            if trio.current_time() >= self._total_deadline:
                raise _WriterBlocked(OutcomeKind.TOTAL_TIMEOUT, data)
            if self._writing_since == since:
                raise _WriterBlocked(OutcomeKind.CLIENT_STALLED, data)

    async def _next_message(
        self,
        upstream: trio.MemoryReceiveChannel[_ToObserver],
        observer: StreamObserver,
    ) -> _ToObserver | None:
        """The reader's next message, or ``None`` if a deadline passes first.

        A message already queued is taken without looking at the clock: it
        arrived while proxai was busy downstream, so the upstream was not
        silent. Otherwise the reader is waiting on the upstream, the upstream
        clock runs with trio's, and the observer's deadline converts directly.
        """
        try:
            return upstream.receive_nowait()
        except trio.WouldBlock:
            pass
        deadline = self._total_deadline
        observer_deadline = observer.deadline()
        if observer_deadline != math.inf:
            deadline = min(deadline, trio.current_time() + (observer_deadline - self._clock.now()))
        with trio.move_on_at(deadline):
            return await upstream.receive()
        return None

    def _count(self, frames: Sequence[SSEFrame]) -> None:
        events = sum(1 for f in frames if f.data is not None)
        if events and self.outcome.first_event_s is None:
            self.outcome.first_event_s = self._elapsed()
        self.outcome.events += events

    # -- writer ------------------------------------------------------------------------

    async def _write_client(
        self,
        channel: trio.MemoryReceiveChannel[_ToWriter],
        request_scope: trio.CancelScope,
    ) -> None:
        async with channel:
            message: _ToWriter | None = await channel.receive()
            if isinstance(message, _Head):
                head = message
                # The head is held until the first body bytes: until then the stream
                # can still turn into an HTTP error.
                try:
                    message = await channel.receive()
                except trio.EndOfChannel:
                    message = None
                if not isinstance(message, ProxyError):
                    await self._send_head(head)
                    if message is not None:
                        await self._send_body_until_closed(message, channel)
                    if self._after_stall:
                        await self._send_body(self._after_stall)
                    self._delivered = True
                    if not self._abort:
                        with self._closing_send():
                            await self._asgi_send(
                                {"type": "http.response.body", "body": b"", "more_body": False}
                            )
            if isinstance(message, ProxyError):
                self.outcome.status = message.status
                self._delivered = True
                with self._closing_send():
                    body = await send_error(
                        self._asgi_send, message, self._error_shape, self._response_headers
                    )
                if self._tap is not None:
                    self._tap.client.add(body)
        request_scope.cancel()

    async def _send_body_until_closed(
        self, first: _ToWriter, channel: trio.MemoryReceiveChannel[_ToWriter]
    ) -> None:
        """Send body bytes until the observer closes the channel.

        Bytes already queued behind the ones in hand go out with them in one send (up
        to :data:`JOIN_MAX_BYTES`): under load that saves a send per read, and nothing
        waits to be joined. The cap keeps one send no larger than one upstream read
        can be, so ``client_write``, which bounds one send, means what it did."""
        message: _ToWriter | None = first
        while message is not None:
            assert isinstance(message, bytes)
            batch = [message]
            size = len(message)
            message = None
            ended = False
            while size < JOIN_MAX_BYTES:
                try:
                    queued = channel.receive_nowait()
                except trio.WouldBlock:
                    break
                except trio.EndOfChannel:
                    ended = True
                    break
                assert isinstance(queued, bytes)
                if size + len(queued) > JOIN_MAX_BYTES:
                    message = queued  # the next send's
                    break
                batch.append(queued)
                size += len(queued)
            await self._send_body(b"".join(batch))  # one part: joined as itself, no copy
            if ended:
                return
            if message is None:
                try:
                    message = await channel.receive()
                except trio.EndOfChannel:
                    return

    def _closing_send(self) -> trio.CancelScope:
        """A scope for the response's last send. Hypercorn may close the connection
        inside it (shutting down, or ``Connection: close``), which tells the watcher
        the client is gone; the watcher's cancel must not cut that close short and
        leave the socket open. Bounded like any write to the client."""
        return trio.CancelScope(
            shield=True, deadline=trio.current_time() + self._timeouts.client_write
        )

    async def _asgi_send(self, message: dict[str, Any]) -> None:
        """ASGI ``send()``, noting when it started (see :meth:`_to_writer`)."""
        self._writing_since = trio.current_time()
        try:
            await self._send(message)
        finally:
            self._writing_since = None

    async def _send_head(self, head: _Head) -> None:
        headers = response_headers_for_client(head.headers, keep_content_length=not head.sse)
        if self._response_headers:  # proxai's own replace the upstream's (a chained proxai)
            own = {name for name, _ in self._response_headers}
            headers = [(n, v) for n, v in headers if n not in own] + self._response_headers
        await self._asgi_send(
            {"type": "http.response.start", "status": head.status, "headers": headers}
        )

    async def _send_body(self, data: bytes) -> None:
        self.outcome.bytes_out += len(data)
        if self._tap is not None:
            self._tap.client.add(data)
        await self._asgi_send({"type": "http.response.body", "body": data, "more_body": True})
