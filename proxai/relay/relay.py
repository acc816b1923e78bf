"""The relay: one trio nursery per proxied request.

Four tasks share the request's nursery, linked by bounded memory channels so
that a slow client slows the upstream read instead of filling proxai's memory::

    upstream ──httpx──▶ reader ──(frames)──▶ observer ──(frames)──▶ writer ──▶ client
                                                                   watcher ◀── disconnect

- the **reader** is the only task that touches the upstream response: it opens
  it (:mod:`proxai.relay.attempts`) and reads it (:mod:`proxai.relay.reader`):
  whole SSE frames, each read stamped on the upstream clock, then how it ended;
- the **observer** feeds each batch of frames to the protocol's sans-io
  observer, forwards what its :class:`~proxai.relay.forwarding.Forwarding` gives
  (the bytes unchanged, or their translation), and waits for the next batch no
  longer than the observer's deadline (and the request's ``total``); when one
  passes it cancels the reader (closing the upstream connection). How the
  response then ends is decided by :func:`proxai.relay.ending.decide`, and the
  writer is told so in one :class:`~proxai.relay.writer.Closing` record;
- the **writer** (:class:`proxai.relay.writer.Writer`) is the only task that
  sends to the client;
- the **watcher** waits for the client to go away, and then cancels the whole
  nursery: the upstream connection is closed at once and nothing of the
  request outlives it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence

import attrs
import trio

from ..errors import SHUTDOWN_MESSAGE, ProxyError, shutdown_error
from ..outcome import MAX_USAGE_DEPTH, Outcome, OutcomeKind, cap_depth
from ..protocols.observer import (
    UNSEEN,
    ObserverSnapshot,
    PassThroughObserver,
    Read,
    StreamObserver,
    Verdict,
)
from ..protocols.table import UsageReader
from ..protocols.tracking import AFTER_TERMINAL_GRACE
from . import ending
from .attempts import Answer, AttemptHook, AttemptTrace, open_upstream
from .clock import UpstreamClock
from .exchange import Exchange, Tap, UpstreamTarget
from .forwarding import Forwarding, PassThrough, Translated
from .messages import Body, Chunk, End, Head, Out, ToObserver, ToWriter, merged, split
from .reader import read_body
from .writer import JOIN_MAX_BYTES, Closing, Downstream, Writer

__all__ = ["READER_CHANNEL_SIZE", "WRITER_CHANNEL_SIZE", "Relay", "StreamSnapshot"]

log = logging.getLogger("proxai")

# Channel capacities, in messages (one upstream read or one batch of frames each).
# Small on purpose: backpressure from a slow client must reach the upstream socket.
READER_CHANNEL_SIZE = 4
WRITER_CHANNEL_SIZE = 4


@attrs.frozen
class StreamSnapshot:
    """The live view's picture of one request now: its shape, never its content."""

    request_id: str | None
    method: str
    path: str
    model: str | None
    route: str | None
    upstream: str | None
    attempts: int
    stage: str  # "waiting for the upstream", "streaming", "client stalled"
    age_s: float
    total_left: float
    events: int
    bytes_out: int
    observer: ObserverSnapshot
    #: The client socket it is a response of (the Responses WebSocket mode).
    socket_id: str | None = None


class _WriterBlocked(Exception):
    """The writer has been blocked on the client too long: ``client_stalled``
    (``timeouts.client_write``) or ``total_timeout``. ``pending`` holds what could
    not be handed over (it is delivered if the client reads again)."""

    def __init__(self, kind: OutcomeKind, pending: Chunk) -> None:
        super().__init__(kind.value)
        self.kind = kind
        self.pending = pending


class Relay:
    """Proxies one request to the upstream and its response to ``downstream``."""

    #: One per stream: no instance dict.
    __slots__ = (
        "_can_abort",
        "_client_stalled",
        "_clock",
        "_downstream",
        "_exchange",
        "_filled",
        "_forwarded",
        "_forwarding",
        "_max_event_bytes",
        "_max_translated_body_bytes",
        "_observer",
        "_on_attempt",
        "_reader_scope",
        "_sent_head",
        "_started",
        "_stopping",
        "_tap",
        "_target",
        "_timeouts",
        "_total_deadline",
        "_trace",
        "_unsent",
        "_usage_reader",
        "_waiting_until",
        "_writer",
        "outcome",
    )

    def __init__(
        self,
        exchange: Exchange,
        downstream: Downstream,
        outcome: Outcome | None = None,
        *,
        tap: Tap | None = None,
        on_attempt: AttemptHook | None = None,
        trace: AttemptTrace | None = None,
    ) -> None:
        #: Until its upstream answers: a held stream keeps neither the request's bodies (one
        #: per upstream of its route) nor their targets, only the few limits it reads later.
        self._exchange: Exchange | None = exchange
        self._can_abort = exchange.can_abort
        self._max_event_bytes = exchange.max_event_bytes
        self._max_translated_body_bytes = exchange.max_translated_body_bytes
        self._trace = trace
        self._downstream = downstream
        self._tap = tap
        self._on_attempt = on_attempt
        request = exchange.request
        self.outcome = outcome or Outcome(request.method, request.path)
        self._timeouts = exchange.timeouts
        self._writer = Writer(
            downstream,
            self.outcome,
            client_write=exchange.timeouts.client_write,
            error_shape=exchange.error_shape,
            response_headers=exchange.response_headers,
            tap=tap,
        )
        self._observer: StreamObserver = PassThroughObserver()
        self._started = 0.0
        self._total_deadline = math.inf
        self._clock = UpstreamClock()
        #: Cancelled by the observer task when it ends the stream itself, so the
        #: upstream connection closes while the closing bytes go out; and by stop().
        self._reader_scope = trio.CancelScope()
        #: Set by :meth:`stop` (shutdown): the reader ends the stream as a fault.
        self._stopping = False
        #: The reader has handed the upstream's head on: the response has begun.
        self._sent_head = False
        #: The upstream that answered (the last attempt's), until the observer task has
        #: the head; then only its usage reader is kept.
        self._target: UpstreamTarget | None = None
        self._usage_reader: UsageReader | None = None
        #: What the client gets of the upstream's body (its bytes, or their translation).
        self._forwarding: Forwarding = PassThrough()
        #: The client accepted nothing for too long: the writer holds the rest until it reads.
        self._client_stalled = False
        #: The observer has filled the outcome record (it does once).
        self._filled = False
        #: Some byte of the body went to the client.
        self._forwarded = False
        #: The deadline of the wait for the upstream under way (None: not waiting).
        self._waiting_until: float | None = None
        #: A chunk whose hand-over to the writer was interrupted (see _relay_body).
        self._unsent: Chunk | None = None

    def _elapsed(self) -> float:
        return trio.current_time() - self._started

    async def run(self) -> Outcome:
        """Relay until the response is complete or the client is gone."""
        self._started = trio.current_time()
        self._clock = UpstreamClock(trio.lowlevel.current_clock().current_time)
        self._total_deadline = self._started + self._timeouts.total
        up_send, up_recv = trio.open_memory_channel[ToObserver](READER_CHANNEL_SIZE)
        out_send, out_recv = trio.open_memory_channel[ToWriter](WRITER_CHANNEL_SIZE)
        async with trio.open_nursery() as nursery:
            # The nursery's scope is cancelled by the watcher (client gone) and by
            # the writer (response done, so the watcher can stop).
            nursery.start_soon(self._watch_disconnect, nursery.cancel_scope)
            nursery.start_soon(self._read_upstream, up_send)
            nursery.start_soon(self._observe, up_recv, out_send)
            nursery.start_soon(self._writer.run, out_recv, nursery.cancel_scope)
        # A client that hung up cancelled the observer task before it filled the record:
        # what the stream said until then (its response id, usage, calls) still counts.
        self._fill()
        self.outcome.total_s = self._elapsed()
        return self.outcome

    def _fill(self) -> None:
        """Have the observer fill the outcome record, once; a whole answer's usage is
        the forwarding's (no observer reads a body that is not a stream)."""
        if not self._filled:
            self._filled = True
            self._observer.fill(self.outcome)
            if self.outcome.usage is None:
                usage = self._forwarding.whole_usage
                if usage is not None:
                    self.outcome.usage = cap_depth(usage, MAX_USAGE_DEPTH)[0]
                    read = self._usage_reader
                    self.outcome.tokens = read(usage) if read is not None else None

    def snapshot(self) -> StreamSnapshot:
        """The live view's picture of this request now."""
        outcome = self.outcome
        stage = "waiting for the upstream" if not self._sent_head else "streaming"
        if self._client_stalled:
            stage = "client stalled"
        return StreamSnapshot(
            request_id=outcome.request_id,
            method=outcome.method,
            path=outcome.path,
            model=outcome.model,
            route=outcome.route,
            upstream=outcome.upstream,
            attempts=len(outcome.attempts),
            stage=stage,
            age_s=round(self._elapsed(), 3),
            total_left=round(self._total_deadline - trio.current_time(), 3),
            events=outcome.events,
            bytes_out=outcome.bytes_out,
            observer=self._observer.snapshot(self._clock.now()),
            socket_id=outcome.socket_id,
        )

    def stop(self) -> None:
        """End the request now (proxai is shutting down): before the first byte as a
        503, after it with the protocol's error, like any upstream fault."""
        self._stopping = True
        self._reader_scope.cancel()

    # -- watcher -----------------------------------------------------------------------

    async def _watch_disconnect(self, request_scope: trio.CancelScope) -> None:
        await self._downstream.wait_disconnect()
        if self._forwarding.client_finished:
            # The client read its translated terminal event and hung up (Codex does at
            # once), before the upstream's own end (Chat's [DONE] follows the usage chunk
            # proxai finishes at): give the relay a moment to see that end, so the
            # exchange is recorded as what it was, not as a client that went away.
            await trio.sleep(AFTER_TERMINAL_GRACE)
        since = self._writer.writing_since
        gone = ending.client_gone(
            judged=self.outcome.kind,
            blocked_s=None if since is None else trio.current_time() - since,
            client_write=self._timeouts.client_write,
        )
        if not self._writer.delivered and gone is not None:
            self.outcome.kind, detail = gone
            self.outcome.detail = detail or self.outcome.detail
        request_scope.cancel()

    # -- reader ------------------------------------------------------------------------

    async def _read_upstream(self, channel: trio.MemorySendChannel[ToObserver]) -> None:
        send = self._clock.send_paused
        answer: Answer | None = None
        async with channel:
            try:
                with self._reader_scope:
                    exchange, self._exchange = self._exchange, None
                    assert exchange is not None, "a relay runs once"
                    self._target, opened, answer = await open_upstream(
                        exchange,
                        self.outcome,
                        started=self._started,
                        total_deadline=self._total_deadline,
                        on_attempt=self._on_attempt,
                        trace=self._trace,
                    )
                    del exchange  # no retry after an answer: its bodies go
                    if isinstance(opened, ProxyError):
                        await send(channel, opened)
                    else:
                        self.outcome.first_byte_s = self._elapsed()
                        self._sent_head = True
                        await read_body(
                            opened,
                            channel,
                            clock=self._clock,
                            outcome=self.outcome,
                            tap=self._tap,
                            max_event_bytes=self._max_event_bytes,
                        )
                if self._stopping and self._reader_scope.cancelled_caught:
                    # Cancelled by stop(): report it as the stream's end, which the
                    # observer answers with its protocol's error.
                    await send(
                        channel,
                        End(self._clock.now(), OutcomeKind.SHUTDOWN, detail=SHUTDOWN_MESSAGE)
                        if self._sent_head
                        else shutdown_error(),
                    )
            except BaseException as exc:
                if answer is not None:  # the response is closed before the channel
                    await answer.__aexit__(type(exc), exc, exc.__traceback__)
                raise
            if answer is not None:
                await answer.__aexit__(None, None, None)

    # -- observer ----------------------------------------------------------------------

    async def _observe(
        self,
        upstream: trio.MemoryReceiveChannel[ToObserver],
        client: trio.MemorySendChannel[ToWriter],
    ) -> None:
        async with upstream, client:
            try:
                head = await upstream.receive()
                self._clock.queued -= 1
            except trio.EndOfChannel:
                # The reader ended without a word: it raised, and its own error (in the
                # nursery's group) says why. Nothing to add to it.
                return
            if isinstance(head, ProxyError):
                self.outcome.kind = self.outcome.kind or head.kind or OutcomeKind.PROXY_ERROR
                self.outcome.detail = head.message
                await client.send(head)
                return
            assert isinstance(head, Head)
            self.outcome.status = head.status
            self.outcome.streaming = head.sse
            target, self._target = self._target, None
            assert target is not None
            self._usage_reader = target.usage
            if head.sse:
                self._observer = target.observer_factory(target.timeouts)
            usage_key = target.usage.key if target.usage is not None else None
            if target.translator is not None:
                self._forwarding = Translated(
                    target.translator(),
                    self.outcome,
                    self._observer,
                    max_body_bytes=self._max_translated_body_bytes,
                    let_go=self._reader_scope.cancel,
                    usage_key=usage_key,
                )
            elif not head.sse:
                self._forwarding = PassThrough(usage_key)
            head = self._forwarding.start(head)
            self._observer.on_start(head.at)
            status = head.status
            await client.send(head)
            del head, target  # the writer has the head: neither is held through the stream
            held: Chunk | None = None  # what the writer holds for a client that stopped reading
            try:
                verdict, forwarded = await self._relay_body(upstream, client)
            except _WriterBlocked as blocked:
                # The client has accepted nothing for too long: let go of the upstream
                # now; the writer delivers the closing bytes if the client ever reads.
                self._reader_scope.cancel()
                self._client_stalled = True
                blocked.pending = merged([blocked.pending, *self._drain_queued(upstream)])
                if blocked.kind is OutcomeKind.CLIENT_STALLED:
                    verdict = self._observer.on_client_stalled(self._timeouts.client_write)
                else:
                    verdict = self._observer.on_total_timeout(self._clock.now())
                forwarded = True
                held = blocked.pending
            forwarding = self._forwarding
            verdict, whole = forwarding.ending(verdict)
            end = ending.decide(
                verdict,
                status=status,
                forwarded=forwarded,
                finished=self._observer.finished,
                can_abort=self._can_abort,
                whole=whole,
                failed_in_band=forwarding.failed_in_band,
            )
            # The closing as decided, in the client's API (a translator's, not the upstream's).
            after_stall = None if held is None else merged([held, end.closing])
            self._fill()
            self.outcome.kind = end.kind
            self.outcome.detail = end.detail
            if end.error is not None:
                self.outcome.status = end.error.status
                await client.send(end.error)
            elif end.closing.data and after_stall is None:
                # In sends of at most JOIN_MAX_BYTES (a whole translated body can be tens
                # of MB): client_write bounds each, and the server copies none whole.
                parts = split(end.closing, JOIN_MAX_BYTES)
                for at, part in enumerate(parts):
                    try:
                        await self._to_writer(client, part)
                    except _WriterBlocked as blocked:
                        self._client_stalled = True
                        after_stall = merged([blocked.pending, *parts[at + 1 :]])
                        break
            self._writer.close_with(Closing(after_stall=after_stall, abort=end.abort))

    async def _relay_body(
        self,
        upstream: trio.MemoryReceiveChannel[ToObserver],
        client: trio.MemorySendChannel[ToWriter],
    ) -> tuple[Verdict, bool]:
        """Forward body bytes until the upstream ends or a deadline passes.

        Returns the verdict and whether any byte went to the client.

        The waits for the upstream share one cancel scope, not one each (a scope per
        event cost more than the rest of the relay's own work per event): its deadline
        is lowered to a wait's own when that is earlier and otherwise left, so it may
        pass early, while a later wait or a hand-over to the writer runs. Then the wait
        it interrupted resumes under a new scope with its own deadline, and a chunk it
        interrupted on its way to the writer is handed over again: only a wait whose
        own deadline has passed ends the stream.

        The wait for the next read is taken here, not in a helper, and nothing of the
        last read is held through it: a held stream keeps this frame, and what is in
        it, for its life.
        """
        forwarding = self._forwarding
        clock = self._clock
        resume: float | None = None  # the deadline of a wait a scope's early end cut
        message: ToObserver | None
        while True:
            ended: Verdict | End | None = None
            with trio.CancelScope() as waits:
                unsent = self._unsent
                if unsent is not None:
                    await self._to_writer(client, unsent)
                    self._unsent = unsent = None
                while True:
                    ended = forwarding.stopped()
                    if ended is not None:
                        break
                    # A read already queued is taken with no deadline: it arrived while
                    # proxai was busy downstream, so the upstream was not silent. It is
                    # looked for only when the reader has queued one (a failed take costs
                    # more than the rest of this loop's own work); when the count is
                    # behind, the wait takes it all the same, before a deadline already
                    # passed can cancel it (trio cancels at its next scheduling round).
                    # Otherwise the wait's deadline is the observer's, converted.
                    until = resume
                    resume = message = None
                    if until is None and clock.queued > 0:
                        try:
                            message = upstream.receive_nowait()
                        except trio.WouldBlock:
                            message = None  # the count was early: its read is on its way
                    if message is None:  # outside the handler, which would hold the error
                        if until is None:
                            until = self._wait_deadline()
                        if until < waits.deadline:
                            waits.deadline = until
                        self._waiting_until = until
                        message = await upstream.receive()
                        self._waiting_until = None
                    clock.queued -= 1
                    if isinstance(message, Body):
                        reads = self._observe_frames(message)
                        ended = self._observer.over_limit
                        if ended is not None:  # past a limit of one stream: it ends now, as a stall
                            break
                        chunk = forwarding.client_bytes(message, reads)
                        del message, reads
                        if chunk.data:
                            self._forwarded = True
                            try:  # _to_writer's first step, inline: this runs once per event
                                client.send_nowait(chunk)
                                self._writer.queued += 1
                            except trio.WouldBlock:
                                self._unsent = chunk
                                await self._to_writer(client, chunk)
                                self._unsent = None
                        del chunk
                        continue
                    assert isinstance(message, End)
                    ended = message
                    break
            if isinstance(ended, End):
                verdict = self._observer.on_end(
                    fault=ended.fault, detail=ended.detail, now=ended.at
                )
                tail = forwarding.tail(ended.tail, verdict)
                if tail:
                    self._forwarded = True
                    await self._to_writer(client, Out(tail))
                return verdict, self._forwarded
            if ended is not None:  # stopped by the forwarding, or past a limit of one stream
                self._reader_scope.cancel()
                if self._observer.over_limit is ended:
                    async for _ in upstream:  # the reader may be mid-read: let it end
                        pass
                return ended, self._forwarded
            # The scope's deadline passed.
            until = self._waiting_until
            self._waiting_until = None
            if until is None:
                continue  # during a hand-over to the writer, which has no deadline
            if trio.current_time() < until:
                resume = until  # not this wait's deadline: go on waiting, until its own
                continue
            self._reader_scope.cancel()
            if trio.current_time() >= self._total_deadline:
                return self._observer.on_total_timeout(self._clock.now()), self._forwarded
            return self._observer.on_deadline(self._clock.now()), self._forwarded

    def _wait_deadline(self) -> float:
        """When a wait for the upstream's next read starting now ends: the observer's
        deadline (on the upstream clock, which runs with trio's while the reader waits),
        ``total``, and a short grace once the client's stream has ended."""
        deadline = self._total_deadline
        observer_deadline = self._observer.deadline()
        if observer_deadline != math.inf:
            observer_deadline = self._clock.trio_time(observer_deadline)
            if observer_deadline < deadline:
                deadline = observer_deadline
        if self._forwarding.client_ended:
            # The client's stream has ended (a Chat upstream's at its usage chunk): the
            # upstream has nothing left to say but its own end, as after a terminal event.
            deadline = min(deadline, trio.current_time() + AFTER_TERMINAL_GRACE)
        return deadline

    def _drain_queued(self, upstream: trio.MemoryReceiveChannel[ToObserver]) -> list[Chunk]:
        """What the client gets of reads already queued by the reader, observed."""
        chunks: list[Chunk] = []
        while True:
            try:
                message = upstream.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel):
                return chunks
            self._clock.queued -= 1
            if isinstance(message, Body):
                reads = self._observe_frames(message)
                chunks.append(self._forwarding.client_bytes(message, reads))

    def _observe_frames(self, message: Body) -> Sequence[Read]:
        """Count and feed a read's frames; if the observer fails on odd input, relay on
        without it. For a translator, the frames as the observer's reader read them."""
        frames = message.frames
        if frames:  # the events counted (a loop, not sum() of a generator: once per read)
            events = 0
            for frame in frames:
                if frame.data is not None:
                    events += 1
            if events:
                outcome = self.outcome
                if outcome.first_event_s is None:
                    outcome.first_event_s = self._elapsed()
                outcome.events += events
        reads: list[Read] | None = [] if self._forwarding.wants_reads and frames else None
        try:
            self._observer.read_frames(frames, message.at, reads)
        except Exception as exc:
            self.outcome.anomalies.append(
                f"observer failed ({type(exc).__name__}: {exc}); relaying without it"
            )
            self._observer = PassThroughObserver()
            if reads is not None:  # the rest: the translator's decoder has its reader read them
                reads += [(frame, UNSEEN) for frame in frames[len(reads) :]]
        return reads or ()

    async def _to_writer(self, client: trio.MemorySendChannel[ToWriter], data: Chunk) -> None:
        """Hand a chunk to the writer; raise :class:`_WriterBlocked` if the client has
        accepted nothing for ``client_write`` seconds, or ``total`` passes, meanwhile.

        The server may shield its socket writes, so a writer blocked on a client that
        does not read cannot be cancelled; the upstream must not wait with it. (The
        kernel closes such a connection: :func:`proxai.service.server.drop_stalled_clients`.)
        """
        try:
            client.send_nowait(data)
        except trio.WouldBlock:
            pass
        else:
            self._writer.queued += 1
            return
        while True:
            since = self._writer.writing_since
            if since is None:  # between two sends: it gets a full period from now
                since = trio.current_time()
            with trio.move_on_at(min(since + self._timeouts.client_write, self._total_deadline)):
                await client.send(data)
                self._writer.queued += 1
                return
            if trio.current_time() >= self._total_deadline:
                raise _WriterBlocked(OutcomeKind.TOTAL_TIMEOUT, data)
            if self._writer.writing_since == since:
                raise _WriterBlocked(OutcomeKind.CLIENT_STALLED, data)
