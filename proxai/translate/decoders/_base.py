"""What the three decoders share: item numbering, the open/close discipline, the ending.

Every decoder hands out the same shape of stream, whatever its upstream did:

- :class:`~proxai.translate.ir.Started` first (also before a :class:`Failed`);
- items numbered 0, 1, 2... in opening order; at most one text, refusal or
  reasoning item open at a time, and never while a tool call is open. Opening
  a tool call closes an open text item; opening a text item closes everything
  open. Tool calls may stay open together (parallel calls), in opening order;
- a tool call that got no argument text gets ``"{}"`` before it closes;
- no empty :class:`ItemDelta`;
- exactly one terminal event, last; nothing after it. :class:`Finished` comes
  with every item closed; :class:`Failed` leaves open items open.

Encoders may rely on all of it; :func:`proxai.translate.ir.check_well_formed`
checks it.

A decoder keeps no record of the upstream's items: it reads its API's reader's
(:class:`~proxai.protocols.tracking.TrackedItem`, each with the decoder's state of it
in :attr:`~proxai.protocols.tracking.TrackedItem.translation`). The relay's observer
reads each frame first (:meth:`DecoderBase.follow`); a decoder fed frames no reader saw
(:data:`~proxai.protocols.observer.UNSEEN`) has its reader read them.
"""

from __future__ import annotations

import sys
from typing import Any, Generic, TypeVar

import attrs

from ...config import TimeoutsConfig
from ...protocols.observer import UNREAD, UNSEEN
from ...protocols.tracking import StreamLimits, StreamReader, TrackingObserver
from ...wire.json_values import json_object_or_none
from ...wire.sse import SSEFrame
from ..ir import (
    Event,
    Failed,
    Finished,
    FinishReason,
    ItemDelta,
    ItemDone,
    ItemKind,
    ItemStarted,
    Started,
    Usage,
)

__all__ = ["DecoderBase", "as_int", "object_of"]

#: Notes kept per response, so a hostile stream cannot grow them without bound.
_MAX_NOTES = 32
#: A decoder's own reader keeps every item: the relay's observer bounds a stream, not it.
_UNBOUNDED = StreamLimits(max_open_items=sys.maxsize, max_kept=sys.maxsize)

R = TypeVar("R", bound=StreamReader)


def as_int(value: Any) -> int | None:
    """``value`` if it is an integer (JSON ``true`` is not a count)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def object_of(data: bytes, payload: object) -> dict[str, Any] | None:
    """The JSON object of an event's ``data``: what its reader parsed (``payload``), or,
    when it parsed nothing (:data:`~proxai.protocols.observer.UNREAD`), parsed now."""
    if payload is UNREAD:
        return json_object_or_none(data)
    return payload if isinstance(payload, dict) else None


@attrs.define
class _Open:
    kind: ItemKind
    has_text: bool = False


class DecoderBase(Generic[R]):
    """Items, start and end of one response, for the decoders built on it."""

    #: The reader of the decoder's API, whose items the decoder reads.
    reader_type: type[R]

    def __init__(self) -> None:
        self.reader = self._reader_of(
            TrackingObserver(TimeoutsConfig(), _UNBOUNDED, reader=self.reader_type)
        )
        self._next_key = 0
        self._open: dict[int, _Open] = {}  # in opening order
        #: The open text, refusal or reasoning item: at most one, and never beside a call.
        self._open_content: int | None = None
        self._started = False
        self._ended = False
        #: What the decoder saw and left out (other choices, hosted tool items,
        #: fragments it could not place), for the outcome record. Deduplicated.
        self.notes: list[str] = []

    def _reader_of(self, observer: TrackingObserver) -> R:
        reader = observer.reader
        if not isinstance(reader, self.reader_type):
            raise TypeError(f"{type(self).__name__} reads a {self.reader_type.__name__}")
        return reader

    def follow(self, observer: TrackingObserver) -> None:
        """Read the items of ``observer``'s reader, which reads every frame before the
        decoder is fed it (the relay's), instead of those of a reader of its own."""
        self.reader = self._reader_of(observer)

    def _seen(self, frame: SSEFrame, payload: object) -> object:
        """What the reader parsed of ``frame``: read now if no reader saw it."""
        if payload is UNSEEN and frame.data is not None:
            return self.reader.read(frame.event, frame.data)
        return payload

    @property
    def ended(self) -> bool:
        """The terminal event (:class:`Finished` or :class:`Failed`) was given."""
        return self._ended

    def _note(self, message: str) -> None:
        if message not in self.notes and len(self.notes) < _MAX_NOTES:
            self.notes.append(message)

    def _not_an_object(self, frame: SSEFrame, data: bytes) -> list[Event]:
        """A data line that holds no JSON object: an ``error`` frame's text is the upstream's
        in-band error; anything else is noted and skipped."""
        if frame.event == "error":
            return self._fail(data.decode("utf-8", "replace")[:500])
        self._note("a data line that is not a JSON object was ignored")
        return []

    def _start(
        self, id: str | None = None, model: str | None = None, created: int | None = None
    ) -> list[Event]:
        if self._started:
            return []
        self._started = True
        return [Started(id=id, model=model, created=created)]

    def _is_open(self, key: int | None) -> bool:
        return key is not None and key in self._open

    def _open_item(
        self, kind: ItemKind, call_id: str | None = None, name: str | None = None
    ) -> tuple[int, list[Event]]:
        """Open an item; first close what the discipline says it replaces."""
        if kind is ItemKind.TOOL_CALL:
            events = self._close(self._open_content)  # the calls stay open beside it
        else:
            events = self._close_all()
            self._open_content = self._next_key
        key = self._next_key
        self._next_key += 1
        self._open[key] = _Open(kind)
        events.append(ItemStarted(key, kind, call_id=call_id, name=name))
        return key, events

    def _delta(self, key: int | None, text: str | None) -> list[Event]:
        if not text or key is None:
            return []
        item = self._open.get(key)
        if item is None:
            return []
        item.has_text = True
        return [ItemDelta(key, text)]

    def _close(self, key: int | None, signature: str | None = None) -> list[Event]:
        if key is None:
            return []
        item = self._open.pop(key, None)
        if item is None:
            return []
        if key == self._open_content:
            self._open_content = None
        events: list[Event] = []
        if item.kind is ItemKind.TOOL_CALL and not item.has_text:
            events.append(ItemDelta(key, "{}"))
        if item.kind is not ItemKind.REASONING:
            signature = None
        events.append(ItemDone(key, signature or None))
        return events

    def _close_all(self) -> list[Event]:
        """Close every open item, in opening order (each closes once: constant time per
        item, amortized)."""
        events: list[Event] = []
        for key in list(self._open):
            events += self._close(key)
        return events

    def _finish(
        self, reason: FinishReason, usage: Usage | None, stop_sequence: str | None = None
    ) -> list[Event]:
        """Close everything, then usage and the normal end."""
        if self._ended:
            return []
        events = self._start() + self._close_all()
        if usage is not None:
            events.append(usage)
        events.append(Finished(reason, stop_sequence))
        self._ended = True
        return events

    def _fail(self, message: str, code: str | None = None, type: str | None = None) -> list[Event]:
        """The upstream's in-band error: the last event, open items left open."""
        if self._ended:
            return []
        self._ended = True
        return [*self._start(), Failed(message or "upstream error", code=code, type=type)]
