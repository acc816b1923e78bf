"""Neutral events as an OpenAI Chat Completions stream or body.

A stream is ``data: <chat.completion.chunk>`` frames with one choice (index
0): the first says ``role: assistant``; text, reasoning and refusal go in
``delta.content``, ``delta.reasoning_content`` and ``delta.refusal``; each
tool call gets its own ``index`` (0, 1, 2 in the order calls open) with its id
and name in its first chunk and only argument text after. The finish reason
comes in a chunk of its own, then usage in a ``choices: []`` chunk when the
client asked for it, then ``data: [DONE]``. A failure is an error chunk and
``[DONE]``, as proxai's Chat observer ends a broken stream.

A stream keeps none of its text: each delta goes straight out. Only a whole body
(a client that asked for no stream) keeps it, for :meth:`ChatEncoder.body`.
"""

from __future__ import annotations

from typing import Any

import attrs
import orjson

from ...protocols.aggregate import Aggregate
from ...protocols.chat.reader import DONE_FRAME, synthesized_error
from ...wire.sse import Frames, frame_of, sse_frame
from ..ir import (
    Failed,
    Finished,
    FinishReason,
    ItemDelta,
    ItemDone,
    ItemKind,
    ItemStarted,
    Started,
    TranslationContext,
)
from ._base import EncoderBase

__all__ = ["ChatEncoder"]

_CHUNK_TAIL = b',"logprobs":null,"finish_reason":null}]}'
_FINISH_REASONS = {
    FinishReason.STOP: "stop",
    FinishReason.STOP_SEQUENCE: "stop",
    FinishReason.TOOL_CALLS: "tool_calls",
    FinishReason.LENGTH: "length",
    FinishReason.CONTENT_FILTER: "content_filter",
}
#: The ``delta`` field each kind of text streams in.
_DELTA_FIELDS = {
    ItemKind.TEXT: "content",
    ItemKind.REASONING: "reasoning_content",
    ItemKind.REFUSAL: "refusal",
}


@attrs.define
class _Item:
    kind: ItemKind
    #: Its text, kept only for a whole body (a stream's deltas go straight out).
    spelled: Aggregate | None = None
    has_text: bool = False
    index: int = 0  # TOOL_CALL: the call's ``index`` in ``delta.tool_calls``
    call_id: str = ""
    name: str = ""
    # Its ``delta`` object around the text, written once (deltas are most of a stream).
    delta_head: bytes = b""
    delta_tail: bytes = b""


def _text(item: _Item) -> str:
    return item.spelled.value() if item.spelled is not None else ""


class ChatEncoder(EncoderBase):
    """A Chat Completions client's stream or body from neutral events; see the module docstring."""

    ID_PREFIX = "chatcmpl-"

    def __init__(self, ctx: TranslationContext) -> None:
        super().__init__(ctx)
        self._created = 0
        self._items: dict[int, _Item] = {}
        self._calls: list[_Item] = []
        self._chunk_fields: dict[str, Any] = {}
        self._chunk_head = b""  # a chunk up to its delta
        self._finish_reason: str | None = None
        self._error: dict[str, Any] | None = None

    def fail(self, message: str, *, code: str | None, try_again: bool) -> Frames:
        """An error chunk and ``[DONE]``; ``server_error`` (retryable) unless ``code``."""
        if self._finished:
            return []
        return self._fail(message, code)

    def body(self) -> bytes:
        """The ``chat.completion`` (or, after a failure, the ``{"error": ...}`` body)."""
        if self._error is not None:
            return orjson.dumps({"error": self._error})
        if not self._started:
            self._start(Started())
        message: dict[str, Any] = {
            "role": "assistant",
            "content": self._joined(ItemKind.TEXT),
            "refusal": self._joined(ItemKind.REFUSAL),
        }
        reasoning = self._joined(ItemKind.REASONING)
        if reasoning is not None:
            message["reasoning_content"] = reasoning
        if self._calls:
            message["tool_calls"] = [
                {
                    "id": call.call_id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": _text(call) or "{}"},
                }
                for call in self._calls
            ]
        completion = {
            "id": self._id,
            "object": "chat.completion",
            "created": self._created,
            "model": self._model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": self._finish_reason or "stop",
                }
            ],
            "usage": self._usage_json(),
        }
        return orjson.dumps(completion)

    def _joined(self, kind: ItemKind) -> str | None:
        items = [item for item in self._items.values() if item.kind is kind]
        return "".join(_text(item) for item in items) if items else None

    def _opened(self, event: Started) -> Frames:
        self._created = event.created or self._ctx.now()
        self._chunk_fields = {
            "id": self._id,
            "object": "chat.completion.chunk",
            "created": self._created,
            "model": self._model,
            "system_fingerprint": None,
        }
        fields = orjson.dumps(self._chunk_fields)[:-1]  # without its closing brace
        self._chunk_head = fields + b',"choices":[{"index":0,"delta":'
        return self._chunk({"role": "assistant", "content": ""})

    def _item_started(self, event: ItemStarted) -> Frames:
        if event.key in self._items:
            return []
        item = _Item(kind=event.kind, spelled=None if self._ctx.stream else Aggregate())
        self._items[event.key] = item
        if event.kind is not ItemKind.TOOL_CALL:
            item.delta_head = b'{"%s":' % _DELTA_FIELDS[event.kind].encode()
            item.delta_tail = b"}"
            return []
        item.index = len(self._calls)
        item.call_id = event.call_id or self._ctx.new_id("call_")
        item.name = self._ctx.client_tool_name(event.name) or ""
        item.delta_head = b'{"tool_calls":[{"index":%d,"function":{"arguments":' % item.index
        item.delta_tail = b"}}]}"
        self._calls.append(item)
        function = {"name": item.name, "arguments": ""}
        call = {"index": item.index, "id": item.call_id, "type": "function", "function": function}
        return self._chunk({"tool_calls": [call]})

    def _item_delta(self, event: ItemDelta) -> Frames:
        item = self._items.get(event.key)
        if item is None or not event.text:
            return []
        self._keep(item, event.text)
        return self._delta(item, event.text)

    def _item_done(self, event: ItemDone) -> Frames:
        item = self._items.get(event.key)
        if item is None or item.kind is not ItemKind.TOOL_CALL or item.has_text:
            return []
        self._keep(item, "{}")  # a call without arguments still takes an object
        return self._delta(item, "{}")

    def _keep(self, item: _Item, text: str) -> None:
        item.has_text = True
        if item.spelled is not None:
            item.spelled.append(text)

    def _delta(self, item: _Item, text: str) -> Frames:
        if self._quiet:
            return []
        payload = b"".join(
            (self._chunk_head, item.delta_head, orjson.dumps(text), item.delta_tail, _CHUNK_TAIL)
        )
        return [frame_of(None, payload)]

    def _finish(self, event: Finished) -> Frames:
        finish_reason = _FINISH_REASONS[event.reason]
        if finish_reason == "stop" and self._calls:
            finish_reason = "tool_calls"  # some servers say stop after calling tools
        self._finish_reason = finish_reason
        self._finished = True
        if self._quiet:
            return []
        out = self._chunk({}, finish_reason=finish_reason)
        if self._ctx.include_usage:
            out.append(sse_frame(None, self._chunk_json([]) | {"usage": self._usage_json()}))
        out.append(DONE_FRAME)
        return out

    def _failed(self, event: Failed) -> Frames:
        return self._fail(event.message, event.code)

    def _fail(self, message: str, code: str | None) -> Frames:
        self._finished = True
        code = code or "server_error"
        self._error = {"message": message, "type": "server_error", "param": None, "code": code}
        return synthesized_error(message, code=code)

    def _usage_json(self) -> dict[str, Any]:
        usage = self._usage
        prompt = usage.input_tokens or 0
        completion = usage.output_tokens or 0
        prompt_details = {"cached_tokens": usage.cached_tokens or 0}
        if usage.cache_creation_tokens is not None:
            prompt_details["cache_write_tokens"] = usage.cache_creation_tokens
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": prompt_details,
            "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens or 0},
        }

    def _chunk(self, delta: dict[str, Any], *, finish_reason: str | None = None) -> Frames:
        if self._quiet:
            return []
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return [sse_frame(None, self._chunk_json([choice]))]

    def _chunk_json(self, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return self._chunk_fields | {"choices": choices}
