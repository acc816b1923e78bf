"""Anthropic Messages upstreams.

Content blocks map to neutral items: ``text`` to TEXT, ``thinking`` to
REASONING (its ``signature_delta`` the item's signature), ``redacted_thinking``
to a REASONING item with no text whose signature is the block's ``data``,
``tool_use`` to a TOOL_CALL (``id`` and ``name``; ``input_json_delta`` fragments
are the arguments, and a call that streamed none gets its start block's
``input``, usually ``{}``). Server-run blocks (``server_tool_use``,
``web_search_tool_result``, ``mcp_tool_use``...) are left out and noted, as are
citations.

Usage is merged from ``message_start`` and ``message_delta`` (the latter is
cumulative); neutral input tokens count cache reads and writes too, as the
other APIs do. ``message_stop`` ends the response with the ``stop_reason`` of
``message_delta``; ``event: error`` is :class:`Failed`; ``ping`` is nothing.
"""

from __future__ import annotations

from typing import Any

import attrs
import orjson

from ...protocols.aggregate import Aggregate
from ...protocols.messages.reader import MessagesReader
from ...protocols.observer import UNSEEN
from ...wire.json_values import str_or_none
from ...wire.sse import SSEFrame
from ..ir import Event, FinishReason, ItemKind, Usage
from ._base import DecoderBase, as_int, object_of

__all__ = ["MessagesDecoder", "messages_usage"]

_STOP_REASONS = {
    "end_turn": FinishReason.STOP,
    "pause_turn": FinishReason.STOP,
    "stop_sequence": FinishReason.STOP_SEQUENCE,
    "tool_use": FinishReason.TOOL_CALLS,
    "max_tokens": FinishReason.LENGTH,
    "model_context_window_exceeded": FinishReason.LENGTH,
    "refusal": FinishReason.CONTENT_FILTER,
}
_KINDS = {
    "text": ItemKind.TEXT,
    "thinking": ItemKind.REASONING,
    "redacted_thinking": ItemKind.REASONING,
    "tool_use": ItemKind.TOOL_CALL,
}


#: The usage counts read (only these are merged: a stream of new keys holds nothing).
_USAGE_KEYS = (
    "input_tokens",
    "output_tokens",
    "cache_read_input_tokens",
    "cache_creation_input_tokens",
)


def messages_usage(usage: dict[str, Any]) -> Usage:
    """Anthropic usage in neutral terms: input counts every prompt token."""
    fresh = as_int(usage.get("input_tokens"))
    read = as_int(usage.get("cache_read_input_tokens"))
    written = as_int(usage.get("cache_creation_input_tokens"))
    total = None if fresh is None else fresh + (read or 0) + (written or 0)
    return Usage(
        input_tokens=total,
        output_tokens=as_int(usage.get("output_tokens")),
        cached_tokens=read,
        cache_creation_tokens=written,
    )


def _stop_reason(reason: str | None) -> FinishReason:
    return _STOP_REASONS.get(reason or "end_turn", FinishReason.STOP)


@attrs.define(eq=False)
class _Block:
    """What the decoder keeps of a content block, on the reader's item for it."""

    key: int | None  # its item (None: a block left out, run by the upstream)
    signature: Aggregate | None = None  # thinking: its signature so far
    initial: str | None = None  # tool_use: its start block's input, until a fragment comes


class MessagesDecoder(DecoderBase[MessagesReader]):
    """A Messages stream or body, as neutral events; see the module docstring."""

    reader_type = MessagesReader

    def __init__(self) -> None:
        super().__init__()
        self._usage: dict[str, Any] = {}
        self._stop_reason: str | None = None
        self._stop_sequence: str | None = None

    # -- streams ------------------------------------------------------------------

    def feed(self, frame: SSEFrame, payload: object = UNSEEN) -> list[Event]:
        data = frame.data
        if data is None or self._ended:
            return []
        payload = self._seen(frame, payload)
        if frame.event == "ping":
            return []
        event = object_of(data, payload)
        if event is None:
            return self._not_an_object(frame, data)
        kind = str_or_none(event.get("type")) or frame.event
        if kind == "content_block_delta":
            return self._block_delta(event)
        if kind == "content_block_start":
            return self._block_start(event)
        if kind == "content_block_stop":
            return self._block_stop(as_int(event.get("index")))
        if kind == "message_start":
            message = event.get("message")
            return self._message_start(message if isinstance(message, dict) else {})
        if kind == "message_delta":
            return self._message_delta(event)
        if kind == "message_stop":
            return self._end()
        if kind == "error":
            return self._error(event.get("error"))
        return []

    def close(self) -> list[Event]:
        return []  # only message_stop says the message is complete

    def decode_body(self, body: dict[str, Any]) -> list[Event]:
        if body.get("type") == "error":
            return self._error(body.get("error"))
        events = self._message_start(body)
        content = body.get("content")
        for index, block in enumerate(content if isinstance(content, list) else []):
            if not isinstance(block, dict):
                continue
            state, opened = self._open_block(index, block)
            events += opened + self._close_block(state)
        self._stop_reason = str_or_none(body.get("stop_reason"))
        self._stop_sequence = str_or_none(body.get("stop_sequence"))
        return events + self._end()

    # -- message ------------------------------------------------------------------

    def _message_start(self, message: dict[str, Any]) -> list[Event]:
        usage = message.get("usage")
        if isinstance(usage, dict):
            self._usage.update((k, usage[k]) for k in _USAGE_KEYS if k in usage)
        return self._start(str_or_none(message.get("id")), str_or_none(message.get("model")))

    def _message_delta(self, event: dict[str, Any]) -> list[Event]:
        delta = event.get("delta")
        if isinstance(delta, dict):
            self._stop_reason = str_or_none(delta.get("stop_reason")) or self._stop_reason
            self._stop_sequence = str_or_none(delta.get("stop_sequence")) or self._stop_sequence
        usage = event.get("usage")
        if isinstance(usage, dict):
            # Cumulative; a field it leaves out (or sends as null) keeps its earlier value.
            self._usage.update((k, usage[k]) for k in _USAGE_KEYS if usage.get(k) is not None)
        return self._start()

    def _end(self) -> list[Event]:
        reason = _stop_reason(self._stop_reason)
        stop_sequence = self._stop_sequence if reason is FinishReason.STOP_SEQUENCE else None
        usage = messages_usage(self._usage) if self._usage else None
        return self._finish(reason, usage, stop_sequence)

    def _error(self, error: Any) -> list[Event]:
        if not isinstance(error, dict):
            return self._fail(str(error or "error"))
        return self._fail(
            str_or_none(error.get("message")) or "the upstream failed",
            type=str_or_none(error.get("type")),
        )

    # -- blocks -------------------------------------------------------------------

    def _block(self, index: int | None) -> _Block | None:
        """The decoder's state of block ``index``, on the reader's item for it."""
        item = self.reader.blocks.get(index) if index is not None else None
        state = item.translation if item is not None else None
        return state if isinstance(state, _Block) else None

    def _block_start(self, event: dict[str, Any]) -> list[Event]:
        index = as_int(event.get("index"))
        block = event.get("content_block")
        if index is None or not isinstance(block, dict):
            self._note("a content_block_start without an index or a block was ignored")
            return []
        state, events = self._open_block(index, block)
        item = self.reader.blocks.get(index)
        if item is not None:
            item.translation = state
        return events

    def _open_block(self, index: int, block: dict[str, Any]) -> tuple[_Block, list[Event]]:
        events = self._start()
        block_type = str_or_none(block.get("type")) or "unknown"
        kind = _KINDS.get(block_type)
        if kind is None:
            self._note(f"{block_type} blocks (run by the upstream) were left out")
            return _Block(None), events
        call_id = name = initial = None
        if kind is ItemKind.TOOL_CALL:
            call_id = str_or_none(block.get("id")) or f"toolu_{index}"
            name = str_or_none(block.get("name")) or ""
            given = block.get("input")  # {} when streamed; the whole input in a body
            initial = orjson.dumps(given).decode() if isinstance(given, dict) and given else ""
        key, opened = self._open_item(kind, call_id=call_id, name=name)
        state = _Block(key, initial=initial)
        events += opened
        if block_type == "redacted_thinking":
            state.signature = Aggregate(str_or_none(block.get("data")) or "")
        elif kind is ItemKind.REASONING:
            state.signature = Aggregate(str_or_none(block.get("signature")) or "")
            events += self._delta(key, str_or_none(block.get("thinking")))
        elif kind is ItemKind.TEXT:
            events += self._delta(key, str_or_none(block.get("text")))
        return state, events

    def _block_delta(self, event: dict[str, Any]) -> list[Event]:
        state = self._block(as_int(event.get("index")))
        delta = event.get("delta")
        if state is not None and state.key is None:
            return []  # a block left out
        if state is None or not self._is_open(state.key) or not isinstance(delta, dict):
            self._note("a content_block_delta for a block that is not open was ignored")
            return []
        key = state.key
        delta_type = delta.get("type")
        if delta_type == "text_delta":
            return self._delta(key, str_or_none(delta.get("text")))
        if delta_type == "thinking_delta":
            return self._delta(key, str_or_none(delta.get("thinking")))
        if delta_type == "input_json_delta":
            fragment = str_or_none(delta.get("partial_json"))
            if fragment:
                state.initial = None
            return self._delta(key, fragment)
        if delta_type == "signature_delta":
            signature = str_or_none(delta.get("signature"))
            if signature:
                if state.signature is None:
                    state.signature = Aggregate()
                state.signature.append(signature)
            return []
        if delta_type == "citations_delta":
            self._note("citations were left out")
        return []

    def _block_stop(self, index: int | None) -> list[Event]:
        state = self._block(index)
        return [] if state is None else self._close_block(state)

    def _close_block(self, state: _Block) -> list[Event]:
        if state.key is None:
            return []
        events = self._delta(state.key, state.initial)
        state.initial = None
        signature, state.signature = state.signature, None
        return events + self._close(state.key, signature.value() if signature else None)
