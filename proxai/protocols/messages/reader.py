"""The Anthropic Messages reader: each ``/v1/messages`` stream event parsed once.

Events: ``message_start`` (the message snapshot), ``content_block_start`` (a
text, thinking, tool_use or server_tool_use block at ``index``),
``content_block_delta`` (``text_delta``, ``input_json_delta``,
``thinking_delta``, ``signature_delta``), ``content_block_stop``,
``message_delta`` (stop reason, usage), ``message_stop`` (terminal), ``ping``
(liveness only) and ``error`` (terminal).

Blocks are reported by ``index``; a block whose type ends in ``tool_use``
(``tool_use``, ``server_tool_use``, ``mcp_tool_use``) streams its input as
JSON fragments and is guarded by ``tool_arguments`` the way a function call is.
A stream proxai ends itself gets ``event: error`` with
``{"type": "error", "error": {"type": ..., "message": ...}}``, which the
official anthropic SDK raises while iterating: ``overloaded_error`` for a
stall (clients treat it as "try again"), ``api_error`` for an upstream that
went away.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from ...outcome import TRY_AGAIN, OutcomeKind, Usage
from ...wire.json_values import count_or_none, str_or_none
from ...wire.sse import Frames, sse_frame
from ..observer import UNREAD
from ..tracking import TrackedItem, TrackingObserver

__all__ = ["MAX_USAGE_KEYS", "MessagesReader", "synthesized_error"]

#: What each block type streams, for messages such as "while streaming input of ...".
_STREAMS = {"text": "text", "thinking": "thinking", "redacted_thinking": "thinking"}
#: Usage keys merged at most (Anthropic sends about six): a stream of ever new ones must
#: not grow the record.
MAX_USAGE_KEYS = 64
#: Stop reasons that mean the answer was cut short.
_INCOMPLETE_REASONS = frozenset({"max_tokens", "model_context_window_exceeded"})


def synthesized_error(message: str, *, error_type: str = "api_error") -> Frames:
    """An ``error`` event in the shape the Messages API streams it."""
    payload = {"type": "error", "error": {"type": error_type, "message": message}}
    return [sse_frame("error", payload)]


def messages_usage(usage: Mapping[str, Any]) -> Usage:
    """Messages' ``usage`` in proxai's one shape: Anthropic counts the input tokens read
    from and written to its cache apart from ``input_tokens``; they are added in, as
    OpenAI's APIs (and OpenTelemetry's GenAI conventions) count them."""
    given = count_or_none(usage.get("input_tokens"))
    read = count_or_none(usage.get("cache_read_input_tokens"))
    write = count_or_none(usage.get("cache_creation_input_tokens"))
    if read is not None or write is not None:
        given = (given or 0) + (read or 0) + (write or 0)
    return Usage(
        input_tokens=given,
        cached_tokens=read,
        cache_write_tokens=write,
        output_tokens=count_or_none(usage.get("output_tokens")),
    )


class MessagesReader:
    """Reads one Anthropic Messages stream for its observer; see the module docstring."""

    __slots__ = (
        "_open",
        "_stop_reason",
        "_tracker",
        "blocks",
    )  # one reader per stream: no instance dict

    def __init__(self, tracker: TrackingObserver) -> None:
        self._tracker = tracker
        self._open = tracker.open_by_key  # the items open now (the observer's)
        self.blocks: dict[int, TrackedItem] = {}  # every block opened (within max_kept)
        self._stop_reason: str | None = None

    def read(self, event: str | None, data: bytes) -> object:
        tracker = self._tracker
        if event == "ping":
            return UNREAD
        if event == "error" and not data.lstrip().startswith(b"{"):
            # An error event is terminal whatever its data; the SDK raises on it.
            tracker.finish(OutcomeKind.FAILED, data.decode("utf-8", "replace")[:200])
            return None
        try:
            payload = orjson.loads(data)
        except orjson.JSONDecodeError:
            tracker.note(f"{event or 'untyped'} event: data is not JSON")
            return None
        if not isinstance(payload, dict):
            tracker.note(f"{event or 'untyped'} event: data is not a JSON object")
            return None
        kind = str_or_none(payload.get("type")) or event
        if kind == "content_block_delta":
            self._delta(payload)
        elif kind == "content_block_start":
            self._start(payload)
        elif kind == "content_block_stop":
            index = payload.get("index")
            if not isinstance(index, int) or tracker.close_item(index) is None:
                tracker.note(f"content_block_stop for block {index}, which is not open")
        elif kind == "message_delta":
            delta = payload.get("delta")
            if isinstance(delta, dict) and isinstance(delta.get("stop_reason"), str):
                self._stop_reason = delta["stop_reason"]
                tracker.stopped_because(self._stop_reason)
            self._merge_usage(payload.get("usage"))
        elif kind == "message_start":
            message = payload.get("message")
            if isinstance(message, dict):
                tracker.named(message.get("id"), message.get("model"))
                self._merge_usage(message.get("usage"))
        elif kind == "message_stop":
            incomplete = self._stop_reason in _INCOMPLETE_REASONS
            tracker.finish(OutcomeKind.INCOMPLETE if incomplete else OutcomeKind.COMPLETED)
        elif kind == "error":
            error = payload.get("error")
            message = error.get("message") if isinstance(error, dict) else None
            tracker.finish(OutcomeKind.FAILED, str(message or error or "error"))
        return payload

    def _start(self, event: dict[str, Any]) -> None:
        tracker = self._tracker
        index = event.get("index")
        block = event.get("content_block")
        if not isinstance(index, int) or not isinstance(block, dict):
            tracker.note("content_block_start without an index and a block")
            return
        block_type = str_or_none(block.get("type")) or "block"
        name = str_or_none(block.get("name"))
        block_id = str_or_none(block.get("id"))
        guarded = block_type.endswith("tool_use")
        label = block_type + (f" {name}" if name else f" block {index}")
        label += f" ({block_id})" if block_id else ""
        item = TrackedItem(
            key=index,
            type=block_type,
            label=label,
            guarded=guarded,
            streams="input" if guarded else _STREAMS.get(block_type, "content"),
            last_progress=tracker.now,
            name=name,
            call_id=block_id,
        )
        if tracker.open_item(item) and tracker.keep_item():
            self.blocks[index] = item

    def _delta(self, event: dict[str, Any]) -> None:
        tracker = self._tracker
        index = event.get("index")
        item = self._open.get(index) if isinstance(index, int) else None
        delta = event.get("delta")
        if item is None or not isinstance(delta, dict):
            tracker.note(f"content_block_delta for block {index}, which is not open")
            return
        if item.guarded:
            fragment = delta.get("partial_json")
        else:
            fragment = delta.get("text", delta.get("thinking"))
        if isinstance(fragment, str):
            tracker.progress(item, fragment)

    def _merge_usage(self, usage: Any) -> None:
        """Usage as ``message_start`` and each ``message_delta`` report it, merged in place
        (copying it per event would be quadratic), at most MAX_USAGE_KEYS keys."""
        if not isinstance(usage, dict):
            return
        tracker = self._tracker
        merged = tracker.usage
        if merged is None:
            merged = tracker.usage = {}
        for key, value in usage.items():
            if key in merged or len(merged) < MAX_USAGE_KEYS:
                merged[key] = value

    def usage_of(self, usage: Mapping[str, Any]) -> Usage:
        return messages_usage(usage)

    def closing(self, kind: OutcomeKind, message: str) -> Frames:
        error_type = "overloaded_error" if kind in TRY_AGAIN else "api_error"
        return synthesized_error(message, error_type=error_type)
