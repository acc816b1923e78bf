"""What a Responses stream's events say about the response, sans-io: its id, its output
items (from ``response.output_item.done``, since a terminal's ``output`` may be empty:
the seed's is), how it ended and the final response object. A WebSocket's conversation
and the stored responses are built from it.

Each event's JSON is only searched for the few types that matter (a quoted type cannot
occur inside a JSON string, where its quotes are escaped); only the events that match
are parsed, so following a stream costs a substring search per event.
"""

from __future__ import annotations

from typing import Any

import attrs
import orjson

from ...wire.json_body import dumps_exact

__all__ = ["TERMINAL_EVENTS", "ResponseRecord", "is_terminal"]

_CREATED = b'"response.created"'
_ITEM_DONE = b'"response.output_item.done"'
_COMPLETED, _INCOMPLETE, _FAILED = (
    b'"response.completed"',
    b'"response.incomplete"',
    b'"response.failed"',
)
TERMINAL_EVENTS = frozenset({"response.completed", "response.incomplete", "response.failed"})


def is_terminal(data: bytes) -> bool:
    """Whether an event's data may be a terminal event (a cheap test; :class:`ResponseRecord`
    parses the ones that pass it)."""
    # Spelled out, not any() over a generator: this runs on every event of a socket turn.
    return _COMPLETED in data or _INCOMPLETE in data or _FAILED in data


@attrs.define
class ResponseRecord:
    """A response's id, output items and ending, from its events; at most ``max_bytes``
    of items are held (past that, :attr:`overflowed` and none)."""

    max_bytes: int
    response_id: str | None = None
    terminal: str | None = None
    items: list[bytes] = attrs.field(factory=list)
    size: int = 0
    overflowed: bool = False
    #: The terminal event's ``response`` object, as JSON of its exact size (the parsed
    #: object is not kept: it would be a second copy of the whole output while storing).
    response: bytes | None = None
    #: Its ``status``, and whether its ``output`` had any item (the seed's has none).
    status: str | None = None
    has_output: bool = False
    #: Keep only the output items' ids (:attr:`item_ids`), not their bytes: what
    #: claiming an upstream's ids needs, for no more memory than the ids.
    ids_only: bool = False
    item_ids: list[str] = attrs.field(factory=list)

    def event(self, data: bytes) -> None:
        if _ITEM_DONE in data:
            event = _event(data, "response.output_item.done")
            item = event.get("item") if event is not None else None
            if isinstance(item, dict):
                self._keep(item)
            return
        if self.response_id is None and _CREATED in data:
            event = _event(data, "response.created")
            if event is not None:
                self._note_response(event)
            return
        if is_terminal(data):
            event = _event(data, None)
            if event is not None and event.get("type") in TERMINAL_EVENTS:
                self.terminal = event["type"]
                self._note_response(event)
                response = event.get("response")
                if isinstance(response, dict):
                    self._hold_response(response, dumps_exact(response))

    def whole(self, body: bytes) -> None:
        """A whole (non-streamed) response object, as a ``POST`` without ``stream``
        answers: its ``output`` are the items."""
        try:
            response = orjson.loads(body)
        except orjson.JSONDecodeError:
            return
        if not isinstance(response, dict) or response.get("object") != "response":
            return
        output = response.get("output")
        for item in output if isinstance(output, list) else ():
            if isinstance(item, dict):
                self._keep(item)
        status = response.get("status")
        self.terminal = {
            "completed": "response.completed",
            "incomplete": "response.incomplete",
        }.get(status if isinstance(status, str) else "", "response.failed")
        self._hold_response(response, body)  # the client's bytes: no copy of them
        self._note_response({"response": response})

    def _hold_response(self, response: dict[str, Any], raw: bytes) -> None:
        if self.ids_only:
            return  # claiming needs the ids, not the response
        self.response = raw
        self.status = str(response.get("status"))
        self.has_output = bool(response.get("output"))

    def _keep(self, item: dict[str, Any]) -> None:
        """Keep an output item, up to ``max_bytes`` of them (past it: none, overflowed)."""
        if self.overflowed:
            return
        if self.ids_only:
            item_id = item.get("id")
            if isinstance(item_id, str) and item_id:
                self.size += len(item_id)
                if self.size > self.max_bytes:
                    self.overflowed, self.item_ids = True, []
                else:
                    self.item_ids.append(item_id)
            return
        raw = dumps_exact(item)  # held until stored or for a socket's next turn
        self.size += len(raw)
        if self.size > self.max_bytes:
            self.overflowed, self.items = True, []
        else:
            self.items.append(raw)

    def _note_response(self, event: dict[str, Any]) -> None:
        response = event.get("response")
        if isinstance(response, dict) and isinstance(response.get("id"), str):
            self.response_id = response["id"]


def _event(data: bytes, kind: str | None) -> dict[str, Any] | None:
    try:
        event = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(event, dict) or (kind is not None and event.get("type") != kind):
        return None
    return event
