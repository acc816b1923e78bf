"""Responses upstreams (OpenAI, and servers that implement ``/v1/responses``).

Output items map to neutral items:

- a ``message`` item gives one item per content part: ``output_text`` a TEXT
  item, ``refusal`` a REFUSAL item (annotations and logprobs are not carried);
- a ``reasoning`` item is one REASONING item: its ``reasoning_text`` and
  ``reasoning_summary_text`` deltas, parts after the first separated by a blank
  line, and its ``encrypted_content`` (the one of ``output_item.done``) as the
  signature. It opens with its first text; one with neither text nor
  signature (OpenAI's reasoning without ``include``) gives no item;
- ``function_call`` is a TOOL_CALL; ``custom_tool_call`` is a TOOL_CALL too,
  whose free-form input streams as the arguments ``{"input": "..."}`` (see
  :data:`~proxai.translate.ir.CUSTOM_TOOL_PARAMETER`), as a custom tool becomes
  a function of that one parameter on the other APIs;
- hosted tool items (``web_search_call``, ``file_search_call``,
  ``code_interpreter_call``, ``mcp_call``, ``image_generation_call``, ``shell_call``...)
  ran on the upstream's side: they are left out, and noted.

Text a server sends only in ``.done`` events or in the finished item (no
deltas) is given as one delta; a stream that announced no items at all but
ends with a full ``output`` gets its items from that. ``response.completed`` is
``STOP`` (``TOOL_CALLS`` if the response called a function), ``response.incomplete``
``LENGTH`` or ``CONTENT_FILTER`` by ``incomplete_details.reason``; ``error`` and
``response.failed`` are :class:`Failed` (the first of them; an ``error`` event is
followed by ``response.failed``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import orjson

from ...protocols.aggregate import Aggregate
from ...protocols.observer import UNSEEN
from ...protocols.responses.reader import ResponsesReader
from ...protocols.tracking import TrackedItem
from ...wire.json_values import str_or_none
from ...wire.sse import SSEFrame
from ..ir import CUSTOM_TOOL_PARAMETER, Event, FinishReason, ItemKind, Usage
from ._base import DecoderBase, as_int, object_of

__all__ = ["ResponsesDecoder", "responses_usage"]

#: The custom tool call's arguments around its (JSON-escaped) input.
_CUSTOM_OPEN = '{"' + CUSTOM_TOOL_PARAMETER + '":"'
_CUSTOM_CLOSE = '"}'
_PART_KINDS = {"output_text": ItemKind.TEXT, "refusal": ItemKind.REFUSAL}
_INCOMPLETE = {"content_filter": FinishReason.CONTENT_FILTER}
_LIFECYCLE = frozenset({"response.created", "response.queued", "response.in_progress"})


def responses_usage(usage: Any) -> Usage | None:
    """A Responses ``usage`` object in neutral terms."""
    if not isinstance(usage, dict):
        return None
    inputs = usage.get("input_tokens_details")
    outputs = usage.get("output_tokens_details")
    return Usage(
        input_tokens=as_int(usage.get("input_tokens")),
        output_tokens=as_int(usage.get("output_tokens")),
        cached_tokens=as_int(inputs.get("cached_tokens")) if isinstance(inputs, dict) else None,
        reasoning_tokens=(
            as_int(outputs.get("reasoning_tokens")) if isinstance(outputs, dict) else None
        ),
    )


def _escaped(text: str) -> str:
    """``text`` as the inside of a JSON string (escaping works piece by piece)."""
    return orjson.dumps(text).decode()[1:-1]


def _part_text(part: Any) -> str:
    if not isinstance(part, dict):
        return ""
    return str_or_none(part.get("text")) or str_or_none(part.get("refusal")) or ""


def _part_kind(part: Any) -> ItemKind | None:
    """TEXT or REFUSAL for a message content part we carry, else None."""
    return _PART_KINDS.get(str_or_none(part.get("type")) or "") if isinstance(part, dict) else None


def _reasoning_texts(item: dict[str, Any]) -> list[str]:
    """A finished reasoning item's texts: full reasoning if given, else its summary."""
    for field in ("content", "summary"):
        parts = item.get(field)
        if isinstance(parts, list):
            texts = [t for t in (_part_text(p) for p in parts) if t]
            if texts:
                return texts
    return []


#: What a part no delta came for spelled.
_NOTHING = Aggregate()


@attrs.define
class _Item:
    """One output item of the upstream, by its ``output_index``."""

    type: str
    key: int | None = None  # reasoning and calls: their one neutral item
    parts: dict[int, int] = attrs.field(factory=dict)  # message: content_index -> key
    texts: dict[int, Aggregate] = attrs.field(factory=dict)  # key -> the text given so far
    source: tuple[str, int] | None = None  # reasoning: the part its last delta came from
    custom_input: Aggregate = attrs.field(factory=Aggregate)  # custom call: its input so far


class ResponsesDecoder(DecoderBase[ResponsesReader]):
    """A Responses stream or body, as neutral events; see the module docstring."""

    reader_type = ResponsesReader

    def __init__(self) -> None:
        super().__init__()
        self._seen_items = 0  # output items announced (added, or done with no added)
        self._called = False

    # -- streams ------------------------------------------------------------------

    def feed(self, frame: SSEFrame, payload: object = UNSEEN) -> list[Event]:
        data = frame.data
        if data is None or self._ended:
            return []
        payload = self._seen(frame, payload)
        event = object_of(data, payload)
        if event is None:
            return self._not_an_object(frame, data)
        kind = str_or_none(event.get("type")) or frame.event or ""
        response = event.get("response")
        snapshot = response if isinstance(response, dict) else {}
        events = [] if self._started else self._start_from(snapshot)
        if kind in _LIFECYCLE:
            return events
        handler = _HANDLERS.get(kind)
        if handler is not None:
            return events + handler(self, event, snapshot)
        return events

    def close(self) -> list[Event]:
        return []  # a Responses stream says how it ended; without that, it did not

    def decode_body(self, body: dict[str, Any]) -> list[Event]:
        events = self._start_from(body)
        if body.get("error") and body.get("status") in (None, "failed"):
            return events + self._failure(body.get("error"))
        output = body.get("output")
        if isinstance(output, list):
            events += self._whole_items(output)
        status = body.get("status")
        if status == "completed" or status is None:
            return events + self._completed(body)
        if status == "incomplete":
            return events + self._incomplete(body)
        if status == "failed":
            return events + self._failure(body.get("error"))
        return events + self._fail(f"the upstream's response is {status!r}, not finished")

    # -- lifecycle ----------------------------------------------------------------

    def _start_from(self, response: dict[str, Any]) -> list[Event]:
        return self._start(
            str_or_none(response.get("id")),
            str_or_none(response.get("model")),
            as_int(response.get("created_at")),
        )

    def _on_completed(self, event: dict[str, Any], response: dict[str, Any]) -> list[Event]:
        return self._late_output(response) + self._completed(response)

    def _on_incomplete(self, event: dict[str, Any], response: dict[str, Any]) -> list[Event]:
        return self._late_output(response) + self._incomplete(response)

    def _late_output(self, response: dict[str, Any]) -> list[Event]:
        """Items of a final ``output`` from a stream that announced none."""
        output = response.get("output")
        if self._seen_items or not isinstance(output, list):
            return []
        return self._whole_items(output)

    def _completed(self, response: dict[str, Any]) -> list[Event]:
        reason = FinishReason.TOOL_CALLS if self._called else FinishReason.STOP
        return self._finish(reason, responses_usage(response.get("usage")))

    def _incomplete(self, response: dict[str, Any]) -> list[Event]:
        details = response.get("incomplete_details")
        cause = str_or_none(details.get("reason")) if isinstance(details, dict) else None
        reason = _INCOMPLETE.get(cause or "", FinishReason.LENGTH)
        return self._finish(reason, responses_usage(response.get("usage")))

    def _on_failed(self, event: dict[str, Any], response: dict[str, Any]) -> list[Event]:
        return self._failure(response.get("error"))

    def _on_error(self, event: dict[str, Any], response: dict[str, Any]) -> list[Event]:
        nested = event.get("error")  # some streams nest it; the documented event is flat
        error = nested if isinstance(nested, dict) else event
        error_type = str_or_none(nested.get("type")) if isinstance(nested, dict) else None
        return self._failure(error, error_type)

    def _failure(self, error: Any, error_type: str | None = None) -> list[Event]:
        if not isinstance(error, dict):
            return self._fail(str(error) if error else "the upstream's response failed")
        code = error.get("code")
        return self._fail(
            str_or_none(error.get("message")) or "the upstream's response failed",
            code=None if code is None else str(code),
            type=error_type or None,
        )

    # -- items --------------------------------------------------------------------

    def _tracked(self, output_index: int | None, item_id: str | None) -> TrackedItem | None:
        """The reader's item an event names (by ``output_index``, else by item id)."""
        reader = self.reader
        return reader.items.get(reader.index_for(output_index, item_id))

    def _item_of(self, event: dict[str, Any]) -> tuple[int | None, _Item | None]:
        index = as_int(event.get("output_index"))
        tracked = self._tracked(index, str_or_none(event.get("item_id")))
        state = tracked.translation if tracked is not None else None
        return index, state if isinstance(state, _Item) else None

    def _on_item_added(self, event: dict[str, Any], response: dict[str, Any]) -> list[Event]:
        index = as_int(event.get("output_index"))
        item = event.get("item")
        if not isinstance(item, dict):
            return []
        state, events = self._add(self._seen_items if index is None else index, item)
        tracked = self._tracked(index, str_or_none(item.get("id")))
        if tracked is not None:
            tracked.translation = state
        return events

    def _add(self, index: int, item: dict[str, Any]) -> tuple[_Item, list[Event]]:
        """The decoder's state of a new output item, and its events."""
        item_type = str_or_none(item.get("type")) or "unknown"
        state = _Item(item_type)
        self._seen_items += 1
        return state, self._added(state, index, item)

    def _added(self, state: _Item, index: int, item: dict[str, Any]) -> list[Event]:
        item_type = state.type
        if item_type == "reasoning":
            return []  # opened by its first text, or at its end if it has a signature
        if item_type in ("function_call", "custom_tool_call"):
            self._called = True
            call_id = (
                str_or_none(item.get("call_id")) or str_or_none(item.get("id")) or f"call_{index}"
            )
            state.key, events = self._open_item(
                ItemKind.TOOL_CALL, call_id=call_id, name=str_or_none(item.get("name")) or ""
            )
            if item_type == "custom_tool_call":
                events += self._delta(state.key, _CUSTOM_OPEN)
                return events + self._custom_input(state, str_or_none(item.get("input")))
            return events + self._streamed(state, state.key, str_or_none(item.get("arguments")))
        if item_type != "message":
            self._note(f"{item_type} items (run by the upstream) were left out")
        return []

    def _streamed(self, state: _Item, key: int | None, text: str | None) -> list[Event]:
        if not text or key is None:
            return []
        given = state.texts.get(key)
        if given is None:
            given = state.texts[key] = Aggregate()
        given.append(text)
        return self._delta(key, text)

    def _complete(self, state: _Item, key: int | None, final: str | None) -> list[Event]:
        """The rest of ``final`` (the text a ``.done`` event or a finished item holds)
        beyond what the deltas gave; the deltas win where the two disagree."""
        given = state.texts.get(key, _NOTHING) if key is not None else _NOTHING
        return self._rest(
            given,
            final,
            lambda rest: self._streamed(state, key, rest),
            "a final text differed from its deltas; the deltas were kept",
        )

    def _rest(
        self,
        given: Aggregate,
        final: str | None,
        send: Callable[[str], list[Event]],
        differs: str,
    ) -> list[Event]:
        """What ``final`` holds beyond ``given``, sent (``differs`` noted if it does not
        start with it); compared by length first, so an upstream repeating a short
        ``.done`` cannot make each one join everything so far."""
        if not final or given.matches(final):
            return []
        if given.begins(final):
            return send(final[given.length :])
        self._note(differs)
        return []

    def _custom_input(self, state: _Item, text: str | None) -> list[Event]:
        if not text:
            return []
        state.custom_input.append(text)
        return self._delta(state.key, _escaped(text))

    def _open_part(
        self, state: _Item, content_index: int, kind: ItemKind
    ) -> tuple[int | None, list[Event]]:
        key = state.parts.get(content_index)
        if key is not None:
            return (key if self._is_open(key) else None), []
        key, events = self._open_item(kind)
        state.parts[content_index] = key
        return key, events

    def _on_part_added(self, event: dict[str, Any], response: dict[str, Any]) -> list[Event]:
        _, state = self._item_of(event)
        part = event.get("part")
        if state is None or state.type != "message" or not isinstance(part, dict):
            return []
        kind = _part_kind(part)
        if kind is None:
            self._note(f"message parts of type {part.get('type')!r} were left out")
            return []
        key, events = self._open_part(state, as_int(event.get("content_index")) or 0, kind)
        return events + self._streamed(state, key, _part_text(part))

    def _on_text_delta(self, event: dict[str, Any], response: dict[str, Any]) -> list[Event]:
        return self._part_delta(event, ItemKind.TEXT)

    def _on_refusal_delta(self, event: dict[str, Any], response: dict[str, Any]) -> list[Event]:
        return self._part_delta(event, ItemKind.REFUSAL)

    def _part_delta(self, event: dict[str, Any], kind: ItemKind) -> list[Event]:
        _, state = self._item_of(event)
        if state is None or state.type != "message":
            return []
        key, events = self._open_part(state, as_int(event.get("content_index")) or 0, kind)
        return events + self._streamed(state, key, str_or_none(event.get("delta")))

    def _on_part_done(self, event: dict[str, Any], response: dict[str, Any]) -> list[Event]:
        """``output_text.done``, ``refusal.done``, ``content_part.done``: the part's
        whole text, given if no delta brought it; the part closes."""
        _, state = self._item_of(event)
        if state is None or state.type != "message":
            return []
        content_index = as_int(event.get("content_index")) or 0
        key = state.parts.get(content_index)
        text = str_or_none(event.get("text")) or str_or_none(event.get("refusal"))
        if text is None:
            text = _part_text(event.get("part"))
        events: list[Event] = []
        if key is None and text:
            part = event.get("part")
            part_type = str_or_none(part.get("type")) if isinstance(part, dict) else None
            refusal = "refusal" in event or part_type == "refusal"
            kind = ItemKind.REFUSAL if refusal else ItemKind.TEXT
            key, events = self._open_part(state, content_index, kind)
        events += self._complete(state, key, text)
        if event.get("type") == "response.content_part.done":
            events += self._close(key)
        return events

    def _on_reasoning_delta(self, event: dict[str, Any], response: dict[str, Any]) -> list[Event]:
        _, state = self._item_of(event)
        if state is None or state.type != "reasoning":
            return []
        delta = str_or_none(event.get("delta"))
        if not delta:
            return []
        summary = as_int(event.get("summary_index"))
        source = (
            ("summary", summary)
            if summary is not None
            else (
                "content",
                as_int(event.get("content_index")) or 0,
            )
        )
        events = self._open_reasoning(state)
        if state.source is not None and state.source != source:
            events += self._delta(state.key, "\n\n")
        state.source = source
        return events + self._streamed(state, state.key, delta)

    def _open_reasoning(self, state: _Item) -> list[Event]:
        if state.key is not None:
            return []
        state.key, events = self._open_item(ItemKind.REASONING)
        return events

    def _on_arguments_delta(self, event: dict[str, Any], response: dict[str, Any]) -> list[Event]:
        _, state = self._item_of(event)
        if state is None or state.type != "function_call":
            return []
        return self._streamed(state, state.key, str_or_none(event.get("delta")))

    def _on_arguments_done(self, event: dict[str, Any], response: dict[str, Any]) -> list[Event]:
        _, state = self._item_of(event)
        if state is None or state.type != "function_call":
            return []
        return self._complete(state, state.key, str_or_none(event.get("arguments")))

    def _on_input_delta(self, event: dict[str, Any], response: dict[str, Any]) -> list[Event]:
        _, state = self._item_of(event)
        if state is None or state.type != "custom_tool_call":
            return []
        return self._custom_input(state, str_or_none(event.get("delta")))

    def _on_input_done(self, event: dict[str, Any], response: dict[str, Any]) -> list[Event]:
        _, state = self._item_of(event)
        if state is None or state.type != "custom_tool_call":
            return []
        return self._complete_input(state, str_or_none(event.get("input")))

    def _complete_input(self, state: _Item, final: str | None) -> list[Event]:
        return self._rest(
            state.custom_input,
            final,
            lambda rest: self._custom_input(state, rest),
            "a custom tool call's final input differed from its deltas; deltas kept",
        )

    def _on_item_done(self, event: dict[str, Any], response: dict[str, Any]) -> list[Event]:
        index, state = self._item_of(event)
        item = event.get("item")
        item = item if isinstance(item, dict) else {}
        if state is None:
            if index is None or not item:
                return []
            state, events = self._add(index, item)  # a server that sent no output_item.added
        else:
            events = []
        return events + self._settle(state, item)

    def _settle(self, state: _Item, item: dict[str, Any]) -> list[Event]:
        """Fill in what the finished item holds and no delta brought; close it."""
        events: list[Event] = []
        if state.type == "message":
            content = item.get("content")
            for content_index, part in enumerate(content if isinstance(content, list) else []):
                kind = _part_kind(part)
                if kind is not None:
                    key, opened = self._open_part(state, content_index, kind)
                    events += opened + self._complete(state, key, _part_text(part))
            for key in state.parts.values():
                events += self._close(key)
        elif state.type == "reasoning":
            signature = str_or_none(item.get("encrypted_content"))
            if state.key is None:
                text = "\n\n".join(_reasoning_texts(item))
                if not text and not signature:
                    return []  # nothing to carry: no item at all
                events += self._open_reasoning(state)
                events += self._streamed(state, state.key, text)
            events += self._close(state.key, signature)
        elif state.type == "function_call":
            events += self._complete(state, state.key, str_or_none(item.get("arguments")))
            events += self._close(state.key)
        elif state.type == "custom_tool_call":
            events += self._complete_input(state, str_or_none(item.get("input")))
            if self._is_open(state.key):
                events += self._delta(state.key, _CUSTOM_CLOSE)
            events += self._close(state.key)
        return events

    def _whole_items(self, output: list[Any]) -> list[Event]:
        """Every item of a finished ``output`` array, each opened, filled and closed."""
        events: list[Event] = []
        for item in output:
            if isinstance(item, dict):
                state, added = self._add(self._seen_items, item)
                events += added + self._settle(state, item)
        return events


_Handler = Callable[[ResponsesDecoder, dict[str, Any], dict[str, Any]], list[Event]]
_HANDLERS: dict[str, _Handler] = {
    "response.completed": ResponsesDecoder._on_completed,
    "response.incomplete": ResponsesDecoder._on_incomplete,
    "response.failed": ResponsesDecoder._on_failed,
    "error": ResponsesDecoder._on_error,
    "response.output_item.added": ResponsesDecoder._on_item_added,
    "response.output_item.done": ResponsesDecoder._on_item_done,
    "response.content_part.added": ResponsesDecoder._on_part_added,
    "response.content_part.done": ResponsesDecoder._on_part_done,
    "response.output_text.delta": ResponsesDecoder._on_text_delta,
    "response.output_text.done": ResponsesDecoder._on_part_done,
    "response.refusal.delta": ResponsesDecoder._on_refusal_delta,
    "response.refusal.done": ResponsesDecoder._on_part_done,
    "response.reasoning_text.delta": ResponsesDecoder._on_reasoning_delta,
    "response.reasoning_summary_text.delta": ResponsesDecoder._on_reasoning_delta,
    "response.function_call_arguments.delta": ResponsesDecoder._on_arguments_delta,
    "response.function_call_arguments.done": ResponsesDecoder._on_arguments_done,
    "response.custom_tool_call_input.delta": ResponsesDecoder._on_input_delta,
    "response.custom_tool_call_input.done": ResponsesDecoder._on_input_done,
}
