"""Stream observers: sans-io watchers that see every frame the relay forwards.

An observer never changes what is forwarded. It is fed frames and the time,
and tells the relay two things: when it next needs to be woken up if nothing
arrives (:meth:`StreamObserver.deadline`), and how the stream ends (a
:class:`Verdict` with the outcome and any bytes proxai must append, such as a
synthesized terminal event). The relay's observer task turns the deadline into
a trio cancel scope; this module has no I/O and no trio.

A tracking observer's reader parses each event once (see :mod:`proxai.protocols.tracking`);
:meth:`StreamObserver.read_frames` hands what it parsed on (a translator's decoder reads
the same values instead of parsing the bytes again, and the same reader's items instead of
keeping a record of its own).

Times passed to an observer are on the relay's *upstream clock*, which runs
only while proxai is waiting for the upstream (see :mod:`proxai.relay.relay`), so
deadlines measure the upstream's silence and never proxai's own waiting on a
slow client.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Sequence
from typing import Final

import attrs

from ..config import TimeoutsConfig
from ..outcome import Outcome, OutcomeKind
from ..wire.sse import SSEFrame

__all__ = [
    "UNREAD",
    "UNSEEN",
    "ItemSnapshot",
    "ObserverFactory",
    "ObserverSnapshot",
    "PassThroughObserver",
    "Read",
    "StreamObserver",
    "Verdict",
    "client_stalled_message",
    "pass_through",
]


class _Unread(enum.Enum):
    UNREAD = "unread"
    UNSEEN = "unseen"


#: What a frame's reader parsed of it when it parsed nothing (a comment, an event type it
#: only counts, an observer that reads no JSON): whoever needs its JSON parses it.
UNREAD: Final = _Unread.UNREAD
#: What a frame no reader saw "parsed" (read without an observer, or after the observer
#: failed): a translator's decoder has its reader read it then.
UNSEEN: Final = _Unread.UNSEEN

#: One frame and what its reader parsed of its data: the JSON value (``None``: not a JSON
#: object), or :data:`UNREAD`.
Read = tuple[SSEFrame, object]


def client_stalled_message(seconds: float) -> str:
    return f"the client read nothing for {seconds} s (proxai client_write timeout)"


@attrs.frozen
class Verdict:
    """How a stream ends: its outcome and the bytes proxai appends (often none)."""

    kind: OutcomeKind
    detail: str | None = None
    closing: Sequence[SSEFrame] = ()


@attrs.frozen
class ItemSnapshot:
    """An open item as the live view shows it: its shape, never its content."""

    label: str  # "function_call get_weather (call_weather_01)"
    streams: str  # what its deltas carry: "arguments", "text"...
    guarded: bool  # bounded by tool_arguments
    deadline_left: float | None  # seconds left on its own deadline (guarded items)
    chars: int  # characters its deltas spelled so far


@attrs.frozen
class ObserverSnapshot:
    """What an observer knows of its stream now."""

    next_deadline_left: float | None = None  # seconds; None: no deadline
    items: tuple[ItemSnapshot, ...] = ()
    finished: bool = False


class StreamObserver:
    """The interface the relay drives; the base class only passes frames through."""

    __slots__ = ()  # an observer per stream: its subclasses carry no instance dict

    @property
    def finished(self) -> bool:
        """Whether the stream reached its terminal event (unknown here: False)."""
        return False

    def on_start(self, now: float) -> None:
        """The upstream's response headers arrived: the stream's deadlines start now."""

    def on_frames(self, frames: Sequence[SSEFrame], now: float) -> None:
        """Frames that just arrived from the upstream (already on their way out)."""

    def read_frames(self, frames: Sequence[SSEFrame], now: float, reads: list[Read] | None) -> None:
        """:meth:`on_frames`, also appending to ``reads`` each frame it took with what it
        parsed of it (the frames of a batch it stopped in, past a limit, are not all
        there: the relay then ends the stream). This one has no reader: none saw them."""
        self.on_frames(frames, now)
        if reads is not None:
            reads.extend((frame, UNSEEN) for frame in frames)

    @property
    def over_limit(self) -> Verdict | None:
        """The stream went past a limit proxai holds one stream to (too many items open at
        once, say): how it ends. The relay ends it at once, as a stall."""
        return None

    def deadline(self) -> float:
        """When to call :meth:`on_deadline` if nothing else arrives (``inf``: never)."""
        return math.inf

    def on_deadline(self, now: float) -> Verdict:
        """The deadline passed with the upstream silent: end the stream."""
        raise NotImplementedError

    def on_total_timeout(self, now: float) -> Verdict:
        """The response ran past ``timeouts.total`` (a wall-clock limit the relay keeps)."""
        return Verdict(OutcomeKind.TOTAL_TIMEOUT, "response exceeded proxai's total time limit")

    def on_client_stalled(self, seconds: float) -> Verdict:
        """The client accepted nothing for ``seconds`` (``timeouts.client_write``)."""
        return Verdict(OutcomeKind.CLIENT_STALLED, client_stalled_message(seconds))

    def on_end(self, *, fault: OutcomeKind | None, detail: str | None, now: float) -> Verdict:
        """The upstream body ended: cleanly (``fault`` None), or cut short by ``fault``
        (``upstream_reset``, ``upstream_event_too_large``), which ``detail`` describes."""
        if fault is not None:
            return Verdict(fault, detail)
        return Verdict(OutcomeKind.COMPLETED)

    def fill(self, outcome: Outcome) -> None:
        """Add what the observer learned (items, usage, aggregates) to the outcome."""

    def snapshot(self, now: float) -> ObserverSnapshot:
        """What the live view shows of the stream now: open items and time left on
        the deadlines. Never their content."""
        return ObserverSnapshot(finished=self.finished)


class PassThroughObserver(StreamObserver):
    """Forwards everything and imposes no deadline: for bodies proxai does not interpret."""

    __slots__ = ()


#: Builds a stream's observer with the deadlines of the upstream that serves it.
ObserverFactory = Callable[[TimeoutsConfig], StreamObserver]


def pass_through(timeouts: TimeoutsConfig) -> StreamObserver:
    """The observer factory for bodies proxai does not interpret."""
    return PassThroughObserver()
