"""The seed document's exchange, ready to play: two Responses turns.

Turn 1 asks whether Beijing is fit for a run today with a ``get_weather``
function tool and the hosted ``web_search`` tool; the upstream searches, then
streams a ``get_weather`` call whose arguments arrive in two deltas. Turn 2
sends the tool's output back with ``previous_response_id`` and gets the
answer as text deltas. Events and values are the seed's, on one compact
``data:`` line each, as OpenAI sends them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .upstream import RecordedRequest, Responder, Script, Sleep, Stall, Step, chat_chunk, sse_event

__all__ = [
    "TURN1_EVENTS",
    "TURN1_REQUEST",
    "TURN2_EVENTS",
    "TURN2_REQUEST",
    "WEATHER_ARGUMENTS",
    "WEATHER_RESULT",
    "chat_seed_responder",
    "make_chat_seed_responder",
    "make_seed_responder",
    "seed_responder",
    "turn1_script",
    "turn1_stalled_script",
    "turn2_script",
    "turn_bytes",
]

QUESTION = "北京今天适合跑步吗？如果空气质量不好，请查一下官方建议。"
WEATHER_ARGUMENTS = '{"city":"北京","date":"today"}'
WEATHER_RESULT = "北京今天气温 18-27C，轻度污染，PM2.5 约 85，傍晚有风。"
ANSWER_DELTAS = (
    "今天北京不太适合高强度户外跑步。",
    "空气质量为轻度污染，建议改为低强度慢跑或室内训练。",
)

TURN1_REQUEST: dict[str, Any] = {
    "model": "gpt-5.4",
    "stream": True,
    "input": [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": QUESTION}]}
    ],
    "tools": [
        {
            "type": "function",
            "name": "get_weather",
            "description": "查询指定城市的天气和空气质量摘要。",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "date": {"type": "string"}},
                "required": ["city", "date"],
            },
            "strict": True,
        },
        {
            "type": "web_search",
            "filters": {"allowed_domains": ["www.cma.gov.cn", "www.mee.gov.cn"]},
            "search_context_size": "low",
        },
    ],
    "tool_choice": "auto",
    "parallel_tool_calls": False,
}

TURN2_REQUEST: dict[str, Any] = {
    "model": "gpt-5.4",
    "stream": True,
    "previous_response_id": "resp_01",
    "input": [
        {"type": "function_call_output", "call_id": "call_weather_01", "output": WEATHER_RESULT}
    ],
}


def _response(rid: str, status: str) -> dict[str, Any]:
    # The seed abbreviates the snapshot; created_at is added because strict clients
    # (the Vercel AI SDK) reject a response object without it.
    return {
        "id": rid,
        "object": "response",
        "created_at": 1764460800,
        "status": status,
        "model": "gpt-5.4",
        "output": [],
    }


def _call(arguments: str, status: str) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": "fc_01",
        "call_id": "call_weather_01",
        "name": "get_weather",
        "arguments": arguments,
        "status": status,
    }


def _ws(kind: str, seq: int) -> dict[str, Any]:
    return {
        "type": f"response.web_search_call.{kind}",
        "sequence_number": seq,
        "output_index": 0,
        "item_id": "ws_01",
    }


TURN1_EVENTS: list[dict[str, Any]] = [
    {
        "type": "response.created",
        "sequence_number": 0,
        "response": _response("resp_01", "in_progress"),
    },
    _ws("in_progress", 1),
    _ws("searching", 2),
    _ws("completed", 3),
    {
        "type": "response.output_item.added",
        "sequence_number": 4,
        "output_index": 1,
        "item": _call("", "in_progress"),
    },
    {
        "type": "response.function_call_arguments.delta",
        "sequence_number": 5,
        "item_id": "fc_01",
        "output_index": 1,
        "delta": '{"city":"北京"',
    },
    {
        "type": "response.function_call_arguments.delta",
        "sequence_number": 6,
        "item_id": "fc_01",
        "output_index": 1,
        "delta": ',"date":"today"}',
    },
    {
        "type": "response.function_call_arguments.done",
        "sequence_number": 7,
        "item_id": "fc_01",
        "output_index": 1,
        "name": "get_weather",
        "arguments": WEATHER_ARGUMENTS,
    },
    {
        "type": "response.output_item.done",
        "sequence_number": 8,
        "output_index": 1,
        "item": _call(WEATHER_ARGUMENTS, "completed"),
    },
    {
        "type": "response.completed",
        "sequence_number": 9,
        "response": _response("resp_01", "completed"),
    },
]


def _text(kind: str, seq: int, **fields: Any) -> dict[str, Any]:
    return {
        "type": f"response.output_text.{kind}",
        "sequence_number": seq,
        "item_id": "msg_01",
        "output_index": 0,
        "content_index": 0,
        **fields,
    }


TURN2_EVENTS: list[dict[str, Any]] = [
    {
        "type": "response.output_item.added",
        "sequence_number": 0,
        "output_index": 0,
        "item": {
            "type": "message",
            "id": "msg_01",
            "role": "assistant",
            "content": [],
            "status": "in_progress",
        },
    },
    {
        "type": "response.content_part.added",
        "sequence_number": 1,
        "item_id": "msg_01",
        "output_index": 0,
        "content_index": 0,
        "part": {"type": "output_text", "text": "", "annotations": []},
    },
    _text("delta", 2, delta=ANSWER_DELTAS[0]),
    _text("delta", 3, delta=ANSWER_DELTAS[1]),
    _text("done", 4, text="".join(ANSWER_DELTAS)),
    {
        "type": "response.completed",
        "sequence_number": 5,
        "response": _response("resp_02", "completed"),
    },
]


def turn1_script(*, delay: float = 0.0, chunk_size: int | None = None) -> Script:
    """Turn 1 as recorded in the seed: web_search status, then the get_weather call."""
    return Script.sse(TURN1_EVENTS, delay=delay, chunk_size=chunk_size)


def turn2_script(*, delay: float = 0.0, chunk_size: int | None = None) -> Script:
    """Turn 2: the answer streamed as text deltas."""
    return Script.sse(TURN2_EVENTS, delay=delay, chunk_size=chunk_size)


def turn1_stalled_script(*, after_events: int = 6, delay: float = 0.0) -> Script:
    """Turn 1 that goes silent after ``after_events`` events (default: mid-arguments,
    after the first ``function_call_arguments.delta``) and never ends."""
    then: tuple[Step, ...] = (Stall(),)
    if delay:
        then = (Sleep(delay), *then)
    return Script.sse(TURN1_EVENTS[:after_events], delay=delay, then=then)


def make_seed_responder(*, delay: float = 0.0) -> Responder:
    """A responder playing turn 2 for a request that continues ``resp_01``, turn 1
    otherwise, with ``delay`` seconds between events."""

    def respond(request: RecordedRequest) -> Script:
        try:
            body = request.json()
        except ValueError:
            body = {}
        if isinstance(body, dict) and body.get("previous_response_id") == "resp_01":
            return turn2_script(delay=delay)
        return turn1_script(delay=delay)

    return respond


seed_responder = make_seed_responder()


def make_chat_seed_responder(answer: Sequence[str] = ANSWER_DELTAS) -> Responder:
    """The seed's exchange as a Chat-only server (vLLM, llama.cpp, Ollama) plays it: a
    ``get_weather`` call for a conversation without its result, ``answer`` as text
    deltas once a ``tool`` message carries it. It keeps nothing: what it knows of the
    conversation is what each request holds."""

    def respond(request: RecordedRequest) -> Script:
        body = request.json()
        if any(m.get("role") == "tool" for m in body.get("messages", [])):
            first, *rest = answer
            chunks = [
                chat_chunk({"role": "assistant", "content": first}),
                *(chat_chunk({"content": text}) for text in rest),
                chat_chunk({}, "stop"),
            ]
        else:
            call = {
                "index": 0,
                "id": "call_weather_01",
                "type": "function",
                "function": {"name": "get_weather", "arguments": WEATHER_ARGUMENTS},
            }
            chunks = [
                chat_chunk({"role": "assistant", "tool_calls": [call]}),
                chat_chunk({}, "tool_calls"),
            ]
        return Script.sse([*chunks, b"data: [DONE]\n\n"])

    return respond


chat_seed_responder = make_chat_seed_responder()


def turn_bytes(events: list[dict[str, Any]]) -> bytes:
    """The exact bytes a turn's script sends."""
    return b"".join(sse_event(e) for e in events)
