"""The Anthropic Messages observer: a sans-io state machine over a ``/v1/messages`` stream.

Events: ``message_start`` (the message snapshot), ``content_block_start`` (a
text, thinking, tool_use or server_tool_use block at ``index``),
``content_block_delta`` (``text_delta``, ``input_json_delta``,
``thinking_delta``, ``signature_delta``), ``content_block_stop``,
``message_delta`` (stop reason, usage), ``message_stop`` (terminal), ``ping``
(liveness only) and ``error`` (terminal).

Blocks are tracked by ``index``; a block whose type ends in ``tool_use``
(``tool_use``, ``server_tool_use``, ``mcp_tool_use``) streams its input as
JSON fragments and is guarded by ``tool_arguments`` the way a function call is.
A stream proxai ends itself gets ``event: error`` with
``{"type": "error", "error": {"type": ..., "message": ...}}``, which the
official anthropic SDK raises while iterating: ``overloaded_error`` for a
stall (clients treat it as "try again"), ``api_error`` for an upstream that
went away.
"""

from __future__ import annotations

from typing import Any

import orjson

from ...config import TimeoutsConfig
from ...outcome import TRY_AGAIN, OutcomeKind
from ...wire.sse import SSEFrame
from ..tracking import ITEM_BYTES, StreamLimits, TrackedItem, TrackingObserver

__all__ = ["MessagesObserver", "synthesized_error"]

#: What each block type streams, for messages such as "while streaming input of ...".
_STREAMS = {"text": "text", "thinking": "thinking", "redacted_thinking": "thinking"}
#: Usage keys merged at most (Anthropic sends about six): a stream of ever new ones must
#: not grow the record.
MAX_USAGE_KEYS = 64
#: Stop reasons that mean the answer was cut short.
_INCOMPLETE_REASONS = frozenset({"max_tokens", "model_context_window_exceeded"})


def synthesized_error(message: str, *, error_type: str = "api_error") -> bytes:
    """An ``error`` event in the shape the Messages API streams it."""
    payload = {"type": "error", "error": {"type": error_type, "message": message}}
    return b"event: error\ndata: " + orjson.dumps(payload) + b"\n\n"


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


class MessagesObserver(TrackingObserver):
    """Watches one Anthropic Messages stream; see the module docstring."""

    def __init__(self, timeouts: TimeoutsConfig, limits: StreamLimits | None = None) -> None:
        super().__init__(timeouts, limits)
        self._blocks: dict[int, TrackedItem] = {}  # every block opened (within max_kept)
        self._stop_reason: str | None = None

    def _apply(self, frame: SSEFrame, now: float) -> None:
        assert frame.data is not None
        if frame.event == "ping":
            return
        if frame.event == "error" and not frame.data.lstrip().startswith(b"{"):
            # An error event is terminal whatever its data; the SDK raises on it.
            self._finish(OutcomeKind.FAILED, frame.data.decode("utf-8", "replace")[:200])
            return
        try:
            event = orjson.loads(frame.data)
        except orjson.JSONDecodeError:
            self._note(f"{frame.event or 'untyped'} event: data is not JSON")
            return
        if not isinstance(event, dict):
            self._note(f"{frame.event or 'untyped'} event: data is not a JSON object")
            return
        kind = _str(event.get("type")) or frame.event
        if kind == "content_block_delta":
            self._delta(event, now)
        elif kind == "content_block_start":
            self._start(event, now)
        elif kind == "content_block_stop":
            index = event.get("index")
            if not isinstance(index, int) or self._close_item(index) is None:
                self._note(f"content_block_stop for block {index}, which is not open")
        elif kind == "message_delta":
            delta = event.get("delta")
            if isinstance(delta, dict) and isinstance(delta.get("stop_reason"), str):
                self._stop_reason = delta["stop_reason"]
            self._merge_usage(event.get("usage"))
        elif kind == "message_start":
            message = event.get("message")
            if isinstance(message, dict):
                self._merge_usage(message.get("usage"))
        elif kind == "message_stop":
            incomplete = self._stop_reason in _INCOMPLETE_REASONS
            self._finish(OutcomeKind.INCOMPLETE if incomplete else OutcomeKind.COMPLETED)
        elif kind == "error":
            error = event.get("error")
            message = error.get("message") if isinstance(error, dict) else None
            self._finish(OutcomeKind.FAILED, str(message or error or "error"))

    def _start(self, event: dict[str, Any], now: float) -> None:
        index = event.get("index")
        block = event.get("content_block")
        if not isinstance(index, int) or not isinstance(block, dict):
            self._note("content_block_start without an index and a block")
            return
        block_type = _str(block.get("type")) or "block"
        name = _str(block.get("name"))
        block_id = _str(block.get("id"))
        guarded = block_type.endswith("tool_use")
        label = block_type + (f" {name}" if name else f" block {index}")
        label += f" ({block_id})" if block_id else ""
        item = TrackedItem(
            key=index,
            type=block_type,
            label=label,
            guarded=guarded,
            streams="input" if guarded else _STREAMS.get(block_type, "content"),
            last_progress=now,
            name=name,
            call_id=block_id,
        )
        if self._open_item(item) and self._keep(ITEM_BYTES):
            self._blocks[index] = item

    def _delta(self, event: dict[str, Any], now: float) -> None:
        index = event.get("index")
        item = self._open.get(index) if isinstance(index, int) else None
        delta = event.get("delta")
        if item is None or not isinstance(delta, dict):
            self._note(f"content_block_delta for block {index}, which is not open")
            return
        if item.guarded:
            fragment = delta.get("partial_json")
        else:
            fragment = delta.get("text", delta.get("thinking"))
        if isinstance(fragment, str):
            self._progress(item, fragment, now)

    def _merge_usage(self, usage: Any) -> None:
        """Usage as ``message_start`` and each ``message_delta`` report it, merged in place
        (copying it per event would be quadratic), at most MAX_USAGE_KEYS keys."""
        if not isinstance(usage, dict):
            return
        merged = self._usage
        if merged is None:
            merged = self._usage = {}
        for key, value in usage.items():
            if key in merged or len(merged) < MAX_USAGE_KEYS:
                merged[key] = value

    def _closing(self, kind: OutcomeKind, message: str) -> bytes:
        error_type = "overloaded_error" if kind in TRY_AGAIN else "api_error"
        return synthesized_error(message, error_type=error_type)

    @property
    def blocks(self) -> dict[int, dict[str, str | None]]:
        """Each block's ``{type, name, id, text}`` (text: the aggregated deltas)."""
        return {
            index: {
                "type": item.type,
                "name": item.name,
                "id": item.call_id,
                "text": item.aggregate,
            }
            for index, item in sorted(self._blocks.items())
        }
