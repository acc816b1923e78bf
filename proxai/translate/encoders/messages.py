"""Neutral events as an Anthropic Messages stream or body (what Claude Code reads).

Every frame has its ``event:`` line (the SDK ignores frames without one).
``message_start`` opens the stream; content blocks follow, indexed 0, 1, 2 in
the order they open and **one open at a time**: an item that opens while
another block is open (a parallel tool call) waits, its deltas kept, and is
replayed when the open block stops. Reasoning becomes a ``thinking`` block
closed by a ``signature_delta`` (Claude Code drops a thinking block without
one), text a ``text`` block, a tool call a ``tool_use`` block with
``input_json_delta`` s. ``message_delta`` (stop reason, usage) and
``message_stop`` end it; a failure is one ``event: error``.

A stream keeps a block's text only while the block waits; an open block's deltas go
straight out. A whole body (a client that asked for no stream) keeps all of it.
"""

from __future__ import annotations

import collections
from typing import Any

import attrs
import orjson

from ...protocols.aggregate import Aggregate
from ...protocols.messages.reader import synthesized_error
from ...wire.sse import Frames, SSEFrame, frame_of, sse_frame
from ..ir import (
    THINKING_SIGNATURE,
    Failed,
    Finished,
    FinishReason,
    ItemDelta,
    ItemDone,
    ItemKind,
    ItemStarted,
    Started,
    TranslationContext,
    escape_tool_id,
)
from ._base import EncoderBase

__all__ = ["MessagesEncoder"]

_STOP_REASONS = {
    FinishReason.STOP: "end_turn",
    FinishReason.STOP_SEQUENCE: "stop_sequence",
    FinishReason.TOOL_CALLS: "tool_use",
    FinishReason.LENGTH: "max_tokens",
    FinishReason.CONTENT_FILTER: "refusal",
}
#: The error types the Messages API streams; others are mapped through ``_ERROR_TYPES``.
_ANTHROPIC_ERROR_TYPES = frozenset(
    {"invalid_request_error", "authentication_error", "permission_error", "not_found_error"}
    | {"request_too_large", "rate_limit_error", "api_error", "overloaded_error"}
    | {"billing_error", "timeout_error"}
)
#: OpenAI error codes and types, as the Anthropic error type a client acts on alike.
_ERROR_TYPES = {
    "rate_limit_exceeded": "rate_limit_error",
    "insufficient_quota": "billing_error",
    "context_length_exceeded": "invalid_request_error",
    "invalid_request_error": "invalid_request_error",
}
#: Each kind's delta type and the field its text goes in.
_DELTA_FIELDS = {
    ItemKind.TEXT: (b"text_delta", b"text"),
    ItemKind.REFUSAL: (b"text_delta", b"text"),
    ItemKind.REASONING: (b"thinking_delta", b"thinking"),
    ItemKind.TOOL_CALL: (b"input_json_delta", b"partial_json"),
}
_PING = SSEFrame(b'event: ping\ndata: {"type":"ping"}\n\n', "ping", b'{"type":"ping"}')


@attrs.define
class _Block:
    """One content block: waiting for its turn, open, or stopped."""

    kind: ItemKind
    call_id: str = ""
    name: str = ""
    #: Its text, while it waits for its turn (and all of it for a whole body).
    spelled: Aggregate = attrs.field(factory=Aggregate)
    index: int | None = None  # set when the block opens
    done: bool = False
    signature: str | None = None
    # Its delta frame around the text, written when it opens (deltas are most of a stream).
    delta_head: bytes = b""

    def text(self) -> str:
        return self.spelled.value()

    def start_json(self) -> dict[str, Any]:
        """The ``content_block`` of its ``content_block_start``."""
        if self.kind is ItemKind.REASONING:
            return {"type": "thinking", "thinking": "", "signature": ""}
        if self.kind is ItemKind.TOOL_CALL:
            return {"type": "tool_use", "id": self.call_id, "name": self.name, "input": {}}
        return {"type": "text", "text": ""}

    def open_at(self, index: int) -> None:
        """Give the block its index, and its delta frame around the text."""
        self.index = index
        delta_type, field = _DELTA_FIELDS[self.kind]
        self.delta_head = b'{"type":"content_block_delta","index":%d,"delta":{"type":"%s","%s":' % (
            index,
            delta_type,
            field,
        )

    def whole_json(self) -> dict[str, Any]:
        """The block as a whole Message body holds it."""
        text = self.text()
        if self.kind is ItemKind.REASONING:
            signature = self.signature or THINKING_SIGNATURE
            return {"type": "thinking", "thinking": text, "signature": signature}
        if self.kind is ItemKind.TOOL_CALL:
            return self.start_json() | {"input": _tool_input(text)}
        return {"type": "text", "text": text}


def _tool_input(arguments: str) -> Any:
    """A call's input object from its argument JSON; ``{}`` when it is none."""
    try:
        value = orjson.loads(arguments) if arguments.strip() else {}
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


class MessagesEncoder(EncoderBase):
    """An Anthropic Messages client's stream or body from neutral events; see the module
    docstring."""

    ID_PREFIX = "msg_"

    def __init__(self, ctx: TranslationContext) -> None:
        super().__init__(ctx)
        self._blocks: dict[int, _Block] = {}  # by the decoder's key
        self._content: list[_Block] = []  # by index, as they opened
        self._open: _Block | None = None
        self._waiting: collections.deque[_Block] = collections.deque()
        self._stop_reason: str | None = None
        self._stop_sequence: str | None = None
        self._error: dict[str, str] | None = None

    def fail(self, message: str, *, code: str | None, try_again: bool) -> Frames:
        """One ``event: error``: ``overloaded_error`` when the client may try again (Claude
        Code retries it), else ``api_error`` or what ``code`` says."""
        if self._finished:
            return []
        return self._fail(message, "overloaded_error" if try_again else _error_type(None, code))

    def ping(self) -> Frames:
        """A ``ping`` event, for the relay to send while the upstream is silent (Anthropic
        sends them, and they keep idle-timing clients and middleboxes patient)."""
        return [_PING] if self._started and not self._finished else []

    def body(self) -> bytes:
        """The whole Message (or, after a failure, the ``{"type": "error"}`` body)."""
        if self._error is not None:
            return orjson.dumps({"type": "error", "error": self._error})
        if not self._started:
            self._start(Started())
        blocks = self._content + list(self._waiting)
        message = self._message_json([b.whole_json() for b in blocks])
        message.update(stop_reason=self._stop_reason or "end_turn")
        message.update(stop_sequence=self._stop_sequence, usage=self._usage_json())
        return orjson.dumps(message)

    # -- lifecycle ---------------------------------------------------------------------

    def _opened(self, event: Started) -> Frames:
        # Input tokens are rarely known yet: message_delta brings the real counts.
        message = self._message_json([])
        message["usage"] = {"input_tokens": 0, "output_tokens": 0}
        return [sse_frame("message_start", {"type": "message_start", "message": message})]

    def _message_json(self, content: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": self._id,
            "type": "message",
            "role": "assistant",
            "model": self._model,
            "content": content,
            "stop_reason": None,
            "stop_sequence": None,
        }

    def _finish(self, event: Finished) -> Frames:
        out = self._stop_open()
        while self._waiting:
            out += self._open_next()
            out += self._stop_open()
        stop_reason = _STOP_REASONS[event.reason]
        called = any(b.kind is ItemKind.TOOL_CALL for b in self._content)
        if stop_reason == "end_turn" and called:
            stop_reason = "tool_use"  # some servers say stop after calling tools
        elif stop_reason == "tool_use" and not called:
            stop_reason = "end_turn"  # no call to run (one that never got a name is dropped)
        self._stop_reason = stop_reason
        if event.reason is FinishReason.STOP_SEQUENCE:
            self._stop_sequence = event.stop_sequence
        self._finished = True
        delta = {"stop_reason": stop_reason, "stop_sequence": self._stop_sequence}
        payload = {"type": "message_delta", "delta": delta, "usage": self._usage_json()}
        out.append(sse_frame("message_delta", payload))
        out.append(sse_frame("message_stop", {"type": "message_stop"}))
        return out

    def _failed(self, event: Failed) -> Frames:
        return self._fail(event.message, _error_type(event.type, event.code))

    def _fail(self, message: str, error_type: str) -> Frames:
        self._finished = True
        self._error = {"type": error_type, "message": message}
        return synthesized_error(message, error_type=error_type)

    def _usage_json(self) -> dict[str, int]:
        """Anthropic counts input without cache reads and writes; OpenAI counts them in."""
        usage = self._usage
        cached = usage.cached_tokens or 0
        created = usage.cache_creation_tokens or 0
        return {
            "input_tokens": max(0, (usage.input_tokens or 0) - cached - created),
            "output_tokens": usage.output_tokens or 0,
            "cache_read_input_tokens": cached,
            "cache_creation_input_tokens": created,
        }

    # -- blocks ------------------------------------------------------------------------

    def _item_started(self, event: ItemStarted) -> Frames:
        if event.key in self._blocks:
            return []
        block = _Block(kind=event.kind)
        if event.kind is ItemKind.TOOL_CALL:
            # Escaped reversibly (``functions.Bash:0`` -> ``proxai-id-functions-2eBash-3a0``):
            # the client's ``tool_result`` next turn goes back under the id the upstream issued.
            call_id = event.call_id
            block.call_id = escape_tool_id(call_id) if call_id else self._ctx.new_id("toolu_")
            block.name = self._ctx.client_tool_name(event.name) or ""
        self._blocks[event.key] = block
        self._waiting.append(block)
        return self._open_next() if self._open is None else []

    def _item_delta(self, event: ItemDelta) -> Frames:
        block = self._blocks.get(event.key)
        if block is None or block.done or not event.text:
            return []
        if block is not self._open:
            block.spelled.append(event.text)
            return []  # kept until its turn comes
        if not self._ctx.stream:
            block.spelled.append(event.text)  # a whole body needs it at the end
        return self._delta(block, event.text)

    def _item_done(self, event: ItemDone) -> Frames:
        block = self._blocks.get(event.key)
        if block is None or block.done:
            return []
        block.done = True
        block.signature = event.signature
        if block is not self._open:
            return []
        out = self._stop_open()
        while self._waiting and self._open is None:
            out += self._open_next()
            if self._open is not None and self._open.done:
                out += self._stop_open()
        return out

    def _open_next(self) -> Frames:
        """Open the next waiting block and replay what it got while it waited."""
        block = self._waiting.popleft()
        block.open_at(len(self._content))
        self._content.append(block)
        self._open = block
        payload = {"type": "content_block_start", "index": block.index}
        out = [sse_frame("content_block_start", payload | {"content_block": block.start_json()})]
        text = block.text()
        if self._ctx.stream:
            block.spelled = Aggregate()  # replayed: a stream needs no more of it
        if text:
            out += self._delta(block, text)
        return out

    def _stop_open(self) -> Frames:
        block = self._open
        if block is None:
            return []
        self._open = None
        out: Frames = []
        if block.kind is ItemKind.REASONING:
            signature = block.signature or THINKING_SIGNATURE
            delta = {"type": "signature_delta", "signature": signature}
            payload = {"type": "content_block_delta", "index": block.index, "delta": delta}
            out.append(sse_frame("content_block_delta", payload))
        payload = {"type": "content_block_stop", "index": block.index}
        out.append(sse_frame("content_block_stop", payload))
        return out

    def _delta(self, block: _Block, text: str) -> Frames:
        if self._quiet:
            return []
        return [frame_of("content_block_delta", block.delta_head + orjson.dumps(text) + b"}}")]


def _error_type(error_type: str | None, code: str | None) -> str:
    """The Anthropic error type for an upstream's error type or code."""
    if error_type in _ANTHROPIC_ERROR_TYPES:
        return error_type
    for key in (code, error_type):
        if key in _ERROR_TYPES:
            return _ERROR_TYPES[key]
    return "api_error"
