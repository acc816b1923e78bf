"""Neutral events as an OpenAI Responses stream or body (what Codex reads).

Every frame is ``event: <type>`` + ``data:`` with the same ``type`` and a
``sequence_number`` counting from 0. The stream opens with ``response.created``
and ``response.in_progress`` and keeps one ``resp_...`` id to its end. Each
item goes ``output_item.added`` -> its deltas -> its ``.done`` events ->
``output_item.done``; ``output_index`` counts items in the order they were
added. Items may be open side by side (parallel calls interleave). The stream
ends in ``response.completed`` or ``response.incomplete`` carrying the whole
output and usage, or in ``error`` + ``response.failed``; never anything after.
"""

from __future__ import annotations

from typing import Any

import attrs
import orjson

from ...protocols.aggregate import Aggregate
from ...protocols.responses.reader import synthesized_error
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
    wrap_reasoning,
)
from ._base import EncoderBase
from .common import unwrap_custom_input

__all__ = ["ResponsesEncoder"]

#: Why a response that stopped short is ``incomplete``.
_INCOMPLETE_REASONS = {
    FinishReason.LENGTH: "max_output_tokens",
    FinishReason.CONTENT_FILTER: "content_filter",
}
#: Response fields proxai owns; echoed request fields never replace them.
_OWN_FIELDS = frozenset(
    {"id", "object", "created_at", "status", "model", "output", "usage", "error"}
    | {"incomplete_details", "completed_at"}
)
#: The delta event of each kind of item.
_DELTA_EVENTS = {
    ItemKind.TEXT: "response.output_text.delta",
    ItemKind.REFUSAL: "response.refusal.delta",
    ItemKind.REASONING: "response.reasoning_text.delta",
    ItemKind.TOOL_CALL: "response.function_call_arguments.delta",
}
_ERROR_CODES = {"rate_limit_error": "rate_limit_exceeded", "overloaded_error": "server_error"}


@attrs.define
class _Item:
    """One output item, as far as it has come."""

    kind: ItemKind
    output_index: int
    id: str
    call_id: str = ""
    name: str = ""
    custom: bool = False  # a Responses ``custom`` tool: its call carries ``input``
    #: Its whole text: ``response.completed`` carries it (joined as it grows).
    spelled: Aggregate = attrs.field(factory=Aggregate)
    done: bool = False
    # Its delta frame, written around the sequence number and the text (deltas are most
    # of a stream, and this is several times faster than a dict through orjson).
    delta_event: str = ""
    delta_head: bytes = b""
    delta_middle: bytes = b""
    delta_tail: bytes = b""

    def text(self) -> str:
        return self.spelled.value()

    def frame_deltas(self) -> None:
        self.delta_event = _DELTA_EVENTS[self.kind]
        self.delta_head = b'{"type":"%s","sequence_number":' % self.delta_event.encode()
        where = b',"item_id":%s,"output_index":%d' % (orjson.dumps(self.id), self.output_index)
        if self.kind is not ItemKind.TOOL_CALL:
            where += b',"content_index":0'
        self.delta_middle = where + b',"delta":'
        self.delta_tail = b',"logprobs":[]}' if self.kind is ItemKind.TEXT else b"}"

    def part(self, text: str) -> dict[str, Any]:
        """The message content part holding ``text``."""
        if self.kind is ItemKind.REFUSAL:
            return {"type": "refusal", "refusal": text}
        return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


class ResponsesEncoder(EncoderBase):
    """A Responses client's stream or body from neutral events; see the module docstring."""

    ID_PREFIX = "resp_"

    def __init__(self, ctx: TranslationContext) -> None:
        super().__init__(ctx)
        self._sequence = 0
        self._created = 0
        self._items: dict[int, _Item] = {}  # by the decoder's key
        self._output: list[_Item] = []  # by output_index
        self._status = "in_progress"
        self._incomplete_reason: str | None = None
        self._error: dict[str, str] | None = None

    def fail(self, message: str, *, code: str | None, try_again: bool) -> Frames:
        """``error`` + ``response.failed``; ``server_error`` (retryable) unless ``code``."""
        if self._finished:
            return []
        out = [] if self._started else self._start(Started())
        return out + self._fail(message, code)

    def body(self) -> bytes:
        """The Response object, as ``POST /v1/responses`` without ``stream`` returns it."""
        if not self._started:
            self._start(Started())
        return orjson.dumps(self._response(full=True))

    # -- lifecycle ---------------------------------------------------------------------

    def _opened(self, event: Started) -> Frames:
        self._created = event.created or self._ctx.now()
        snapshot = self._response(full=False)
        out = self._emit("response.created", {"response": snapshot})
        return out + self._emit("response.in_progress", {"response": snapshot})

    def _finish(self, event: Finished) -> Frames:
        out = [frame for item in self._output if not item.done for frame in self._close(item)]
        self._incomplete_reason = _INCOMPLETE_REASONS.get(event.reason)
        self._status = "incomplete" if self._incomplete_reason else "completed"
        self._finished = True
        kind = f"response.{self._status}"
        return out + self._emit(kind, {"response": self._response(full=True)})

    def _failed(self, event: Failed) -> Frames:
        return self._fail(event.message, event.code or _ERROR_CODES.get(event.type or ""))

    def _fail(self, message: str, code: str | None) -> Frames:
        code = code or "server_error"
        self._status = "failed"
        self._error = {"code": code, "message": message}
        self._finished = True
        if self._quiet:
            return []
        snapshot = self._response(full=True)
        out = synthesized_error(
            message, sequence_number=self._sequence, snapshot=snapshot, model=self._model, code=code
        )
        self._sequence += 2
        return out

    def _response(self, *, full: bool) -> dict[str, Any]:
        """The response object: the echoed request fields, then proxai's own."""
        response: dict[str, Any] = {
            "background": False,
            "instructions": None,
            "max_output_tokens": None,
            "max_tool_calls": None,
            "metadata": {},
            "parallel_tool_calls": True,
            "previous_response_id": None,
            "reasoning": {"effort": None, "summary": None},
            "service_tier": "default",
            "store": False,
            "temperature": None,
            "text": {"format": {"type": "text"}},
            "tool_choice": "auto",
            "tools": [],
            "top_p": None,
            "truncation": "disabled",
            "user": None,
        }
        response.update((k, v) for k, v in self._ctx.echo.items() if k not in _OWN_FIELDS)
        if self._ctx.stored is not None:  # proxai keeps it: retrievable, chainable
            response["store"] = True
            response["previous_response_id"] = self._ctx.stored.previous_response_id
        response.update(
            id=self._id,
            object="response",
            created_at=self._created,
            status=self._status,
            model=self._model,
            output=[self._item_json(item) for item in self._output] if full else [],
            usage=self._usage_json() if full and self._status != "failed" else None,
            error=self._error,
            incomplete_details=(
                {"reason": self._incomplete_reason} if self._incomplete_reason else None
            ),
        )
        if self._status == "completed":
            response["completed_at"] = self._ctx.now()
        return response

    def _usage_json(self) -> dict[str, Any]:
        usage = self._usage
        input_tokens = usage.input_tokens or 0
        output_tokens = usage.output_tokens or 0
        return {
            "input_tokens": input_tokens,
            "input_tokens_details": {
                "cached_tokens": usage.cached_tokens or 0,
                "cache_write_tokens": usage.cache_creation_tokens or 0,
            },
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens or 0},
            "total_tokens": input_tokens + output_tokens,
        }

    # -- items -------------------------------------------------------------------------

    def _item_started(self, event: ItemStarted) -> Frames:
        if event.key in self._items:
            return []
        item = _Item(kind=event.kind, output_index=len(self._output), id="")
        if event.kind is ItemKind.TOOL_CALL:
            item.name = self._ctx.client_tool_name(event.name) or ""
            item.call_id = event.call_id or self._ctx.new_id("call_")
            item.custom = item.name in self._ctx.custom_tools
            item.id = self._ctx.new_id("ctc_" if item.custom else "fc_")
        else:
            item.id = self._ctx.new_id("rs_" if event.kind is ItemKind.REASONING else "msg_")
        item.frame_deltas()
        self._items[event.key] = item
        self._output.append(item)
        out = self._emit(
            "response.output_item.added",
            {"output_index": item.output_index, "item": self._item_json(item)},
        )
        if item.kind in (ItemKind.TEXT, ItemKind.REFUSAL):
            out += self._emit("response.content_part.added", self._part_event(item, part=""))
        return out

    def _item_delta(self, event: ItemDelta) -> Frames:
        item = self._items.get(event.key)
        if item is None or item.done or not event.text:
            return []
        item.spelled.append(event.text)
        if item.custom or self._quiet:
            return []  # the input is unwrapped from the whole arguments at the end
        sequence = self._sequence
        self._sequence += 1
        payload = b"".join(
            (
                item.delta_head,
                str(sequence).encode(),
                item.delta_middle,
                orjson.dumps(event.text),
                item.delta_tail,
            )
        )
        return [frame_of(item.delta_event, payload)]

    def _item_done(self, event: ItemDone) -> Frames:
        item = self._items.get(event.key)
        return self._close(item) if item and not item.done else []

    def _close(self, item: _Item) -> Frames:
        """The ``.done`` events of ``item``, then its ``output_item.done``."""
        where = {"item_id": item.id, "output_index": item.output_index}
        text = item.text()
        out: Frames = []
        if item.kind is ItemKind.TOOL_CALL and item.custom:
            value = unwrap_custom_input(text) if text else ""
            item.spelled = Aggregate(value)
            if value:
                payload = where | {"delta": value}
                out += self._emit("response.custom_tool_call_input.delta", payload)
            out += self._emit("response.custom_tool_call_input.done", where | {"input": value})
        elif item.kind is ItemKind.TOOL_CALL:
            if not text:  # a call without arguments still takes an object
                item.spelled = Aggregate("{}")
                out += self._emit("response.function_call_arguments.delta", where | {"delta": "{}"})
            done = where | {"name": item.name, "arguments": item.text()}
            out += self._emit("response.function_call_arguments.done", done)
        elif item.kind is ItemKind.REASONING:
            payload = where | {"content_index": 0, "text": text}
            out += self._emit("response.reasoning_text.done", payload)
        else:
            if item.kind is ItemKind.TEXT:
                payload = where | {"content_index": 0, "text": text, "logprobs": []}
                out += self._emit("response.output_text.done", payload)
            else:
                payload = where | {"content_index": 0, "refusal": text}
                out += self._emit("response.refusal.done", payload)
            out += self._emit("response.content_part.done", self._part_event(item, part=text))
        item.done = True
        payload = {"output_index": item.output_index, "item": self._item_json(item)}
        return out + self._emit("response.output_item.done", payload)

    def _part_event(self, item: _Item, *, part: str) -> dict[str, Any]:
        return {
            "item_id": item.id,
            "output_index": item.output_index,
            "content_index": 0,
            "part": item.part(part),
        }

    def _item_json(self, item: _Item) -> dict[str, Any]:
        """The item as ``output_item.added`` (nothing yet) or ``.done`` (everything) shows it;
        an item a failure cut short shows what it had, ``incomplete``."""
        fresh = not item.done and not self._finished
        status = "completed" if item.done else ("in_progress" if fresh else "incomplete")
        text = "" if fresh else item.text()
        if item.kind is ItemKind.TOOL_CALL:
            common = {"id": item.id, "status": status, "call_id": item.call_id, "name": item.name}
            if item.custom:
                return {"type": "custom_tool_call", "input": text} | common
            return {"type": "function_call", "arguments": text} | common
        if item.kind is ItemKind.REASONING:
            reasoning: dict[str, Any] = {"id": item.id, "type": "reasoning", "summary": []}
            if not fresh:
                reasoning["content"] = [{"type": "reasoning_text", "text": text}]
                if self._ctx.reasoning_envelope:
                    reasoning["encrypted_content"] = wrap_reasoning(text)
            return reasoning
        return {
            "id": item.id,
            "type": "message",
            "status": status,
            "role": "assistant",
            "content": [] if fresh else [item.part(text)],
        }

    def _emit(self, event_type: str, payload: dict[str, Any]) -> Frames:
        if self._quiet:
            return []
        frame = {"type": event_type, "sequence_number": self._sequence} | payload
        self._sequence += 1
        return [sse_frame(event_type, frame)]
