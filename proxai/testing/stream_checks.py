"""Oracles for the streams and bodies proxai writes: the official SDKs, and stricter checks.

The ``*_final`` helpers play a stream's bytes to the official SDK's own
accumulator over ``httpx2.MockTransport`` (no sockets) and return the SDK's
final object, or raise what the SDK raises on it: openai-python's
``responses.stream()`` / ``get_final_response()`` and
``chat.completions.stream()`` / ``get_final_completion()``, anthropic's
``messages.stream()`` / ``get_final_message()``. The ``*_body`` helpers parse a
whole (non-streamed) body with the same clients. By default the SDKs run with
strict response validation, so every event and body must fit the SDK's own
types (``strict=False`` for recordings older than the SDK's types: the real API
of 2025 sent no ``cache_write_tokens``, which openai 3.57 requires).

The SDKs forgive things real clients don't, so ``check_*_stream`` add the
rules Codex and Claude Code rely on: frames named after their ``type``,
``sequence_number`` counting from 0, output indexes in the order items were
added, Anthropic blocks indexed in opening order with one open at a time and
``thinking_delta`` only in thinking blocks, and exactly one terminal event,
last. They raise :class:`StreamViolation` and return the events' payloads.

The ``*_final`` and ``*_body`` oracles need the ``dev`` extra (openai, anthropic),
imported when first called; the ``check_*_stream`` checks need nothing but proxai.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

import orjson

from ..wire.sse import SSEFrame, SSEFramer

if TYPE_CHECKING:  # the SDKs are imported by the oracles that use them, not by the checks
    import anthropic
    import httpx2
    import openai
    from anthropic.types import Message
    from openai.types.chat import ChatCompletion
    from openai.types.responses import Response

__all__ = [
    "StreamViolation",
    "chat_body",
    "chat_final",
    "check_chat_stream",
    "check_messages_stream",
    "check_responses_stream",
    "messages_body",
    "messages_final",
    "responses_body",
    "responses_final",
]

_MODEL = "proxai-test"
_BASE = "http://proxai.test"


class StreamViolation(AssertionError):
    """A stream broke a rule a real client relies on."""


Body = bytes | Iterable[bytes]


def _transport(body: Body, content_type: str) -> httpx2.MockTransport:
    """A transport answering any request with ``body`` (sent in the given chunks)."""
    import httpx2

    chunks = [body] if isinstance(body, bytes) else list(body)

    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": content_type}, content=iter(chunks))

    return httpx2.MockTransport(handler)


def _openai(body: Body, strict: bool, content_type: str = "text/event-stream") -> openai.OpenAI:
    import httpx2
    import openai

    return openai.OpenAI(
        api_key="sk-proxai-test",
        base_url=f"{_BASE}/v1",
        max_retries=0,
        http_client=httpx2.Client(transport=_transport(body, content_type)),
        _strict_response_validation=strict,
    )


def _anthropic(
    body: Body, strict: bool, content_type: str = "text/event-stream"
) -> anthropic.Anthropic:
    import anthropic
    import httpx2

    return anthropic.Anthropic(
        api_key="sk-ant-proxai-test",
        base_url=_BASE,
        max_retries=0,
        http_client=httpx2.Client(transport=_transport(body, content_type)),
        _strict_response_validation=strict,
    )


def responses_final(body: Body, *, strict: bool = True) -> Response:
    """The Response openai-python accumulates from a Responses stream.

    ``get_final_response()`` raises on a stream that ends ``response.incomplete``
    (as it does with the real API), so for one that does this returns that
    event's response, parsed by the SDK; any other ending raises as the SDK does
    (``APIError`` on an ``error`` event, ``RuntimeError`` without a terminal)."""
    with (
        _openai(body, strict) as client,
        client.responses.stream(model=_MODEL, input="hi") as stream,
    ):
        last = None
        for event in stream:
            last = event
        if last is not None and last.type == "response.incomplete":
            return last.response
        return stream.get_final_response()


def chat_final(body: Body, *, strict: bool = True) -> ChatCompletion:
    """The completion openai-python accumulates from a Chat Completions stream.

    ``get_final_completion()`` raises on a ``length`` or ``content_filter`` finish
    even after reading the whole stream; for those this returns the completion
    the SDK attached to its error."""
    import openai

    messages: Any = [{"role": "user", "content": "hi"}]
    with (
        _openai(body, strict) as client,
        client.chat.completions.stream(model=_MODEL, messages=messages) as stream,
    ):
        try:
            return stream.get_final_completion()
        except openai.LengthFinishReasonError as exc:
            return exc.completion
        except openai.ContentFilterFinishReasonError as exc:
            if exc.completion is None:
                raise
            return exc.completion


def messages_final(body: Body, *, strict: bool = True) -> Message:
    """The message anthropic's SDK accumulates from a Messages stream."""
    messages: Any = [{"role": "user", "content": "hi"}]
    with (
        _anthropic(body, strict) as client,
        client.messages.stream(model=_MODEL, max_tokens=1024, messages=messages) as stream,
    ):
        return stream.get_final_message()


def responses_body(body: bytes, *, strict: bool = True) -> Response:
    """A whole Responses body, parsed and validated by openai-python."""
    with _openai(body, strict, "application/json") as client:
        return client.responses.create(model=_MODEL, input="hi")


def chat_body(body: bytes, *, strict: bool = True) -> ChatCompletion:
    """A whole Chat Completions body, parsed and validated by openai-python."""
    messages: Any = [{"role": "user", "content": "hi"}]
    with _openai(body, strict, "application/json") as client:
        return client.chat.completions.create(model=_MODEL, messages=messages)


def messages_body(body: bytes, *, strict: bool = True) -> Message:
    """A whole Messages body, parsed and validated by anthropic's SDK."""
    messages: Any = [{"role": "user", "content": "hi"}]
    with _anthropic(body, strict, "application/json") as client:
        return client.messages.create(model=_MODEL, max_tokens=1024, messages=messages)


# -- strict checks ---------------------------------------------------------------------


def _frames(body: bytes) -> Iterator[SSEFrame]:
    framer = SSEFramer()
    for frame in framer.feed(body):
        if frame.data is not None:
            yield frame
    _require(framer.close() == b"", "the stream ends inside an event")


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise StreamViolation(message)


def _payload(frame: SSEFrame) -> dict[str, Any]:
    assert frame.data is not None
    try:
        payload = orjson.loads(frame.data)
    except orjson.JSONDecodeError:
        raise StreamViolation(f"data is not JSON: {frame.data[:80]!r}") from None
    _require(isinstance(payload, dict), f"data is not a JSON object: {frame.data[:80]!r}")
    return dict(payload)


def _named(body: bytes) -> list[dict[str, Any]]:
    """Every event's payload, each checked to have an ``event:`` line equal to its ``type``."""
    events = []
    for frame in _frames(body):
        payload = _payload(frame)
        _require(frame.event is not None, f"{payload.get('type')} frame has no event: line")
        _require(
            frame.event == payload.get("type"),
            f"event: {frame.event} carries type {payload.get('type')}",
        )
        events.append(payload)
    _require(bool(events), "the stream is empty")
    return events


_RESPONSES_TERMINALS = ("response.completed", "response.incomplete", "response.failed")


def check_responses_stream(body: bytes) -> list[dict[str, Any]]:
    """The rules of a Responses stream that Codex and the SDK rely on, checked."""
    events = _named(body)
    _require(events[0]["type"] == "response.created", "the stream does not open with created")
    response_id = events[0]["response"].get("id")
    _require(bool(response_id), "response.created has no response id")
    added: list[dict[str, Any]] = []  # items by output_index
    done: set[int] = set()
    parts: set[tuple[int, int]] = set()  # (output_index, content_index) opened
    for number, event in enumerate(events):
        kind = event["type"]
        _require(event.get("sequence_number") == number, f"{kind}: sequence_number != {number}")
        if "response" in event:
            _require(event["response"].get("id") == response_id, f"{kind}: the response id changed")
        if kind in _RESPONSES_TERMINALS or kind == "error":
            _require(_ending_in_order(events, number), f"{kind} is not where a terminal goes")
            if kind in ("response.completed", "response.incomplete"):
                _require(len(done) == len(added), f"{kind} with items still open")
                ids = [item.get("id") for item in event["response"].get("output", [])]
                _require(ids == [a.get("id") for a in added], f"{kind}: output differs from items")
            continue
        if kind == "response.output_item.added":
            _require(event["output_index"] == len(added), f"{kind}: output_index out of order")
            _require(bool(event["item"].get("id")), f"{kind}: item has no id")
            added.append(event["item"])
            continue
        if "output_index" not in event:
            continue
        index = event["output_index"]
        _require(0 <= index < len(added), f"{kind}: no item at output_index {index}")
        _require(index not in done, f"{kind}: item {index} is already done")
        item = added[index]
        if "item_id" in event:
            _require(event["item_id"] == item["id"], f"{kind}: item_id is not item {index}'s")
        if kind == "response.content_part.added":
            parts.add((index, event["content_index"]))
        elif kind in ("response.output_text.delta", "response.refusal.delta"):
            part = (index, event["content_index"])
            _require(part in parts, f"{kind} before its content_part.added")
        elif kind == "response.output_item.done":
            _require(event["item"].get("id") == item["id"], f"{kind}: item id changed")
            _require(event["item"].get("type") == item["type"], f"{kind}: item type changed")
            done.add(index)
    return events


def _ending_in_order(events: list[dict[str, Any]], number: int) -> bool:
    """A terminal is last; ``error`` is followed only by ``response.failed``."""
    kind = events[number]["type"]
    rest = [event["type"] for event in events[number + 1 :]]
    if kind == "error":
        return rest == ["response.failed"]
    return rest == []


_DELTA_BLOCK_TYPES = {
    "text_delta": "text",
    "thinking_delta": "thinking",
    "signature_delta": "thinking",
    "input_json_delta": "tool_use",
}


def check_messages_stream(body: bytes) -> list[dict[str, Any]]:
    """The rules of a Messages stream that Claude Code relies on, checked: the SDK
    lets a ``thinking_delta`` into a text block, Claude Code does not."""
    events = [e for e in _named(body) if e["type"] != "ping"]
    if events[0]["type"] == "error":
        _require(len(events) == 1, "events after error")
        return events
    _require(events[0]["type"] == "message_start", "the stream does not open with message_start")
    blocks: list[str] = []  # block types by index
    open_index: int | None = None
    signed = False
    stopped = False
    for number, event in enumerate(events[1:], start=1):
        kind = event["type"]
        if kind == "error":
            _require(number == len(events) - 1, "events after error")
            break
        _require(not stopped or kind == "message_stop", f"{kind} after message_delta")
        if kind == "content_block_start":
            _require(open_index is None, f"block {event['index']} opens while {open_index} is open")
            _require(event["index"] == len(blocks), f"block {event['index']} opens out of order")
            open_index = event["index"]
            blocks.append(event["content_block"]["type"])
            signed = False
        elif kind == "content_block_delta":
            _require(event["index"] == open_index, f"delta for block {event['index']}, not open")
            delta_type = event["delta"]["type"]
            expected = _DELTA_BLOCK_TYPES.get(delta_type)
            _require(
                expected == blocks[event["index"]],
                f"{delta_type} into a {blocks[event['index']]} block",
            )
            signed = signed or delta_type == "signature_delta"
        elif kind == "content_block_stop":
            _require(event["index"] == open_index, f"stop for block {event['index']}, not open")
            if blocks[event["index"]] == "thinking":
                _require(signed, "a thinking block stops without a signature_delta")
            open_index = None
        elif kind == "message_delta":
            _require(open_index is None, "message_delta with a block open")
            _require(event["delta"].get("stop_reason") is not None, "message_delta: no stop_reason")
            _require("output_tokens" in event.get("usage", {}), "message_delta: no output_tokens")
            stopped = True
        elif kind == "message_stop":
            _require(stopped, "message_stop without message_delta")
            _require(number == len(events) - 1, "events after message_stop")
        else:
            raise StreamViolation(f"unknown event {kind}")
    else:
        _require(events[-1]["type"] == "message_stop", "the stream does not end in message_stop")
    return events


def check_chat_stream(body: bytes) -> list[dict[str, Any]]:
    """The rules of a Chat Completions stream, checked: data-only frames, one id, each tool
    call's first chunk naming it with the next ``index``, usage only in a last ``choices: []``
    chunk, and ``[DONE]`` once, last. Returns the chunks (the error chunk included)."""
    frames = list(_frames(body))
    _require(bool(frames) and frames[-1].data == b"[DONE]", "the stream does not end in [DONE]")
    chunks = []
    for frame in frames[:-1]:
        _require(frame.event is None, f"a Chat frame has event: {frame.event}")
        _require(frame.data != b"[DONE]", "[DONE] before the end")
        chunks.append(_payload(frame))
    calls = 0
    finished = False
    for number, chunk in enumerate(chunks):
        if "error" in chunk:
            _require(number == len(chunks) - 1, "chunks after the error chunk")
            break
        _require(chunk.get("id") == chunks[0].get("id"), "the completion id changed")
        _require(chunk.get("object") == "chat.completion.chunk", "not a chat.completion.chunk")
        if not chunk["choices"]:
            _require(finished and number == len(chunks) - 1, "a choices: [] chunk before the end")
            _require("usage" in chunk, "a choices: [] chunk without usage")
            continue
        _require(not finished, "a chunk after finish_reason")
        (choice,) = chunk["choices"]
        for call in choice["delta"].get("tool_calls") or []:
            if "id" in call:
                _require(call["index"] == calls, f"tool call {call['index']} opens out of order")
                _require(bool(call.get("function", {}).get("name")), "a tool call without name")
                calls += 1
            else:
                _require(call["index"] < calls, f"arguments for tool call {call['index']} first")
        finished = choice.get("finish_reason") is not None
    return chunks
