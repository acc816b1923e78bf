"""Whole, well-formed upstream streams for the stateful machine, one event at a time.

Each :class:`Event` is one SSE event's bytes with what it means to the upstream's
observer: the guarded tool call it opens, feeds or ends (``tool_arguments`` runs per
open call) and whether it is the stream's terminal event. The machine sends them in
order, whole or split, so it knows at every instant which deadlines proxai keeps.
Every stream passes the official SDK's accumulator and proxai's strict checks
(``tests/faults/test_stateful.py::test_the_machines_streams_are_well_formed``).
"""

from __future__ import annotations

import json
from typing import Any

import attrs

from proxai.protocols.table import WireApi
from proxai.testing import chat_chunk, sse_event


@attrs.frozen
class Event:
    data: bytes
    opens: str | None = None  # a guarded call opens (its tool_arguments deadline starts)
    feeds: str | None = None  # an argument delta of that call (resets its deadline)
    ends: tuple[str, ...] = ()  # guarded calls this event stops guarding
    terminal: bool = False


MODEL = "m"
ARGS = ('{"city":', '"Paris"}')


# --- Responses ------------------------------------------------------------------------------


def _response(status: str, output: list[dict[str, Any]]) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": "resp_sm",
        "object": "response",
        "created_at": 1767225600,
        "status": status,
        "model": MODEL,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
    }
    if status == "completed":
        body["usage"] = {
            "input_tokens": 3,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": 5,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 8,
        }
    return body


def _message(status: str, text: str) -> dict[str, Any]:
    content = [{"type": "output_text", "text": text, "annotations": []}] if text else []
    return {
        "type": "message",
        "id": "msg_sm",
        "role": "assistant",
        "status": status,
        "content": content,
    }


def _call(n: int, status: str, arguments: str) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": f"fc_{n}",
        "call_id": f"call_{n}",
        "name": "get_weather",
        "arguments": arguments,
        "status": status,
    }


def responses_stream(tools: int) -> list[Event]:
    raw: list[tuple[dict[str, Any], dict[str, Any]]] = []  # (payload, Event fields)
    text = "Hello"
    part = {"type": "output_text", "text": "", "annotations": []}
    msg = {"output_index": 0, "item_id": "msg_sm", "content_index": 0}
    raw += [
        ({"type": "response.created", "response": _response("in_progress", [])}, {}),
        (
            {
                "type": "response.output_item.added",
                "output_index": 0,
                "item": _message("in_progress", ""),
            },
            {},
        ),
        ({"type": "response.content_part.added", **msg, "part": part}, {}),
        ({"type": "response.output_text.delta", **msg, "delta": "Hel", "logprobs": []}, {}),
        ({"type": "response.output_text.delta", **msg, "delta": "lo", "logprobs": []}, {}),
        ({"type": "response.output_text.done", **msg, "text": text, "logprobs": []}, {}),
        (
            {
                "type": "response.content_part.done",
                **msg,
                "part": {**part, "text": text},
            },
            {},
        ),
        (
            {
                "type": "response.output_item.done",
                "output_index": 0,
                "item": _message("completed", text),
            },
            {},
        ),
    ]
    output = [_message("completed", text)]
    for n in range(1, tools + 1):
        ident = f"fc_{n}"
        where = {"output_index": n, "item_id": ident}
        raw.append(
            (
                {
                    "type": "response.output_item.added",
                    "output_index": n,
                    "item": _call(n, "in_progress", ""),
                },
                {"opens": ident},
            )
        )
        for delta in ARGS:
            raw.append(
                (
                    {"type": "response.function_call_arguments.delta", **where, "delta": delta},
                    {"feeds": ident},
                )
            )
        whole = "".join(ARGS)
        raw.append(
            (
                {
                    "type": "response.function_call_arguments.done",
                    **where,
                    "arguments": whole,
                    "name": "get_weather",
                },
                {"ends": (ident,)},
            )
        )
        raw.append(
            (
                {
                    "type": "response.output_item.done",
                    "output_index": n,
                    "item": _call(n, "completed", whole),
                },
                {},
            )
        )
        output.append(_call(n, "completed", whole))
    raw.append(
        (
            {"type": "response.completed", "response": _response("completed", output)},
            {"terminal": True},
        )
    )
    return [
        Event(sse_event({**payload, "sequence_number": i}), **fields)
        for i, (payload, fields) in enumerate(raw)
    ]


# --- Chat Completions -----------------------------------------------------------------------


def _chunk(delta: dict[str, Any] | None, finish: str | None = None, **extra: Any) -> bytes:
    return chat_chunk(delta, finish, model=MODEL, id="chatcmpl-sm", **extra)


def chat_stream(tools: int) -> list[Event]:
    events = [
        Event(_chunk({"role": "assistant", "content": ""})),
        Event(_chunk({"content": "Hel"})),
        Event(_chunk({"content": "lo"})),
    ]
    for n in range(1, tools + 1):
        ident = f"call_{n}"
        opening = {
            "index": n - 1,
            "id": ident,
            "type": "function",
            "function": {"name": "get_weather", "arguments": ""},
        }
        # The next call's first fragment ends the guard of the one before (Chat streams a
        # choice's calls one after another).
        before = (f"call_{n - 1}",) if n > 1 else ()
        events.append(Event(_chunk({"tool_calls": [opening]}), opens=ident, ends=before))
        for delta in ARGS:
            fragment = {"index": n - 1, "function": {"arguments": delta}}
            events.append(Event(_chunk({"tool_calls": [fragment]}), feeds=ident))
    last = (f"call_{tools}",) if tools else ()
    usage = {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}
    events += [
        Event(_chunk({}, finish="tool_calls" if tools else "stop"), ends=last),
        Event(_chunk(None, usage=usage)),
        Event(b"data: [DONE]\n\n", terminal=True),
    ]
    return events


# --- Messages (Anthropic's) -----------------------------------------------------------------


def _ant(kind: str, **fields: Any) -> bytes:
    payload = json.dumps({"type": kind, **fields}, ensure_ascii=False, separators=(",", ":"))
    return f"event: {kind}\ndata: {payload}\n\n".encode()


def messages_stream(tools: int) -> list[Event]:
    start = {
        "id": "msg_sm",
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": MODEL,
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 3, "output_tokens": 1},
    }
    events = [
        Event(_ant("message_start", message=start)),
        Event(_ant("content_block_start", index=0, content_block={"type": "text", "text": ""})),
        Event(_ant("content_block_delta", index=0, delta={"type": "text_delta", "text": "Hel"})),
        Event(_ant("ping")),
        Event(_ant("content_block_delta", index=0, delta={"type": "text_delta", "text": "lo"})),
        Event(_ant("content_block_stop", index=0)),
    ]
    for n in range(1, tools + 1):
        ident = f"toolu_{n}"
        block = {"type": "tool_use", "id": ident, "name": "get_weather", "input": {}}
        events.append(Event(_ant("content_block_start", index=n, content_block=block), opens=ident))
        for delta in ARGS:
            piece = {"type": "input_json_delta", "partial_json": delta}
            events.append(Event(_ant("content_block_delta", index=n, delta=piece), feeds=ident))
        events.append(Event(_ant("content_block_stop", index=n), ends=(ident,)))
    events += [
        Event(
            _ant(
                "message_delta",
                delta={"stop_reason": "tool_use" if tools else "end_turn", "stop_sequence": None},
                usage={"output_tokens": 5},
            )
        ),
        Event(_ant("message_stop"), terminal=True),
    ]
    return events


STREAMS = {
    WireApi.RESPONSES: responses_stream,
    WireApi.CHAT: chat_stream,
    WireApi.MESSAGES: messages_stream,
}


# --- what a client sends ------------------------------------------------------------------

_TOOLS = {
    WireApi.RESPONSES: [
        {
            "type": "function",
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        }
    ],
    WireApi.CHAT: [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ],
    WireApi.MESSAGES: [
        {
            "name": "get_weather",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
        }
    ],
}


def request_body(client: WireApi, tools: bool) -> dict[str, Any]:
    body: dict[str, Any]
    if client is WireApi.RESPONSES:
        body = {"model": MODEL, "stream": True, "input": "Weather in Paris?"}
    elif client is WireApi.CHAT:
        body = {
            "model": MODEL,
            "stream": True,
            "messages": [{"role": "user", "content": "Weather in Paris?"}],
        }
    else:
        body = {
            "model": MODEL,
            "max_tokens": 64,
            "stream": True,
            "messages": [{"role": "user", "content": "Weather in Paris?"}],
        }
    if tools:
        body["tools"] = _TOOLS[client]
    return body


def upstream_error(upstream: WireApi, status: int) -> bytes:
    """An error body in the upstream API's shape."""
    if upstream is WireApi.MESSAGES:
        kind = "rate_limit_error" if status == 429 else "api_error"
        body: dict[str, Any] = {"type": "error", "error": {"type": kind, "message": "busy"}}
    else:
        body = {"error": {"message": "busy", "type": "server_error", "param": None, "code": None}}
    return json.dumps(body).encode()
