"""The Responses reader: each ``/v1/responses`` stream event parsed once.

It tells its observer what the stream has open:

- every output item from ``response.output_item.added`` to
  ``response.output_item.done``, keyed by ``output_index`` (compatible servers
  may rotate item ids; the index is stable). Several may be open at once and
  each is guarded: a ``function_call``, ``custom_tool_call`` or ``mcp_call``
  whose arguments get no delta for ``tool_arguments`` seconds has stalled.
  ``function_call_arguments.done`` is not the end of anything but that
  argument stream: the item stops being guarded, stays open until its
  ``output_item.done``, and other items keep their own deadlines;
- the seed's aggregation: each call's arguments (``+= delta``) and each text
  part's text, checked against the ``.done`` values and the final output;
- the terminal event (``response.completed`` / ``incomplete`` / ``failed``,
  or ``error``, which the real API follows with ``response.failed``).

It keeps the last ``response`` snapshot and the last ``sequence_number``, so a
synthesized ``response.failed`` looks like the upstream's own.
"""

from __future__ import annotations

import uuid
from collections.abc import Hashable, Mapping
from typing import Any

import orjson

from ...errors import ending_code
from ...outcome import OutcomeKind, Usage
from ...wire.json_values import count_or_none, field_of
from ...wire.sse import Frames, sse_frame
from ..aggregate import Aggregate
from ..observer import UNREAD
from ..tracking import TrackedItem, TrackingObserver
from .events import (
    NEEDED_TYPES,
    NOT_JSON,
    ArgumentsDelta,
    ArgumentsDone,
    DeltaFields,
    ErrorEvent,
    LifecycleEvent,
    MalformedEvent,
    OtherEvent,
    OutputItem,
    OutputItemAdded,
    OutputItemDone,
    StreamEvent,
    TextDelta,
    TextDone,
    delta_fields_of,
    event_of,
)

__all__ = ["GUARDED_ITEM_TYPES", "ResponsesReader", "synthesized_error"]

#: Item types whose argument stream ``tool_arguments`` guards, and the word for it.
GUARDED_ITEM_TYPES: dict[str, str] = {
    "function_call": "arguments",
    "custom_tool_call": "input",
    "mcp_call": "arguments",
}
_TERMINAL_KINDS = {
    "response.completed": OutcomeKind.COMPLETED,
    "response.incomplete": OutcomeKind.INCOMPLETE,
    "response.failed": OutcomeKind.FAILED,
}


def _label(item: OutputItem) -> str:
    """``function_call get_weather (call_weather_01)``, ``message msg_01``..."""
    label = item.type
    if item.name:
        label += f" {item.name}"
    if item.server_label:
        label += f" on {item.server_label}"
    ident = item.call_id or item.id
    if ident:
        label += f" ({ident})" if item.name else f" {ident}"
    return label


def synthesized_error(
    message: str,
    *,
    sequence_number: int,
    snapshot: dict[str, Any] | None,
    model: str | None,
    code: str = "server_error",
) -> Frames:
    """The ``error`` + ``response.failed`` pair proxai ends a broken stream with.

    The ``error`` event carries the documented flat fields and the nested
    ``error`` object the real API sends (openai-python raises ``APIError`` only
    for the latter); ``response.failed`` is the last snapshot marked failed.
    Its type is ``server_error``; its code names the cause (:func:`~proxai.errors.ending_code`:
    ``upstream_timeout``, ``upstream_closed``...), never one of the codes Codex treats as
    final (``context_length_exceeded``, ``insufficient_quota``...), so every client retries.
    """
    error = {"type": "server_error", "code": code, "message": message, "param": None}
    error_event = {
        "type": "error",
        "sequence_number": sequence_number,
        "code": code,
        "message": message,
        "param": None,
        "error": error,
    }
    response: dict[str, Any] = dict(snapshot) if snapshot else {}
    response.setdefault("id", "resp_proxai_" + uuid.uuid4().hex)
    response.setdefault("object", "response")
    response.setdefault("model", model)
    response.setdefault("output", [])
    response["status"] = "failed"
    response["error"] = {"code": code, "message": message}
    response["incomplete_details"] = None
    failed = {
        "type": "response.failed",
        "sequence_number": sequence_number + 1,
        "response": response,
    }
    return [sse_frame("error", error_event), sse_frame("response.failed", failed)]


#: What a text part no delta came for spelled.
_NO_DELTAS = Aggregate()
_TEXT_DELTA = "response.output_text.delta"


def responses_usage(usage: Mapping[str, Any]) -> Usage:
    """Responses' ``usage`` (``input_tokens``, ``output_tokens`` and their details) in
    proxai's one shape."""
    return Usage(
        input_tokens=count_or_none(usage.get("input_tokens")),
        cached_tokens=count_or_none(field_of(usage.get("input_tokens_details"), "cached_tokens")),
        output_tokens=count_or_none(usage.get("output_tokens")),
        reasoning_tokens=count_or_none(
            field_of(usage.get("output_tokens_details"), "reasoning_tokens")
        ),
        total_tokens=count_or_none(usage.get("total_tokens")),
    )


class ResponsesReader:
    """Reads one Responses stream for its observer; see the module docstring."""

    __slots__ = (
        "_index_of_id",
        "_last_sequence",
        "_model",
        "_open",
        "_since_sequence",
        "_snapshot",
        "_tracker",
        "items",
        "texts",
    )  # one reader per stream: no instance dict

    def __init__(self, tracker: TrackingObserver, model: str | None = None) -> None:
        """``model``, the one the client asked for, names it in a synthesized failure
        when the upstream sent no snapshot of its own."""
        self._tracker = tracker
        self._open = tracker.open_by_key  # the items open now (the observer's)
        self._model = model
        # Every item opened (within max_kept), by output_index (or by id where a server
        # sends no index), for the final output's check; and the open ones' ids.
        self.items: dict[Hashable, TrackedItem] = {}
        self._index_of_id: dict[str, Hashable] = {}
        self.texts: dict[tuple[Hashable, int], Aggregate] = {}
        #: The last lifecycle event's bytes (its ``response`` is the last snapshot).
        self._snapshot: bytes | None = None
        self._last_sequence: int | None = None
        self._since_sequence = 0  # events after the last one that carried a sequence_number

    def read(self, event_type: str | None, data: bytes) -> object:
        if event_type == _TEXT_DELTA:
            return self._read_text_delta(data)
        return self.read_any(event_type, data)

    def read_any(self, event_type: str | None, data: bytes) -> object:
        """:meth:`read` without the inline path for text deltas (the general one, which
        gives the same for them)."""
        # needs_parsing() and load(), inline: this runs once per event.
        if event_type and event_type != "message" and event_type not in NEEDED_TYPES:
            self._since_sequence += 1  # counted, never parsed
            return UNREAD
        try:
            value = orjson.loads(data)
        except orjson.JSONDecodeError:
            value = NOT_JSON
        payload = value if isinstance(value, dict) else None
        delta = delta_fields_of(event_type, value)
        if delta is not None:
            self._apply_delta(delta)
        else:
            event = event_of(event_type, value)
            self._apply(event)
            if isinstance(event, LifecycleEvent):
                # The snapshot kept as the event's bytes, parsed again only if proxai
                # ends the stream: a stream holds it for its life, and its parse is
                # about three times its size.
                self._snapshot = data
        return payload

    def _read_text_delta(self, data: bytes) -> object:
        """A ``response.output_text.delta`` event (most of a stream's): what
        :func:`delta_fields_of` and :meth:`_apply_delta` do with it, inline, for a
        well-formed delta of text already begun; anything else goes their way."""
        try:
            value = orjson.loads(data)
        except orjson.JSONDecodeError:
            value = NOT_JSON
        if type(value) is not dict:  # orjson makes exact types: no subclass to allow
            self._apply(event_of(_TEXT_DELTA, value))
            return None
        delta = value.get("delta")
        if type(delta) is not str or value.get("type") != _TEXT_DELTA:
            self._apply(event_of(_TEXT_DELTA, value))
            return value
        seq = value.get("sequence_number")
        index = value.get("output_index")
        content = value.get("content_index")
        if type(index) is not int:  # no bool either, as _opt_int
            item_id = value.get("item_id")
            index = self._index_of_id.get(item_id) if type(item_id) is str else None
            if index is None:
                self._note_sequence(seq if type(seq) is int else None)
                return value
        text = self.texts.get((index, content if type(content) is int and content else 0))
        if text is None:  # its first delta: _apply_delta opens its record
            fields = delta_fields_of(_TEXT_DELTA, value)
            assert fields is not None
            self._apply_delta(fields)
            return value
        if type(seq) is int:
            self._last_sequence = seq
            self._since_sequence = 0
        else:
            self._since_sequence += 1
        self._tracker.grow(text, delta)
        return value

    def _apply(self, event: StreamEvent) -> None:
        tracker = self._tracker
        match event:
            # Deltas that delta_fields leaves to parse_event (no event: line, say).
            case ArgumentsDelta():
                fields = (event.type, event.sequence_number, event.output_index, event.item_id)
                self._apply_delta((*fields, 0, event.delta))
                return
            case TextDelta():
                fields = (event.type, event.sequence_number, event.output_index, event.item_id)
                self._apply_delta((*fields, event.content_index, event.delta))
                return
        self._note_sequence(getattr(event, "sequence_number", None))
        match event:
            case OtherEvent():
                pass
            case OutputItemAdded():
                self._add(event.output_index, event.item)
            case OutputItemDone():
                self._done(event.output_index, event.item)
            case ArgumentsDone():
                item = self._item_for(event.output_index, event.item_id, event.type)
                if item is not None:
                    # The arguments are complete: what follows (a hosted MCP tool
                    # running, say) may take long, and only idle bounds it.
                    tracker.guard(item, False)
                    item.streams = "output"
                    tracker.compare(f"{item.label}: {event.type}", item.text, event.value)
            case TextDone():
                index = self.index_for(event.output_index, event.item_id)
                text = self.texts.get((index, event.content_index), _NO_DELTAS)
                if index is not None and (tracker.keeping or text is not _NO_DELTAS):
                    tracker.compare(
                        f"text at output_index {index}, content_index {event.content_index}",
                        text,
                        event.text,
                    )
            case LifecycleEvent():
                response = event.response
                tracker.named(response.get("id"), response.get("model"))
                kind = _TERMINAL_KINDS.get(event.type)
                if kind is not None:
                    tracker.finish(kind)
                    tracker.stopped_because(_finish_reason(response, event.type))
                    usage = event.response.get("usage")
                    tracker.usage = usage if isinstance(usage, dict) else None
                    self._check_final_output(event.response.get("output"))
            case ErrorEvent():
                tracker.finish(OutcomeKind.FAILED, event.text)
            case MalformedEvent():
                tracker.note(f"{event.type or 'untyped'} event: {event.reason}")

    def _apply_delta(self, fields: DeltaFields) -> None:
        """An argument or text delta, from its fields (read by :func:`delta_fields_of`, or
        taken from the event :func:`event_of` built)."""
        event_type, seq, output_index, item_id, content_index, delta = fields
        self._note_sequence(seq)
        if event_type == "response.output_text.delta":
            index = self.index_for(output_index, item_id)
            if index is not None:
                text = self.texts.get((index, content_index))
                if text is None:
                    if not self._tracker.keep_item():
                        return
                    text = self.texts[(index, content_index)] = Aggregate()
                self._tracker.grow(text, delta)
            return
        item = self._item_for(output_index, item_id, event_type)
        if item is not None:
            self._tracker.progress(item, delta)

    def _note_sequence(self, seq: int | None) -> None:
        if seq is not None:
            self._last_sequence = seq
            self._since_sequence = 0
        else:
            self._since_sequence += 1

    def index_for(self, output_index: int | None, item_id: str | None) -> Hashable | None:
        """The key of the item an event names: its ``output_index``, else its item id's."""
        if output_index is not None:
            return output_index
        if item_id is not None:
            return self._index_of_id.get(item_id)
        return None

    def _item_for(
        self, output_index: int | None, item_id: str | None, what: str
    ) -> TrackedItem | None:
        index = self.index_for(output_index, item_id)
        item = self._open.get(index) if index is not None else None
        if item is None:
            self._tracker.note(f"{what} for an item that is not open (output_index {index})")
        return item

    def _add(self, output_index: int | None, item: OutputItem) -> None:
        tracker = self._tracker
        index: Hashable = output_index
        if index is None:
            if not item.id:
                tracker.note(f"output_item.added ({item.type}) with no index and no id")
                return
            index = ("id", item.id)
        streams = GUARDED_ITEM_TYPES.get(item.type, "text" if item.type == "message" else "output")
        tracked = TrackedItem(
            key=index,
            type=item.type,
            label=_label(item),
            guarded=item.type in GUARDED_ITEM_TYPES,
            streams=streams,
            last_progress=tracker.now,
            name=item.name,
            call_id=item.call_id,
        )
        initial = item.input if item.type == "custom_tool_call" else item.arguments
        if tracked.guarded and initial:
            tracker.grow(tracked.text, initial)
        if not tracker.open_item(tracked):
            return
        if tracker.keep_item():
            self.items[index] = tracked
        if item.id:
            self._index_of_id[item.id] = index

    def _done(self, output_index: int | None, item: OutputItem) -> None:
        index = self.index_for(output_index, item.id)
        tracker = self._tracker
        tracked = tracker.close_item(index) if index is not None else None
        if tracked is None:
            tracker.note(f"output_item.done for output_index {index}, which is not open")
            return
        if item.id and self.items.get(index) is not tracked:
            self._index_of_id.pop(item.id, None)  # not kept for the final check: forgotten
        if tracked.guarded:
            final = item.input if item.type == "custom_tool_call" else item.arguments
            if final is not None:
                tracker.compare(f"{tracked.label}: output_item.done", tracked.text, final)

    def _check_final_output(self, output: Any) -> None:
        if not isinstance(output, list):
            return
        for position, entry in enumerate(output):
            if not isinstance(entry, dict) or not isinstance(entry.get("type"), str):
                continue
            entry_id = entry.get("id")
            index = (
                self._index_of_id.get(entry_id, position) if isinstance(entry_id, str) else position
            )
            kind = entry["type"]
            item = self.items.get(index)
            if kind in GUARDED_ITEM_TYPES and item is not None and item.type == kind:
                final = entry.get("input" if kind == "custom_tool_call" else "arguments")
                if isinstance(final, str):
                    self._tracker.compare(f"{item.label}: final output", item.text, final)
            elif kind == "message" and isinstance(entry.get("content"), list):
                for content_index, part in enumerate(entry["content"]):
                    text = self.texts.get((index, content_index))
                    if (
                        text is not None
                        and isinstance(part, dict)
                        and isinstance(part.get("text"), str)
                    ):
                        self._tracker.compare(
                            f"text at output_index {index}, content_index {content_index}: "
                            "final output",
                            text,
                            part["text"],
                        )

    def usage_of(self, usage: Mapping[str, Any]) -> Usage:
        return responses_usage(usage)

    def _last_snapshot(self) -> dict[str, Any] | None:
        if self._snapshot is None:
            return None
        response = orjson.loads(self._snapshot).get("response")  # parsed once already
        return response if isinstance(response, dict) else None

    def closing(self, kind: OutcomeKind, message: str) -> Frames:
        if self._last_sequence is not None:
            sequence = self._last_sequence + self._since_sequence + 1
        else:
            sequence = self._tracker.events
        return synthesized_error(
            message,
            sequence_number=sequence,
            snapshot=self._last_snapshot(),
            model=self._model,
            code=ending_code(kind),
        )


def _finish_reason(response: dict[str, Any], event_type: str) -> str:
    """Why a response ended: its ``incomplete_details.reason`` (``max_output_tokens``),
    else its status (``completed``, ``failed``), else its terminal event's name."""
    details = response.get("incomplete_details")
    if isinstance(details, dict) and isinstance(details.get("reason"), str):
        return str(details["reason"])
    status = response.get("status")
    return status if isinstance(status, str) else event_type.removeprefix("response.")
