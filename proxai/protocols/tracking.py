"""What every protocol observer shares: open items, deadlines and verdicts.

Responses, Chat Completions and Anthropic Messages streams differ in their
events and in the terminal event proxai must write, but not in what a stall
is. A :class:`TrackingObserver` keeps

- the time of the upstream's last activity (any bytes), bounded by ``idle``;
- the open items, each with the time of its last progress; a *guarded* item
  (a tool call whose arguments are streaming) is bounded by ``tool_arguments``
  on its own, however many are open;
- whether the stream reached its terminal event, after which proxai waits only
  :data:`AFTER_TERMINAL_GRACE` for the upstream to hang up.

What is protocol-specific is its API's *reader* (:class:`StreamReader`):
it parses each event once and tells the observer what happened in the observer's
terms (an item opened, grew, stopped being guarded, closed; text to compare; usage; the
terminal), and it writes the protocol's terminal for a stream proxai ends itself. The
observer is the same for every API.

Per event the work is constant (amortized): the guarded items wait in a heap by
their last progress, so the next deadline is its top, however many are open. What
one stream holds is bounded by its :class:`StreamLimits`: at most
``max_open_items`` items open at once (past it the stream ends with the protocol's
error, as a stall does), and at most ``max_kept`` bytes of text and item records
kept for the end-of-stream checks (past it nothing more is kept, and the checks
skip what was not; a translated stream, whose translator holds as much, ends
instead).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, Protocol

import attrs

from ..config import TimeoutsConfig
from ..outcome import (
    MAX_LISTED,
    MAX_USAGE_DEPTH,
    CallSummary,
    Outcome,
    OutcomeKind,
    Usage,
    cap_depth,
    cut_name,
    listed,
)
from ..wire.sse import Frames, SSEFrame
from .aggregate import Aggregate
from .observer import (
    UNREAD,
    ItemSnapshot,
    ObserverSnapshot,
    Read,
    StreamObserver,
    Verdict,
    client_stalled_message,
)

__all__ = [
    "AFTER_TERMINAL_GRACE",
    "ITEM_BYTES",
    "ReaderFactory",
    "StreamLimits",
    "StreamReader",
    "TrackedItem",
    "TrackingObserver",
]

#: After its terminal event a stream has nothing left to say: if the upstream does
#: not hang up within this many seconds, proxai ends the response itself.
AFTER_TERMINAL_GRACE = 1.0
#: Anomalies kept per stream (the rest are counted): a stream of garbage must not
#: grow the record without bound.
MAX_ANOMALIES = 20
#: What one item's record costs against :attr:`StreamLimits.max_kept`, counted as it
#: opens: about what an observer and a translator keep of an item besides its text (by
#: tracemalloc, 0.85 and 1.4 KiB for a Responses function call translated for a Chat
#: client; 0.8 KiB for a Chat call relayed, 1.5 and 1.8 KiB translated for a Messages
#: and a Responses client).
ITEM_BYTES = 2048


@attrs.frozen
class StreamLimits:
    """What one stream may make its observer hold (``[server]``; docs/configuration.md)."""

    #: Items open at once (``server.max_open_items``): past it, the stream ends with the
    #: protocol's error (``upstream_over_limit``).
    max_open_items: int = 1024
    #: Bytes of text and item records kept for the end-of-stream checks
    #: (``server.max_event_bytes``): past it, nothing more is kept.
    max_kept: int = 16 * 1024 * 1024
    #: A translated stream, whose translator holds about what the observer keeps: past
    #: ``max_kept`` it ends with the protocol's error (``upstream_over_limit``) instead.
    end_past_kept: bool = False


class StreamReader(Protocol):
    """An API's reader of one stream: each event in, parsed once, reported to its observer."""

    def read(self, event: str | None, data: bytes) -> object:
        """One dispatched event (its ``event:`` name, if any, and its data) at the
        observer's :attr:`~TrackingObserver.now`: what it means is reported to the
        observer. Returns what it parsed of ``data`` (see :data:`~.observer.Read`).
        The bytes may come from any carrier (an SSE frame today)."""
        ...

    def closing(self, kind: OutcomeKind, message: str) -> Frames:
        """The protocol's terminal events for a stream proxai ends itself, after
        everything the upstream sent."""
        ...

    def usage_of(self, usage: Mapping[str, Any]) -> Usage:
        """Its API's usage object (as :attr:`TrackingObserver.usage` holds it) in proxai's
        one shape: the only place an API's usage fields are named."""
        ...


#: Builds a stream's reader, given the observer it reports to.
ReaderFactory = Callable[["TrackingObserver"], StreamReader]


@attrs.define(eq=False)
class TrackedItem:
    """An item the stream opened: a tool call, a message, a content block."""

    key: Hashable
    type: str  # function_call, tool_use, message, text...
    label: str  # "function_call get_weather (call_weather_01)"
    guarded: bool  # bounded by tool_arguments
    streams: str  # what its deltas carry: "arguments", "input", "text", "output"
    last_progress: float
    name: str | None = None
    call_id: str | None = None
    text: Aggregate = attrs.field(factory=Aggregate)  # what its deltas spelled
    #: Its entry in the observer's heap of guarded items (its progress when pushed), if any.
    queued_at: float | None = None
    #: What a translator's decoder keeps of the item (its state in the neutral stream):
    #: the decoder reads the reader's items instead of keeping a record of its own.
    translation: object = None

    @property
    def aggregate(self) -> str:
        """Everything the deltas spelled so far (as far as it was kept)."""
        return self.text.value()

    def summary(self) -> CallSummary:
        """The call as the record keeps it (its names cut to the record's width)."""
        name = None if self.name is None else cut_name(self.name)
        call_id = None if self.call_id is None else cut_name(self.call_id)
        return CallSummary(cut_name(self.type), name, call_id, self.text.length)


class TrackingObserver(StreamObserver):
    """Deadlines and verdicts over the items its API's reader reports.

    Its public methods under "what readers report" are the reader's vocabulary; the
    rest is the :class:`StreamObserver` interface the relay drives."""

    #: Slots: one is held per open stream, and a dict of this many attributes is
    #: past the size CPython shares keys for (30), so each instance would carry its own.
    __slots__ = (
        "_anomalies",
        "_anomalies_dropped",
        "_calls",
        "_calls_more",
        "_comparisons",
        "_events",
        "_guarded",
        "_idle",
        "_keeping",
        "_kept",
        "_kept_records",
        "_last_activity",
        "_limits",
        "_mismatches",
        "_mismatches_dropped",
        "_over",
        "_queued",
        "_read",
        "_stalled",
        "_terminal",
        "_terminal_closing",
        "_terminal_detail",
        "_tool_arguments",
        "_total",
        "finish_reasons",
        "now",
        "open_by_key",
        "reader",
        "response_id",
        "response_model",
        "usage",
    )

    def __init__(
        self,
        timeouts: TimeoutsConfig,
        limits: StreamLimits | None = None,
        *,
        reader: ReaderFactory,
    ) -> None:
        self._idle = timeouts.idle
        self._tool_arguments = timeouts.tool_arguments
        self._total = timeouts.total
        self._limits = limits or StreamLimits()
        #: The items open now, by their reader's keys (readers look; the observer changes it).
        self.open_by_key: dict[Hashable, TrackedItem] = {}
        # The lists below are made when first needed (None until then): a held stream
        # keeps its observer for its life, and most streams never fill them.
        #: Guarded items by their progress when queued (lazily fixed: see _earliest_guarded).
        self._guarded: list[tuple[float, int, TrackedItem]] | None = None
        self._queued = 0  # entries queued so far: each entry's tie-breaker
        #: The first MAX_LISTED guarded items opened, in order, and how many more were.
        self._calls: list[TrackedItem] | None = None
        self._calls_more = 0
        self._last_activity = 0.0
        self._events = 0
        self._terminal: OutcomeKind | None = None
        self._terminal_detail: str | None = None
        self._terminal_closing: Sequence[SSEFrame] = ()
        self._stalled: TrackedItem | None = None
        self._anomalies: list[str] | None = None
        self._anomalies_dropped = 0
        self._comparisons = 0
        self._mismatches: list[str] | None = None
        self._mismatches_dropped = 0
        self._kept = 0  # bytes kept for the end-of-stream checks (text, records)
        self._kept_records = 0  # of which item records, ITEM_BYTES each
        self._keeping = True
        #: The stream went past a limit: how it ends (the relay ends it at once).
        self._over: Verdict | None = None
        #: When the event being read arrived (on the upstream clock).
        self.now = 0.0
        #: Usage as the upstream last reported it (its own JSON object).
        self.usage: dict[str, object] | None = None
        #: The upstream's id of its response and the model it names (the first it gave),
        #: and why it stopped: for the outcome record, never their content.
        self.response_id: str | None = None
        self.response_model: str | None = None
        self.finish_reasons: list[str] | None = None
        #: This stream's reader, its API's (built last: it may look at the observer).
        self.reader = reader(self)
        self._read = self.reader.read

    # -- what readers report ---------------------------------------------------------------

    def named(self, response_id: object, model: object) -> None:
        """The response's id and model, as its stream first gives them (anything but a
        string is ignored)."""
        if self.response_id is None and isinstance(response_id, str):
            self.response_id = cut_name(response_id)
        if self.response_model is None and isinstance(model, str):
            self.response_model = cut_name(model)

    def stopped_because(self, reason: str) -> None:
        """A generation's finish reason (one per choice; the first MAX_LISTED kept)."""
        if self.finish_reasons is None:
            self.finish_reasons = []
        if len(self.finish_reasons) < MAX_LISTED:
            self.finish_reasons.append(cut_name(reason))

    def open_item(self, item: TrackedItem) -> bool:
        """Track ``item``; ``False`` when it is one more than ``max_open_items`` (the
        stream then ends: see :attr:`over_limit`)."""
        if item.key in self.open_by_key:
            self.note(f"{item.label} opened twice")
        elif len(self.open_by_key) >= self._limits.max_open_items:
            limit = self._limits.max_open_items
            self._end_over_limit(
                f"upstream opened more than {limit} items at once (proxai max_open_items) "
                f"with {item.label}"
            )
            return False
        self.open_by_key[item.key] = item
        if item.guarded:
            self._queue(item)
            if self._calls is None:
                self._calls = []
            if len(self._calls) < MAX_LISTED:
                self._calls.append(item)
            else:
                self._calls_more += 1
        return True

    def close_item(self, key: Hashable) -> TrackedItem | None:
        return self.open_by_key.pop(key, None)

    def guard(self, item: TrackedItem, guarded: bool = True) -> None:
        """Bound ``item`` by ``tool_arguments`` (or no longer)."""
        item.guarded = guarded
        if guarded and item.queued_at is None:
            self._queue(item)

    def progress(self, item: TrackedItem, text: str) -> None:
        """``item`` grew by ``text`` now: its aggregate grows, its deadline moves."""
        self.grow(item.text, text)
        item.last_progress = self.now

    def grow(self, aggregate: Aggregate, text: str) -> None:
        """``aggregate`` grows by ``text``, kept while the stream is within ``max_kept``."""
        size = len(text)
        if self._keeping and self._kept + size <= self._limits.max_kept:  # keep(), inline
            self._kept += size
            aggregate.append(text)
        elif self.keep(size):
            aggregate.append(text)
        else:
            aggregate.skip(text)

    @property
    def keeping(self) -> bool:
        """Whether the stream is still within ``max_kept`` (text is still kept)."""
        return self._keeping

    def keep_item(self) -> bool:
        """Whether one more item's record (an item, a choice) may be kept: counted
        :data:`ITEM_BYTES` when it opens, as what it costs whether it is open or closed."""
        if not self._keeping:
            return False
        self._kept_records += 1
        return self.keep(ITEM_BYTES)

    def keep(self, size: int) -> bool:
        """Whether ``size`` more bytes may be kept for the end-of-stream checks."""
        if not self._keeping:
            return False
        self._kept += size
        if self._kept <= self._limits.max_kept:
            return True
        self._keeping = False
        limit = self._limits.max_kept
        # What was counted, so that a stream of small events past it is not a mystery.
        records = self._kept_records
        counted = (
            f"{records} item records at {ITEM_BYTES} bytes each and "
            f"{self._kept - records * ITEM_BYTES} bytes of text"
        )
        if self._limits.end_past_kept:
            self._end_over_limit(
                f"the translated stream holds more than {limit} bytes "
                f"(proxai max_event_bytes): {counted}"
            )
        else:
            self.note(
                f"the stream kept {limit} bytes for its end-of-stream checks "
                f"(max_event_bytes; {counted}): the rest is not compared"
            )
        return False

    def _end_over_limit(self, message: str) -> None:
        if self._over is None and self._terminal is None:
            self._over = self._fail(OutcomeKind.UPSTREAM_OVER_LIMIT, message + self._where())

    def finish(
        self, kind: OutcomeKind, detail: str | None = None, *, closing: Sequence[SSEFrame] = ()
    ) -> None:
        """The upstream sent its terminal event (the first one counts). ``closing``: the
        protocol's end marker still owed if the upstream stops here (Chat's ``[DONE]``
        after its usage chunk); a later terminal without one (the marker itself) pays it."""
        if self._terminal is None:
            self._terminal = kind
            self._terminal_detail = detail
            self._terminal_closing = closing
        elif not closing:
            self._terminal_closing = ()

    def compare(self, what: str, aggregate: Aggregate, expected: str) -> None:
        """Check what the deltas spelled against the upstream's whole value (a part not
        kept whole is not compared)."""
        if aggregate.partial:
            return
        self._comparisons += 1
        if not aggregate.matches(expected):
            if self._mismatches is None:
                self._mismatches = []
            if len(self._mismatches) < MAX_ANOMALIES:
                self._mismatches.append(what)
            else:
                self._mismatches_dropped += 1

    # -- guarded items, by their last progress ---------------------------------------------

    def _queue(self, item: TrackedItem) -> None:
        item.queued_at = item.last_progress
        if self._guarded is None:
            self._guarded = []
        self._queued += 1
        heapq.heappush(self._guarded, (item.last_progress, self._queued, item))

    def _earliest_guarded(self) -> TrackedItem | None:
        """The guarded open item that progressed least recently. An item's entry is
        fixed when it comes to the top: dropped if the item closed or is no longer
        guarded, queued again at its last progress if it progressed since (each
        progress costs at most one more entry, so this is constant time amortized)."""
        heap = self._guarded
        while heap:
            queued_at, _, item = heap[0]
            if not item.guarded or self.open_by_key.get(item.key) is not item:
                heapq.heappop(heap)
                item.queued_at = None
            elif item.last_progress != queued_at:
                item.queued_at = item.last_progress
                self._queued += 1
                heapq.heapreplace(heap, (item.last_progress, self._queued, item))
            else:
                return item
        return None

    # -- the StreamObserver interface ------------------------------------------------------

    @property
    def finished(self) -> bool:
        return self._terminal is not None

    @property
    def over_limit(self) -> Verdict | None:
        return self._over

    def on_start(self, now: float) -> None:
        self._last_activity = now

    def on_frames(self, frames: Sequence[SSEFrame], now: float) -> None:
        self.read_frames(frames, now, None)

    def read_frames(self, frames: Sequence[SSEFrame], now: float, reads: list[Read] | None) -> None:
        self._last_activity = self.now = now
        for frame in frames:
            if self._over is not None:
                return  # the stream is ending: nothing more is tracked
            if frame.unknown:
                self.note(f"a line that is no SSE field: {frame.raw[:60]!r}")
            data = frame.data
            if data is None:  # a comment (": ping") or a stray blank line
                if reads is not None:
                    reads.append((frame, UNREAD))
                continue
            self._events += 1
            if reads is None:
                self._read(frame.event, data)
            else:
                reads.append((frame, self._read(frame.event, data)))

    def on_event(self, event: str | None, data: bytes, now: float) -> object:
        """One event from a carrier that delivers whole events (``event``: its type as the
        carrier names it, if it does; ``data``: its JSON bytes), arrived at ``now``; what
        the reader parsed of it. :meth:`read_frames` is the same, per SSE frame."""
        self._last_activity = self.now = now
        if self._over is not None:
            return UNREAD
        self._events += 1
        return self._read(event, data)

    @property
    def events(self) -> int:
        """Events read so far (comments and blank frames are none)."""
        return self._events

    def note(self, anomaly: str) -> None:
        """Record odd upstream input (forwarded all the same), up to MAX_ANOMALIES."""
        if self._anomalies is None:
            self._anomalies = []
        if len(self._anomalies) < MAX_ANOMALIES:
            self._anomalies.append(anomaly)
        else:
            self._anomalies_dropped += 1

    def deadline(self) -> float:
        if self._over is not None:
            return self._last_activity  # due now: the stream is ending
        if self._terminal is not None:
            return self._last_activity + min(self._idle, AFTER_TERMINAL_GRACE)
        deadline = self._last_activity + self._idle
        stalled = self._earliest_guarded()
        if stalled is not None:
            deadline = min(deadline, stalled.last_progress + self._tool_arguments)
        return deadline

    def on_deadline(self, now: float) -> Verdict:
        if self._over is not None:
            return self._over
        if self._terminal is not None:
            # The client has its terminal event; the upstream just never hung up.
            return Verdict(self._terminal, self._terminal_detail, self._terminal_closing)
        idle_deadline = self._last_activity + self._idle
        stalled = self._earliest_guarded()
        if stalled is not None and stalled.last_progress + self._tool_arguments <= min(
            now, idle_deadline
        ):
            self._stalled = stalled
            message = (
                f"upstream stalled for {self._tool_arguments} s while streaming "
                f"{stalled.streams} of {stalled.label}"
            )
            return self._fail(OutcomeKind.STALLED_TOOL_ARGUMENTS, message)
        return self._fail(
            OutcomeKind.STALLED_IDLE, f"upstream sent nothing for {self._idle} s{self._where()}"
        )

    def on_total_timeout(self, now: float) -> Verdict:
        if self._over is not None:
            return self._over
        if self._terminal is not None:
            return Verdict(self._terminal, self._terminal_detail)
        return self._fail(
            OutcomeKind.TOTAL_TIMEOUT,
            f"response exceeded proxai's total time limit of {self._total} s{self._where()}",
        )

    def on_client_stalled(self, seconds: float) -> Verdict:
        if self._terminal is not None:
            # Its terminal event is already on its way: a client that reads it has the
            # whole response, and is recorded so; one that never does is recorded
            # stalled when its connection ends (relay/ending.py, client_gone).
            return Verdict(self._terminal, self._terminal_detail)
        return self._fail(OutcomeKind.CLIENT_STALLED, client_stalled_message(seconds))

    def on_end(self, *, fault: OutcomeKind | None, detail: str | None, now: float) -> Verdict:
        if self._over is not None:
            return self._over
        if self._terminal is not None:
            if fault is not None:  # the client lost nothing; the upstream's break is noted
                how = fault.value + (f" ({detail})" if detail else "")
                self.note(f"the upstream's stream ended as {how} after its terminal event")
            return Verdict(self._terminal, self._terminal_detail, self._terminal_closing)
        if fault is None:
            return self._fail(
                OutcomeKind.UPSTREAM_EOF,
                f"upstream closed the stream before the response completed{self._where()}",
            )
        if fault is OutcomeKind.UPSTREAM_RESET:
            message = f"upstream connection broke before the response completed{self._where()}"
            return self._fail(fault, message + (f": {detail}" if detail else ""))
        return self._fail(fault, f"{detail or fault.value}{self._where()}")

    def _where(self) -> str:
        """`` while streaming text of message msg_1``: the most recently opened item."""
        if not self.open_by_key:
            return f" (after {self._events} events)"
        item = next(reversed(self.open_by_key.values()))
        self._stalled = self._stalled or item
        return f" while streaming {item.streams} of {item.label}"

    def _fail(self, kind: OutcomeKind, message: str) -> Verdict:
        return Verdict(kind, message, self.reader.closing(kind, message))

    def fill(self, outcome: Outcome) -> None:
        outcome.stalled_item = self._stalled.label if self._stalled else None
        outcome.usage, usage_capped = cap_depth(self.usage, MAX_USAGE_DEPTH)
        outcome.tokens = None if self.usage is None else self.reader.usage_of(self.usage)
        outcome.response_id = self.response_id
        outcome.response_model = self.response_model
        outcome.finish_reasons = listed(self.finish_reasons or ())
        outcome.calls = [item.summary() for item in self._calls or ()]
        outcome.calls_more = self._calls_more
        outcome.aggregates_match = None if not self._comparisons else not self._mismatches
        outcome.anomalies.extend(self._anomalies or ())
        if self._anomalies_dropped:
            outcome.anomalies.append(f"... and {self._anomalies_dropped} more anomalies")
        outcome.anomalies.extend(f"aggregate differs: {m}" for m in self._mismatches or ())
        if self._mismatches_dropped:
            outcome.anomalies.append(f"... and {self._mismatches_dropped} more aggregates differ")
        if usage_capped:
            outcome.anomalies.append(
                f"usage nested deeper than {MAX_USAGE_DEPTH} levels: the deeper part is dropped"
            )

    def snapshot(self, now: float) -> ObserverSnapshot:
        items = tuple(
            ItemSnapshot(
                label=item.label,
                streams=item.streams,
                guarded=item.guarded,
                deadline_left=(
                    round(item.last_progress + self._tool_arguments - now, 3)
                    if item.guarded
                    else None
                ),
                chars=item.text.length,
            )
            for item in self.open_by_key.values()
        )
        return ObserverSnapshot(round(self.deadline() - now, 3), items, self.finished)

    @property
    def open_items(self) -> list[str]:
        """Labels of the items open now (for tests and the live view)."""
        return [item.label for item in self.open_by_key.values()]
