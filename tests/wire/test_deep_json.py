"""JSON nested deeper than orjson writes, in a request proxai rewrites (issue 20, item 12).

orjson parses 1,024 levels but writes 254: a translated request, a normalize pass, a
model rewrite or a ``count_tokens`` estimate of a body nested between the two was a bare
500 with a traceback. It is a 400 naming the field, in the client API's shape. A body
forwarded as it came is never rewritten, so it is not refused.
"""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from trio.testing import MockClock

from proxai.testing import Script
from proxai.testing.memory_proxy import MemoryProxy
from proxai.wire.json_body import MAX_WRITTEN_DEPTH, deepest, dumps_kept, json_depth

CHAT_UPSTREAM = {"local": {"protocol": "openai_chat", "base_url": "http://local.test/v1"}}
MESSAGES_UPSTREAM = {
    "local": {"protocol": "anthropic_messages", "base_url": "http://local.test/v1"}
}
NORMALIZED = {
    "local": {"base_url": "http://local.test/v1", "normalize": {"system_to_instructions": True}}
}
TO_LOCAL = [{"model": "*", "upstreams": ["local"]}]
REWRITTEN = [{"model": "*", "upstreams": ["default"], "upstream_model": "other"}]


def nested(levels: int) -> dict[str, Any]:
    """An object nested ``levels`` deep: ``{"a": {"a": ... {}}}``."""
    value: dict[str, Any] = {}
    for _ in range(levels - 1):
        value = {"a": value}
    return value


def encoded(body: dict[str, Any]) -> bytes:
    """``body`` as JSON (orjson writes what the standard library cannot, up to 254 levels;
    a deeper ``nested`` value is spliced in as text)."""
    deep: list[str] = []

    def mark(value: Any) -> Any:
        if isinstance(value, dict) and list(value) == ["a"] and json_depth(value) > 100:
            deep.append('{"a":' * (json_depth(value) - 1) + "{}" + "}" * (json_depth(value) - 1))
            return f"@deep{len(deep) - 1}@"
        if isinstance(value, dict):
            return {k: mark(v) for k, v in value.items()}
        if isinstance(value, list):
            return [mark(v) for v in value]
        return value

    text = json.dumps(mark(body))
    for index, value in enumerate(deep):
        text = text.replace(f'"@deep{index}@"', value)
    return text.encode()


def tool_use(levels: int) -> dict[str, Any]:
    block = {"type": "tool_use", "id": "toolu_1", "name": "f", "input": nested(levels)}
    return {"role": "assistant", "content": [block]}


def function_tool(levels: int) -> dict[str, Any]:
    return {"type": "function", "name": "f", "parameters": nested(levels)}


CASES = [
    pytest.param(
        "/v1/messages",
        {"max_tokens": 5, "messages": [tool_use(400)]},
        {"upstreams": CHAT_UPSTREAM, "routes": TO_LOCAL},
        "messages[0].content[0].input.a.a.a.a.a.a.a...",
        id="messages-to-chat-tool-input",
    ),
    pytest.param(
        "/v1/responses",
        {"input": "hi", "tools": [function_tool(300)]},
        {"upstreams": CHAT_UPSTREAM, "routes": TO_LOCAL},
        "tools[0].parameters.a.a.a.a.a.a.a.a.a...",
        id="responses-to-chat-tool-parameters",
    ),
    pytest.param(
        "/v1/responses",
        {"input": "hi", "tools": [function_tool(1000)]},
        {"upstreams": MESSAGES_UPSTREAM, "routes": TO_LOCAL},
        "tools[0].parameters.a.a.a.a.a.a.a.a.a...",
        id="responses-to-messages-1000-levels",
    ),
    pytest.param(
        "/v1/responses",
        {"input": "hi", "tools": [function_tool(300)]},
        {"routes": REWRITTEN},
        "tools[0].parameters.a.a.a.a.a.a.a.a.a...",
        id="model-rewrite",
    ),
    pytest.param(
        "/v1/responses",
        {
            "input": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}],
            "tools": [function_tool(300)],
        },
        {"upstreams": NORMALIZED, "routes": TO_LOCAL},
        "tools[0].parameters.a.a.a.a.a.a.a.a.a...",
        id="normalize-pass",
    ),
    pytest.param(
        "/v1/messages/count_tokens",
        {"messages": [tool_use(300)]},
        {"upstreams": CHAT_UPSTREAM, "routes": TO_LOCAL},
        "messages[0].content[0].input.a.a.a.a.a.a.a...",
        id="count-tokens",
    ),
]


@pytest.mark.parametrize(("path", "body", "setup", "param"), CASES)
async def test_a_rewritten_request_nested_too_deep_is_a_400_naming_the_field(
    autojump_clock: MockClock, path: str, body: dict[str, Any], setup: dict[str, Any], param: str
) -> None:
    async with MemoryProxy([Script.json({"unused": True})], **setup) as proxy:
        exchange = await proxy.request(encoded({"model": "m", **body}), path=path)
        assert proxy.transport.requests == []  # nothing went upstream
    assert exchange.status == 400
    error = exchange.json()
    if path.startswith("/v1/messages"):
        assert error["type"] == "error"
        assert error["error"]["type"] == "invalid_request_error"
        message = error["error"]["message"]
    else:
        assert error["error"]["param"] == param
        assert error["error"]["code"] == "json_too_deep"
        message = error["error"]["message"]
    assert message.startswith(f"invalid request: {param}: nested ")
    assert f"at most {MAX_WRITTEN_DEPTH} levels" in message
    assert exchange.outcome is not None and exchange.outcome.status == 400


async def test_chat_arguments_too_deep_for_anthropic_are_a_400_naming_them(
    autojump_clock: MockClock,
) -> None:
    call = {"id": "c", "type": "function", "function": {"name": "f"}}
    call["function"]["arguments"] = json.dumps(nested(600))
    body = {"model": "m", "messages": [{"role": "assistant", "tool_calls": [call]}]}
    setup = {"upstreams": MESSAGES_UPSTREAM, "routes": TO_LOCAL}
    async with MemoryProxy([Script.json({"unused": True})], **setup) as proxy:
        exchange = await proxy.request(body, path="/v1/chat/completions")
    assert exchange.status == 400
    error = exchange.json()["error"]
    assert error["param"] == "messages[0].tool_calls[0].function.arguments"
    assert "nests 600 levels deep" in error["message"]


async def test_count_tokens_of_a_thousand_levels_of_content_is_counted(
    autojump_clock: MockClock,
) -> None:
    """The estimate walks the body without recursion: 1,000 levels (as deep as orjson
    parses) of content count as their text."""
    body = {"model": "m", "messages": [{"role": "user", "content": [nested(1000)]}]}
    setup = {"upstreams": CHAT_UPSTREAM, "routes": TO_LOCAL}
    async with MemoryProxy([Script.json({"unused": True})], **setup) as proxy:
        exchange = await proxy.request(encoded(body), path="/v1/messages/count_tokens")
    assert exchange.status == 200
    assert exchange.json()["input_tokens"] >= 1


async def test_a_body_just_within_the_depth_is_translated(autojump_clock: MockClock) -> None:
    body = {"model": "m", "input": "hi", "tools": [function_tool(MAX_WRITTEN_DEPTH - 8)]}
    setup = {"upstreams": CHAT_UPSTREAM, "routes": TO_LOCAL}
    async with MemoryProxy([Script.json({"unused": True})], **setup) as proxy:
        await proxy.request(encoded(body))
        (sent,) = proxy.transport.requests
    parameters = orjson.loads(sent.body)["tools"][0]["function"]["parameters"]
    assert json_depth(parameters) == MAX_WRITTEN_DEPTH - 8


def test_the_deepest_field_is_found_without_recursion() -> None:
    body = {"a": [1, [2, [3]]], "b": {"c": {}}, "deep": nested(1000)}
    depth, path = deepest(body)
    assert depth == 1001 and path == "deep" + ".a" * 999
    assert deepest({"a": [1, [2, [3]]], "b": {"c": {}}}) == (4, "a[1][1]")
    assert dumps_kept({"x": nested(10)}) == json.dumps({"x": nested(10)}).replace(" ", "").encode()


async def test_fields_a_translated_response_echoes_must_be_writable_there_too(
    autojump_clock: MockClock,
) -> None:
    """A Responses client's ``text.format.schema`` keeps its depth in the Chat request but
    is echoed a level deeper in every response object: refused before it goes out."""
    schema = {"type": "json_schema", "name": "s", "schema": nested(MAX_WRITTEN_DEPTH - 3)}
    body = {"model": "m", "input": "hi", "stream": True, "text": {"format": schema}}
    setup = {"upstreams": CHAT_UPSTREAM, "routes": TO_LOCAL}
    async with MemoryProxy([Script.json({"unused": True})], **setup) as proxy:
        exchange = await proxy.request(encoded(body))
        assert proxy.transport.requests == []
    assert exchange.status == 400
    assert exchange.json()["error"]["param"] == "text.format.schema" + ".a" * 9 + "..."
