"""Helpers shared by several test files (one place: no test module imports another).

The I/O-free and public ones belong in :mod:`proxai.testing`; these are the tests' own:
requests, upstream scripts and clients that more than one file drives.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import anthropic
import openai
import trio

from proxai.testing import RecordedRequest, Script, chat_chunk, sse_event
from proxai.upstream.client import UpstreamClient

# -- real-socket deadlines -----------------------------------------------------------------

#: Deadlines for real-socket tests of healthy streams: far above any pause a loaded machine
#: makes, so no deadline can fire by accident. Timeout logic itself is tested on a virtual
#: clock (MemoryProxy under ``autojump_clock``, tests/relay/test_deadlines.py).
REAL_TIMEOUTS = {"first_byte": 10.0, "idle": 10.0, "tool_arguments": 10.0, "total": 60.0}


def stall_timeouts(deadline: str, seconds: float = 0.3) -> dict[str, float]:
    """:data:`REAL_TIMEOUTS` with the one ``deadline`` a real-socket test's stall must fire
    short: what a real SDK makes of the error is the test, not when it comes; every other
    deadline stays far away, so the stall is that deadline's however loaded the machine."""
    return {**REAL_TIMEOUTS, deadline: seconds}


# -- a Chat upstream, its streams, and the SDK clients that read them translated -----------


CHAT_UPSTREAM = {"protocol": "openai_chat"}


WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> bytes:
    """One ``chat.completion.chunk`` line as vLLM or llama.cpp send it."""
    return chat_chunk(delta, finish, model="qwen3-coder", id="chatcmpl-7", **extra)


USAGE = {
    "prompt_tokens": 120,
    "completion_tokens": 30,
    "total_tokens": 150,
    "prompt_tokens_details": {"cached_tokens": 100},
}


TOOL_CALL_STREAM = [
    chunk({"role": "assistant", "content": ""}),
    chunk({"reasoning_content": "The user wants weather."}),
    chunk({"content": "Let me check."}),
    chunk(
        {
            "tool_calls": [
                {
                    "index": 0,
                    "id": "call_w1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": ""},
                }
            ]
        }
    ),
    chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]}),
    chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]}),
    chunk({}, finish="tool_calls"),
    chunk(None, usage=USAGE),
    b"data: [DONE]\n\n",
]


TEXT_STREAM = [
    chunk({"role": "assistant", "content": "It is "}),
    chunk({"content": "sunny."}),
    chunk({}, finish="stop"),
    chunk(None, usage=USAGE),
    b"data: [DONE]\n\n",
]


def sse(lines: list[bytes], then: list[Any] | None = None) -> Script:
    return Script.sse(lines, then=then or [])


async def run(
    start_upstream: Any,
    proxai_for: Any,
    scripts: list[Script],
    call: Any,
    count: int = 1,
    **tables: Any,
) -> tuple[Any, Any, list[Any]]:
    """Run ``call(proxai_url)`` in a thread; its result, the upstream and the outcomes
    (deadlines :data:`REAL_TIMEOUTS` unless ``timeouts`` says otherwise)."""
    upstream = await start_upstream(scripts or [sse(TEXT_STREAM)])  # one it must not need
    tables.setdefault("upstream", CHAT_UPSTREAM)
    tables.setdefault("timeouts", REAL_TIMEOUTS)
    async with proxai_for(upstream, **tables) as px:
        with trio.fail_after(20):
            result = await trio.to_thread.run_sync(call, px.url)
            outcomes = await px.wait_for_outcomes(count)
    return result, upstream, outcomes


def openai_client(url: str) -> Any:
    return openai.OpenAI(base_url=url + "/v1", api_key="sk-client", max_retries=0, timeout=15)


def anthropic_client(url: str) -> Any:
    return anthropic.Anthropic(base_url=url, api_key="sk-client", max_retries=0, timeout=15)


def capture(call: Any) -> Any:
    """``call``'s result, or the exception it raised."""

    def wrapped(url: str) -> Any:
        try:
            return call(url)
        except Exception as exc:
            return exc

    return wrapped


def responses_stream(url: str) -> Any:
    client = openai_client(url)
    with client.responses.stream(
        model="qwen3-coder",
        input="Weather in Paris?",
        tools=[WEATHER_TOOL, {"type": "web_search"}],
        include=["reasoning.encrypted_content"],
        store=False,
    ) as stream:
        return stream.get_final_response()


def messages_stream(url: str) -> Any:
    client = anthropic_client(url)
    with client.messages.stream(
        model="claude-sonnet-4-5",
        max_tokens=1024,
        system="You are terse.",
        messages=[{"role": "user", "content": "Weather in Paris?"}],
        tools=[
            {
                "name": "get_weather",
                "description": "Weather for a city",
                "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
            }
        ],
    ) as stream:
        return stream.get_final_message()


CHAT_COMPLETION = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1767225600,
    "model": "qwen3-coder",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "Hello"}, "finish_reason": "stop"}
    ],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
}


# -- an Anthropic upstream's stream and a Messages request ---------------------------------


MESSAGES = "/v1/messages"


REQUEST = {
    "model": "claude-test-model",
    "max_tokens": 1024,
    "stream": True,
    "messages": [{"role": "user", "content": "北京今天适合跑步吗？"}],
    "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}],
}


def event(kind: str, **fields: Any) -> bytes:
    payload = json.dumps({"type": kind, **fields}, ensure_ascii=False, separators=(",", ":"))
    return f"event: {kind}\ndata: {payload}\n\n".encode()


MESSAGE_START = event(
    "message_start",
    message={
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": "claude-test-model",
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 25, "output_tokens": 1},
    },
)


TEXT = [
    event("content_block_start", index=0, content_block={"type": "text", "text": ""}),
    event("ping"),
    event("content_block_delta", index=0, delta={"type": "text_delta", "text": "我查一下"}),
    event("content_block_delta", index=0, delta={"type": "text_delta", "text": "天气。"}),
    event("content_block_stop", index=0),
]


TOOL = [
    event(
        "content_block_start",
        index=1,
        content_block={"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {}},
    ),
    event("content_block_delta", index=1, delta={"type": "input_json_delta", "partial_json": ""}),
    event(
        "content_block_delta",
        index=1,
        delta={"type": "input_json_delta", "partial_json": '{"city": '},
    ),
    event(
        "content_block_delta",
        index=1,
        delta={"type": "input_json_delta", "partial_json": '"北京"}'},
    ),
    event("content_block_stop", index=1),
]


END = [
    event(
        "message_delta",
        delta={"stop_reason": "tool_use", "stop_sequence": None},
        usage={"output_tokens": 42},
    ),
    event("message_stop"),
]


WHOLE = [MESSAGE_START, *TEXT, *TOOL, *END]


ANTHROPIC_UPSTREAM = {
    "claude": {
        "protocol": "anthropic_messages",
        "base_url": "http://anthropic.test/v1",
        "api_key": "sk-ant-upstream",
    }
}


# -- Prometheus samples --------------------------------------------------------------------


def metric(text: str, name: str, **labels: str) -> float:
    """The value of one sample in Prometheus text format."""
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        sample, value = line.rsplit(" ", 1)
        found = dict(re.findall(r'(\w+)="([^"]*)"', sample))
        if all(found.get(k) == v for k, v in labels.items()):
            return float(value)
    raise AssertionError(f"no sample {name} {labels} in:\n{text}")


# -- two upstreams, default and backup -----------------------------------------------------


BACKUP = {"backup": {"base_url": "http://backup.test/v1", "api_key": "sk-backup"}}


FALLBACK = [{"model": "*", "upstreams": ["default", "backup"]}]


def error_json(status: int, **headers: str) -> Script:
    body = {"error": {"message": f"upstream says {status}", "type": "server_error"}}
    return Script.json(body, status=status, headers=tuple(headers.items()))


def by_host(**scripts: Script | list[Script]) -> Callable[[RecordedRequest], Script]:
    """Each upstream plays its own script (or its scripts in turn, the last repeating)."""
    seen: dict[str, int] = {}

    def respond(request: RecordedRequest) -> Script:
        host = (request.header("host") or "").split(".")[0]
        played = scripts["default" if host == "upstream" else host]
        if isinstance(played, Script):
            return played
        n = seen[host] = seen.get(host, -1) + 1
        return played[min(n, len(played) - 1)]

    return respond


# -- the upstream client under a burst -----------------------------------------------------


async def burst(client: UpstreamClient, streams: int) -> None:
    async def one() -> None:
        async with client.open("POST", b"/v1/responses", b"", [], b"{}") as response:
            async for _ in response.iter_body():
                pass

    async with trio.open_nursery() as nursery:
        for _ in range(streams):
            nursery.start_soon(one)


# -- whole and streamed answers of each API, reporting their usage ------------------------


#: What each upstream reports: 300 tokens in, 100 out, in its own API's shape.
TOKENS_IN, TOKENS_OUT = 300, 100
_RESPONSE = {
    "id": "resp_u",
    "object": "response",
    "created_at": 1767225600,
    "model": "m",
    "status": "completed",
    "output": [
        {
            "type": "message",
            "id": "msg_u",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "hi", "annotations": []}],
        }
    ],
    "usage": {
        "input_tokens": TOKENS_IN,
        "output_tokens": TOKENS_OUT,
        "total_tokens": TOKENS_IN + TOKENS_OUT,
    },
}
_MESSAGE = {
    "id": "msg_u",
    "type": "message",
    "role": "assistant",
    "model": "m",
    "content": [{"type": "text", "text": "hi"}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": TOKENS_IN, "output_tokens": TOKENS_OUT},
}
_CHAT_USAGE = {
    "prompt_tokens": TOKENS_IN,
    "completion_tokens": TOKENS_OUT,
    "total_tokens": TOKENS_IN + TOKENS_OUT,
}


def _typed_event(kind: str, **fields: Any) -> bytes:
    return sse_event({"type": kind, **fields}, event=kind)


def usage_answer(api: str, stream: bool) -> Script:
    """An answer of an upstream's API (``responses``, ``chat``, ``messages``), streamed
    or whole, reporting :data:`TOKENS_IN` + :data:`TOKENS_OUT` tokens in its own shape."""
    if api == "responses":
        if not stream:
            return Script.json(_RESPONSE)
        created = {**_RESPONSE, "status": "in_progress", "output": [], "usage": None}
        return Script.sse(
            [
                {"type": "response.created", "sequence_number": 0, "response": created},
                {"type": "response.completed", "sequence_number": 1, "response": _RESPONSE},
            ]
        )
    if api == "chat":
        if not stream:
            return Script.json(
                {
                    "id": "chatcmpl-u",
                    "object": "chat.completion",
                    "created": 1767225600,
                    "model": "m",
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": "hi"},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": _CHAT_USAGE,
                }
            )
        return Script.sse(
            [
                chat_chunk({"role": "assistant", "content": "hi"}),
                chat_chunk({}, "stop"),
                chat_chunk(None, usage=_CHAT_USAGE),
                b"data: [DONE]\n\n",
            ]
        )
    if not stream:
        return Script.json(_MESSAGE)
    start = {**_MESSAGE, "content": [], "stop_reason": None}
    start["usage"] = {"input_tokens": TOKENS_IN, "output_tokens": 1}
    return Script.sse(
        [
            _typed_event("message_start", message=start),
            _typed_event(
                "content_block_start", index=0, content_block={"type": "text", "text": ""}
            ),
            _typed_event(
                "content_block_delta", index=0, delta={"type": "text_delta", "text": "hi"}
            ),
            _typed_event("content_block_stop", index=0),
            _typed_event(
                "message_delta",
                delta={"stop_reason": "end_turn", "stop_sequence": None},
                usage={"output_tokens": TOKENS_OUT},
            ),
            _typed_event("message_stop"),
        ]
    )


def api_request(api: str, stream: bool) -> tuple[str, dict[str, Any]]:
    """A small request of a client API (``responses``, ``chat``, ``messages``): its path
    and body."""
    user = [{"role": "user", "content": "hi"}]
    if api == "responses":
        return "/v1/responses", {"model": "m", "input": "hi", "stream": stream}
    if api == "chat":
        body: dict[str, Any] = {"model": "m", "messages": user, "stream": stream}
        if stream:
            body["stream_options"] = {"include_usage": True}
        return "/v1/chat/completions", body
    return MESSAGES, {"model": "m", "max_tokens": 64, "messages": user, "stream": stream}
