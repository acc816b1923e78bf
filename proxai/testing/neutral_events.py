"""Checks of the neutral event stream (:mod:`proxai.translate.ir`): what decoders promise.

For tests of decoders, and of encoders fed hand-written streams.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..translate.ir import (
    Decoder,
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
from ..wire.sse import SSEFrame

__all__ = ["check_well_formed", "events_of"]


def events_of(decoder: Decoder, frames: Sequence[SSEFrame]) -> list[Event]:
    """Every event of ``frames``, then of the stream's clean end."""
    events = [event for frame in frames for event in decoder.feed(frame)]
    return events + decoder.close()


def check_well_formed(events: Sequence[Event], *, complete: bool = True) -> None:
    """Raise ``AssertionError`` unless ``events`` keep the decoders' promises.

    :class:`Started` first and once; items keyed 0, 1, 2... in opening order;
    deltas (never empty) and :class:`ItemDone` only for open items; a signature
    only on reasoning; a tool call with its call id and name and some argument
    text; at most one :class:`Usage`; text, refusal and reasoning items open one
    at a time and never beside a tool call; one terminal event, last (when
    ``complete``: the stream must have one), and every item closed before
    :class:`Finished` (a :class:`Failed` may leave items open). For tests of
    decoders, and of encoders fed hand-written streams.
    """
    open_items: dict[int, ItemKind] = {}
    has_text: set[int] = set()
    next_key = 0
    usage_seen = False
    for position, event in enumerate(events):
        where = f"event {position} ({event!r})"
        assert (position == 0) == isinstance(event, Started), f"{where}: Started first, once"
        if position > 0:
            assert not isinstance(events[position - 1], Finished | Failed), (
                f"{where}: after the terminal event"
            )
        if isinstance(event, ItemStarted):
            assert event.key == next_key, f"{where}: expected key {next_key}"
            next_key += 1
            if event.kind is ItemKind.TOOL_CALL:
                assert event.call_id and isinstance(event.name, str), f"{where}: call id, name"
                assert all(k is ItemKind.TOOL_CALL for k in open_items.values()), (
                    f"{where}: a tool call opened beside a text item"
                )
            else:
                assert event.call_id is None and event.name is None, f"{where}: not a call"
                assert not open_items, f"{where}: opened beside other open items"
            open_items[event.key] = event.kind
        elif isinstance(event, ItemDelta):
            assert event.key in open_items, f"{where}: the item is not open"
            assert event.text, f"{where}: empty delta"
            has_text.add(event.key)
        elif isinstance(event, ItemDone):
            kind = open_items.pop(event.key, None)
            assert kind is not None, f"{where}: the item is not open"
            assert event.signature is None or kind is ItemKind.REASONING, (
                f"{where}: a signature on a {kind} item"
            )
            if kind is ItemKind.TOOL_CALL:
                assert event.key in has_text, f"{where}: a tool call without arguments"
        elif isinstance(event, Usage):
            assert not usage_seen, f"{where}: a second Usage"
            usage_seen = True
        elif isinstance(event, Finished):
            assert not open_items, f"{where}: items {sorted(open_items)} still open"
            assert (event.stop_sequence is not None) == (
                event.reason is FinishReason.STOP_SEQUENCE
            ), f"{where}: a stop sequence goes with STOP_SEQUENCE"
    if complete:
        assert events and isinstance(events[-1], Finished | Failed), "no terminal event"
