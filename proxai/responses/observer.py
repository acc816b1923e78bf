"""The Responses observer: a sans-io state machine over one ``/v1/responses`` stream.

Fed the frames the relay forwards and the time they arrived, it tracks what
the stream has open and decides when the upstream has been silent too long:

- every output item from ``response.output_item.added`` to
  ``response.output_item.done``, keyed by ``output_index`` (compatible servers
  may rotate item ids; the index is stable). Several may be open at once and
  each is guarded: a ``function_call``, ``custom_tool_call`` or ``mcp_call``
  whose arguments get no delta for ``tool_arguments`` seconds has stalled.
  ``function_call_arguments.done`` is not the end of anything but that
  argument stream: the item stays guarded until its ``output_item.done`` and
  other items keep their own deadlines;
- the seed's aggregation: each call's arguments (``+= delta``) and each text
  part's text, checked against the ``.done`` values and the final output;
- the last ``response`` snapshot and the last ``sequence_number``, so a
  synthesized ``response.failed`` looks like the upstream's own;
- the terminal event (``response.completed`` / ``incomplete`` / ``failed``,
  or ``error``, which the real API follows with ``response.failed``).

Times are on the relay's *upstream clock*, which only runs while proxai waits
for the upstream: a client that reads slowly never makes the upstream look
silent. ``total`` is a wall-clock limit and lives in the relay.
"""

from __future__ import annotations

import uuid
from typing import Any

import attrs
import orjson

from ..config import TimeoutsConfig
from ..observer import StreamObserver, Verdict
from ..outcome import CallSummary, Outcome, OutcomeKind
from ..sse import SSEFrame
from .events import (
    ArgumentsDelta,
    ArgumentsDone,
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
    parse_event,
)
from .request import RequestProjection

__all__ = ["GUARDED_ITEM_TYPES", "ResponsesObserver", "synthesized_failure"]

#: Item types whose argument stream ``tool_arguments`` guards, and the word for it.
GUARDED_ITEM_TYPES: dict[str, str] = {
    "function_call": "arguments",
    "custom_tool_call": "input",
    "mcp_call": "arguments",
}
#: After its terminal event a stream has nothing left to say: if the upstream does
#: not hang up within this many seconds, proxai ends the response itself.
AFTER_TERMINAL_GRACE = 1.0

_TERMINAL_KINDS = {
    "response.completed": OutcomeKind.COMPLETED,
    "response.incomplete": OutcomeKind.INCOMPLETE,
    "response.failed": OutcomeKind.FAILED,
}


@attrs.define
class _Item:
    """An output item the stream opened."""

    output_index: int
    type: str
    id: str | None
    call_id: str | None
    name: str | None
    server_label: str | None
    last_progress: float
    parts: list[str] = attrs.field(factory=list)  # argument deltas, for guarded items
    done_value: str | None = None  # the arguments' or input's ``.done`` value
    closed: bool = False

    @property
    def guarded(self) -> bool:
        return self.type in GUARDED_ITEM_TYPES

    @property
    def aggregate(self) -> str:
        if len(self.parts) > 1:
            self.parts[:] = ["".join(self.parts)]
        return self.parts[0] if self.parts else ""

    def describe(self) -> str:
        """``function_call get_weather (call_weather_01)``, ``message msg_01``..."""
        label = self.type
        if self.name:
            label += f" {self.name}"
        if self.server_label:
            label += f" on {self.server_label}"
        ident = self.call_id or self.id
        if ident:
            label += f" ({ident})" if self.name else f" {ident}"
        return label


def _sse(event_type: str, payload: dict[str, Any]) -> bytes:
    return b"event: " + event_type.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"


def synthesized_failure(
    message: str, *, sequence_number: int, snapshot: dict[str, Any] | None, model: str | None
) -> bytes:
    """The ``error`` + ``response.failed`` pair proxai ends a broken stream with.

    The ``error`` event carries the documented flat fields and the nested
    ``error`` object the real API sends (openai-python raises ``APIError`` only
    for the latter); ``response.failed`` is the last snapshot marked failed.
    Code ``server_error`` is one every client treats as retryable.
    """
    error = {"type": "server_error", "code": "server_error", "message": message, "param": None}
    error_event = {
        "type": "error",
        "sequence_number": sequence_number,
        "code": "server_error",
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
    response["error"] = {"code": "server_error", "message": message}
    response["incomplete_details"] = None
    failed = {
        "type": "response.failed",
        "sequence_number": sequence_number + 1,
        "response": response,
    }
    return _sse("error", error_event) + _sse("response.failed", failed)


class ResponsesObserver(StreamObserver):
    """Watches one Responses stream; see the module docstring."""

    def __init__(self, timeouts: TimeoutsConfig, request: RequestProjection | None = None) -> None:
        self._idle = timeouts.idle
        self._tool_arguments = timeouts.tool_arguments
        self._total = timeouts.total
        self._model = request.model if request else None
        self._open: dict[int, _Item] = {}
        self._items: dict[int, _Item] = {}  # every item ever opened, by output_index
        self._index_of_id: dict[str, int] = {}
        self._texts: dict[tuple[int, int], list[str]] = {}
        self._comparisons = 0
        self._mismatches: list[str] = []
        self._anomalies: list[str] = []
        self._snapshot: dict[str, Any] | None = None
        self._usage: dict[str, Any] | None = None
        self._last_sequence: int | None = None
        self._since_sequence = 0  # events after the last one that carried a sequence_number
        self._events = 0
        self._terminal: OutcomeKind | None = None
        self._error_text: str | None = None
        self._last_activity = 0.0
        self._stalled: _Item | None = None

    # -- feeding -------------------------------------------------------------------------

    def on_start(self, now: float) -> None:
        self._last_activity = now

    def on_frames(self, frames: Any, now: float) -> None:
        self._last_activity = now
        frame: SSEFrame
        for frame in frames:
            if frame.data is None:  # a comment (": ping") or a stray blank line
                continue
            self._events += 1
            self._apply(parse_event(frame), now)

    def _apply(self, event: StreamEvent, now: float) -> None:
        seq = getattr(event, "sequence_number", None)
        if seq is not None:
            self._last_sequence = seq
            self._since_sequence = 0
        else:
            self._since_sequence += 1
        match event:
            case ArgumentsDelta():
                item = self._item_for(event.output_index, event.item_id, event.type)
                if item is not None:
                    item.parts.append(event.delta)
                    item.last_progress = now
            case TextDelta():
                index = self._index_for(event.output_index, event.item_id)
                if index is not None:
                    self._texts.setdefault((index, event.content_index), []).append(event.delta)
            case OtherEvent():
                pass
            case OutputItemAdded():
                self._open_item(event.output_index, event.item, now)
            case OutputItemDone():
                self._close_item(event.output_index, event.item)
            case ArgumentsDone():
                item = self._item_for(event.output_index, event.item_id, event.type)
                if item is not None:
                    item.done_value = event.value
                    item.last_progress = now
                    self._compare(f"{item.describe()}: {event.type}", item.aggregate, event.value)
            case TextDone():
                index = self._index_for(event.output_index, event.item_id)
                if index is not None:
                    parts = self._texts.get((index, event.content_index), [])
                    self._compare(
                        f"text at output_index {index}, content_index {event.content_index}",
                        "".join(parts),
                        event.text,
                    )
            case LifecycleEvent():
                self._snapshot = event.response
                kind = _TERMINAL_KINDS.get(event.type)
                if kind is not None:
                    self._terminal = kind
                    usage = event.response.get("usage")
                    self._usage = usage if isinstance(usage, dict) else None
                    self._check_final_output(event.response.get("output"))
            case ErrorEvent():
                self._terminal = self._terminal or OutcomeKind.FAILED
                self._error_text = event.text
            case MalformedEvent():
                self._anomalies.append(f"{event.type or 'untyped'} event: {event.reason}")

    def _index_for(self, output_index: int | None, item_id: str | None) -> int | None:
        if output_index is not None:
            return output_index
        if item_id is not None:
            return self._index_of_id.get(item_id)
        return None

    def _item_for(self, output_index: int | None, item_id: str | None, what: str) -> _Item | None:
        index = self._index_for(output_index, item_id)
        item = self._open.get(index) if index is not None else None
        if item is None:
            self._anomalies.append(f"{what} for an item that is not open (output_index {index})")
        return item

    def _open_item(self, index: int, item: OutputItem, now: float) -> None:
        if index in self._open:
            self._anomalies.append(f"output_index {index} opened twice")
        opened = _Item(index, item.type, item.id, item.call_id, item.name, item.server_label, now)
        initial = item.arguments if item.type != "custom_tool_call" else item.input
        if opened.guarded and initial:
            opened.parts.append(initial)
        self._open[index] = self._items[index] = opened
        if item.id:
            self._index_of_id[item.id] = index

    def _close_item(self, index: int, item: OutputItem) -> None:
        opened = self._open.pop(index, None)
        if opened is None:
            self._anomalies.append(f"output_item.done for output_index {index}, which is not open")
            return
        opened.closed = True
        if opened.guarded:
            final = item.input if item.type == "custom_tool_call" else item.arguments
            if final is not None:
                self._compare(f"{opened.describe()}: output_item.done", opened.aggregate, final)

    def _check_final_output(self, output: Any) -> None:
        if not isinstance(output, list):
            return
        for position, entry in enumerate(output):
            if not isinstance(entry, dict):
                continue
            index = self._index_of_id.get(entry.get("id") or "", position)
            kind = entry.get("type")
            item = self._items.get(index)
            if kind in GUARDED_ITEM_TYPES and item is not None and item.type == kind:
                final = entry.get("input" if kind == "custom_tool_call" else "arguments")
                if isinstance(final, str):
                    self._compare(f"{item.describe()}: final output", item.aggregate, final)
            elif kind == "message" and isinstance(entry.get("content"), list):
                for content_index, part in enumerate(entry["content"]):
                    parts = self._texts.get((index, content_index))
                    if (
                        parts is not None
                        and isinstance(part, dict)
                        and isinstance(part.get("text"), str)
                    ):
                        self._compare(
                            f"text at output_index {index}, content_index {content_index}: "
                            "final output",
                            "".join(parts),
                            part["text"],
                        )

    def _compare(self, what: str, aggregate: str, expected: str) -> None:
        self._comparisons += 1
        if aggregate != expected:
            self._mismatches.append(what)

    # -- deadlines -----------------------------------------------------------------------

    def deadline(self) -> float:
        if self._terminal is not None:
            return self._last_activity + min(self._idle, AFTER_TERMINAL_GRACE)
        deadline = self._last_activity + self._idle
        for item in self._open.values():
            if item.guarded:
                deadline = min(deadline, item.last_progress + self._tool_arguments)
        return deadline

    def on_deadline(self, now: float) -> Verdict:
        if self._terminal is not None:
            # The client has its terminal event; the upstream just never hung up.
            return Verdict(self._terminal, self._error_text)
        idle_deadline = self._last_activity + self._idle
        stalled = min(
            (i for i in self._open.values() if i.guarded),
            key=lambda i: i.last_progress,
            default=None,
        )
        if stalled is not None and stalled.last_progress + self._tool_arguments <= min(
            now, idle_deadline
        ):
            self._stalled = stalled
            word = GUARDED_ITEM_TYPES[stalled.type]
            message = (
                f"upstream stalled for {self._tool_arguments} s while streaming {word} "
                f"of {stalled.describe()}"
            )
            return self._fail(OutcomeKind.STALLED_TOOL_ARGUMENTS, message)
        return self._fail(
            OutcomeKind.STALLED_IDLE, f"upstream sent nothing for {self._idle} s{self._where()}"
        )

    def on_total_timeout(self, now: float) -> Verdict:
        if self._terminal is not None:
            return Verdict(self._terminal, self._error_text)
        return self._fail(
            OutcomeKind.TOTAL_TIMEOUT,
            f"response exceeded proxai's total time limit of {self._total} s{self._where()}",
        )

    def on_end(self, *, broken: bool, detail: str | None, now: float) -> Verdict:
        if self._terminal is not None:
            return Verdict(self._terminal, self._error_text)
        if broken:
            return self._fail(
                OutcomeKind.UPSTREAM_RESET,
                f"upstream connection broke before the response completed{self._where()}"
                + (f": {detail}" if detail else ""),
            )
        return self._fail(
            OutcomeKind.UPSTREAM_EOF,
            f"upstream closed the stream before the response completed{self._where()}",
        )

    def _where(self) -> str:
        """`` while streaming text of message msg_1`` — the most recently opened item."""
        if not self._open:
            return f" (after {self._events} events)"
        item = self._open[max(self._open)]
        self._stalled = self._stalled or item
        what = GUARDED_ITEM_TYPES.get(item.type, "text" if item.type == "message" else "output")
        return f" while streaming {what} of {item.describe()}"

    def _fail(self, kind: OutcomeKind, message: str) -> Verdict:
        if self._last_sequence is not None:
            sequence = self._last_sequence + self._since_sequence + 1
        else:
            sequence = self._events
        closing = synthesized_failure(
            message, sequence_number=sequence, snapshot=self._snapshot, model=self._model
        )
        return Verdict(kind, message, closing)

    # -- reporting -----------------------------------------------------------------------

    def fill(self, outcome: Outcome) -> None:
        outcome.stalled_item = self._stalled.describe() if self._stalled else None
        outcome.usage = self._usage
        outcome.calls = [
            CallSummary(item.type, item.name, item.call_id, len(item.aggregate))
            for _, item in sorted(self._items.items())
            if item.guarded
        ]
        outcome.aggregates_match = None if not self._comparisons else not self._mismatches
        outcome.anomalies.extend(self._anomalies)
        outcome.anomalies.extend(f"aggregate differs: {m}" for m in self._mismatches)

    @property
    def open_items(self) -> list[str]:
        """Descriptions of the items open now (for tests and the live view)."""
        return [item.describe() for _, item in sorted(self._open.items())]

    @property
    def function_calls(self) -> dict[int, dict[str, str | None]]:
        """The seed's ``function_calls[item] = {call_id, name, arguments}``, by output_index."""
        return {
            index: {"call_id": item.call_id, "name": item.name, "arguments": item.aggregate}
            for index, item in sorted(self._items.items())
            if item.type == "function_call"
        }

    @property
    def texts(self) -> dict[tuple[int, int], str]:
        """The seed's ``text[(output_index, content_index)]``."""
        return {key: "".join(parts) for key, parts in self._texts.items()}
