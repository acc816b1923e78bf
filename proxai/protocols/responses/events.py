"""Responses stream events, as far as the observer needs them.

A tagged union on ``type``: the events that change what the observer tracks
are structured (lifecycle and terminal events with their ``response``
snapshot, output items added and done, argument and text deltas and their
``.done``, ``error``); every other type, known or not (``keepalive``,
``response.metadata``, hosted-tool progress, reasoning deltas...), is an
:class:`OtherEvent` and its JSON is never parsed. The model is for the
observer only: the bytes on the wire are forwarded as they came.

OpenAI names the type in the ``event:`` line, so routing costs nothing; a
stream without ``event:`` lines (some compatible servers) is parsed to find it.
Each event's data is parsed once (:func:`load`); deltas, the bulk of a stream, are
read field by field from it (:func:`delta_fields_of`) instead of going through cattrs.
"""

from __future__ import annotations

from typing import Any

import attrs
import orjson
from cattrs.errors import ClassValidationError

from ...converters import error_paths, strict_converter
from ...wire.json_values import str_or_none
from ...wire.sse import SSEFrame

__all__ = [
    "ARGUMENT_DELTAS",
    "ARGUMENT_DONES",
    "NEEDED_TYPES",
    "NOT_JSON",
    "TERMINAL_TYPES",
    "ArgumentsDelta",
    "ArgumentsDone",
    "DeltaFields",
    "ErrorEvent",
    "LifecycleEvent",
    "MalformedEvent",
    "OtherEvent",
    "OutputItem",
    "OutputItemAdded",
    "OutputItemDone",
    "StreamEvent",
    "TextDelta",
    "TextDone",
    "delta_fields",
    "delta_fields_of",
    "event_of",
    "load",
    "needs_parsing",
    "parse_event",
]

LIFECYCLE_TYPES = frozenset({"response.created", "response.queued", "response.in_progress"})
TERMINAL_TYPES = frozenset({"response.completed", "response.incomplete", "response.failed"})

#: Argument streams of the item types guarded by ``tool_arguments``, and the
#: ``.done`` field holding the full value.
ARGUMENT_DELTAS = frozenset(
    {
        "response.function_call_arguments.delta",
        "response.custom_tool_call_input.delta",
        "response.mcp_call_arguments.delta",
    }
)
ARGUMENT_DONES: dict[str, str] = {
    "response.function_call_arguments.done": "arguments",
    "response.custom_tool_call_input.done": "input",
    "response.mcp_call_arguments.done": "arguments",
}


@attrs.frozen
class LifecycleEvent:
    """``response.created`` / ``queued`` / ``in_progress`` and the terminal
    ``completed`` / ``incomplete`` / ``failed``: each carries a full snapshot."""

    type: str
    response: dict[str, Any]
    sequence_number: int | None = None


@attrs.frozen
class OutputItem:
    """The parts of an output item the observer reads; the rest stays in the bytes."""

    type: str
    id: str | None = None
    call_id: str | None = None
    name: str | None = None
    server_label: str | None = None
    arguments: str | None = None
    input: str | None = None
    status: str | None = None
    content: list[dict[str, Any]] | None = None


@attrs.frozen
class OutputItemAdded:
    item: OutputItem
    output_index: int | None = None  # required by the spec; absent on some servers
    sequence_number: int | None = None
    type: str = "response.output_item.added"


@attrs.frozen
class OutputItemDone:
    item: OutputItem
    output_index: int | None = None
    sequence_number: int | None = None
    type: str = "response.output_item.done"


@attrs.frozen
class ArgumentsDelta:
    """A fragment of a function call's or MCP call's arguments, or a custom tool's input."""

    type: str
    output_index: int | None
    item_id: str | None
    delta: str
    sequence_number: int | None = None


@attrs.frozen
class ArgumentsDone:
    type: str
    output_index: int | None
    item_id: str | None
    value: str
    sequence_number: int | None = None


@attrs.frozen
class TextDelta:
    output_index: int | None
    content_index: int
    item_id: str | None
    delta: str
    sequence_number: int | None = None
    type: str = "response.output_text.delta"


@attrs.frozen
class TextDone:
    output_index: int | None
    content_index: int
    item_id: str | None
    text: str
    sequence_number: int | None = None
    type: str = "response.output_text.done"


@attrs.frozen
class ErrorEvent:
    """``error``: flat ``code``/``message``/``param`` as documented, or nested ``error`` as sent."""

    code: str | None = None
    message: str | None = None
    param: str | None = None
    error: dict[str, Any] | None = None
    sequence_number: int | None = None
    type: str = "error"

    @property
    def text(self) -> str:
        nested = self.error or {}
        return str(
            self.message or nested.get("message") or self.code or nested.get("code") or "error"
        )


@attrs.frozen
class OtherEvent:
    """Any event the observer only counts (its JSON is not parsed)."""

    type: str | None


@attrs.frozen
class MalformedEvent:
    """A frame whose data is not the JSON its type promises; forwarded all the same."""

    type: str | None
    reason: str


StreamEvent = (
    LifecycleEvent
    | OutputItemAdded
    | OutputItemDone
    | ArgumentsDelta
    | ArgumentsDone
    | TextDelta
    | TextDone
    | ErrorEvent
    | OtherEvent
    | MalformedEvent
)

_STRUCTURED: dict[str, type[Any]] = {
    **dict.fromkeys(LIFECYCLE_TYPES | TERMINAL_TYPES, LifecycleEvent),
    "response.output_item.added": OutputItemAdded,
    "response.output_item.done": OutputItemDone,
}
#: The types whose events may change what the observer tracks.
NEEDED_TYPES = _NEEDED = (
    frozenset(_STRUCTURED)
    | ARGUMENT_DELTAS
    | frozenset(ARGUMENT_DONES)
    | {"error", "response.output_text.delta", "response.output_text.done"}
)

_converter = strict_converter(forbid_extra_keys=False)


def _opt_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


_DELTA_TYPES = ARGUMENT_DELTAS | {"response.output_text.delta"}

#: A delta's ``(type, sequence_number, output_index, item_id, content_index, delta)``.
DeltaFields = tuple[str, int | None, int | None, str | None, int, str]


class _NotJson:
    """What :func:`load` gives for data that is not JSON."""


NOT_JSON = _NotJson()


def load(data: bytes) -> Any:
    """The JSON value of an event's data, or :data:`NOT_JSON`."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return NOT_JSON


def needs_parsing(kind: str | None) -> bool:
    """Whether an event named ``kind`` by its ``event:`` line may change what the observer
    tracks (every other type is an :class:`OtherEvent`, its JSON never parsed)."""
    return not kind or kind == "message" or kind in _NEEDED


def delta_fields_of(kind: str | None, data: Any) -> DeltaFields | None:
    """The fields of a well-formed text or argument delta named ``kind`` whose data parsed
    to ``data``, read without building an event (deltas are most of a stream); ``None``
    for anything else, which :func:`event_of` then classifies. For a delta both give the
    same values."""
    if kind not in _DELTA_TYPES or not isinstance(data, dict):
        return None
    json_type = data.get("type")
    delta = data.get("delta")
    if json_type != kind or not isinstance(delta, str):
        return None
    return (
        json_type,
        _opt_int(data.get("sequence_number")),
        _opt_int(data.get("output_index")),
        str_or_none(data.get("item_id")),
        _opt_int(data.get("content_index")) or 0,
        delta,
    )


def delta_fields(frame: SSEFrame) -> DeltaFields | None:
    """:func:`delta_fields_of` a frame."""
    if frame.event not in _DELTA_TYPES or frame.data is None:
        return None
    return delta_fields_of(frame.event, load(frame.data))


def parse_event(frame: SSEFrame) -> StreamEvent:
    """Classify one dispatched SSE event (``frame.data`` is not ``None``)."""
    kind = frame.event
    if not needs_parsing(kind):  # "" is the default type too
        return OtherEvent(kind)
    assert frame.data is not None
    return event_of(kind, load(frame.data))


def event_of(kind: str | None, data: Any) -> StreamEvent:
    """Classify an event named ``kind`` (by its ``event:`` line, if any) whose data
    parsed to ``data`` (:func:`load`)."""
    if data is NOT_JSON:
        return MalformedEvent(kind, "data is not JSON")
    if not isinstance(data, dict):
        return MalformedEvent(kind, "data is not a JSON object")
    json_type = data.get("type")
    if not isinstance(json_type, str):
        return MalformedEvent(kind, "no string 'type' in data")
    if json_type not in _NEEDED:
        return OtherEvent(json_type)
    seq = _opt_int(data.get("sequence_number"))
    try:
        if json_type in ARGUMENT_DELTAS or json_type == "response.output_text.delta":
            delta = data["delta"]
            if not isinstance(delta, str):
                return MalformedEvent(json_type, "'delta' is not a string")
            output_index = _opt_int(data.get("output_index"))
            item_id = str_or_none(data.get("item_id"))
            if json_type == "response.output_text.delta":
                return TextDelta(
                    output_index, _opt_int(data.get("content_index")) or 0, item_id, delta, seq
                )
            return ArgumentsDelta(json_type, output_index, item_id, delta, seq)
        if json_type in ARGUMENT_DONES or json_type == "response.output_text.done":
            field = ARGUMENT_DONES.get(json_type, "text")
            value = data[field]
            if not isinstance(value, str):
                return MalformedEvent(json_type, f"'{field}' is not a string")
            output_index = _opt_int(data.get("output_index"))
            item_id = str_or_none(data.get("item_id"))
            if field == "text":
                return TextDone(
                    output_index, _opt_int(data.get("content_index")) or 0, item_id, value, seq
                )
            return ArgumentsDone(json_type, output_index, item_id, value, seq)
    except KeyError as exc:
        return MalformedEvent(json_type, f"missing {exc}")
    if json_type == "error":
        # Whatever its shape, an error is an error: read it leniently.
        nested = data.get("error")
        return ErrorEvent(
            code=None if data.get("code") is None else str(data["code"]),
            message=None if data.get("message") is None else str(data["message"]),
            param=str_or_none(data.get("param")),
            error=nested if isinstance(nested, dict) else None,
            sequence_number=seq,
        )
    try:
        event: StreamEvent = _converter.structure(data, _STRUCTURED[json_type])
    except (ClassValidationError, TypeError, ValueError) as exc:
        path, reason = error_paths(exc)[0]
        return MalformedEvent(json_type, f"{path}: {reason}")
    return event
