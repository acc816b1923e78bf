"""proxai's reasoning envelopes never reach a native upstream (issue 20, item 14).

A turn answered by a Chat upstream through translation leaves proxai's envelopes in the
client's history (a Responses reasoning item with ``encrypted_content`` =
``proxai-reasoning-v1.…``, an Anthropic thinking block signed
``proxai-reasoning-v1.unsigned``); when the next turn fails over to OpenAI or Anthropic
itself, they are dropped on the way, and any other request passes byte for byte.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import httpx
import pytest
import trio

from proxai.protocols.names import WireApi
from proxai.testing import Script, Send
from proxai.testing.seed import turn2_script
from proxai.translate.ir import THINKING_SIGNATURE, wrap_reasoning
from proxai.translate.reasoning_envelopes import (
    REASONING_ENVELOPE_MARK,
    carries_proxai_reasoning,
    strip_proxai_reasoning,
)
from tests.helpers import (
    CHAT_UPSTREAM,
    REAL_TIMEOUTS,
    TOOL_CALL_STREAM,
    WEATHER_TOOL,
    anthropic_client,
    openai_client,
    sse,
)

JSON = Any
RESPONSES, MESSAGES, CHAT = WireApi.RESPONSES, WireApi.MESSAGES, WireApi.CHAT
PROXAI_REASONING = {
    "type": "reasoning",
    "id": "rs_0a1b",
    "summary": [],
    "content": [{"type": "reasoning_text", "text": "The user wants weather."}],
    "encrypted_content": wrap_reasoning("The user wants weather."),
}
OPENAI_REASONING = {
    "type": "reasoning",
    "id": "rs_openai",
    "summary": [{"type": "summary_text", "text": "Looked it up."}],
    "encrypted_content": "gAAAAB-openai-blob",
}
CALL = {"type": "function_call", "call_id": "call_w1", "name": "get_weather", "arguments": "{}"}
OUTPUT = {"type": "function_call_output", "call_id": "call_w1", "output": "22°C"}
PROXAI_THINKING = {
    "type": "thinking",
    "thinking": "The user wants weather.",
    "signature": THINKING_SIGNATURE,
}
ANTHROPIC_THINKING = {"type": "thinking", "thinking": "Hm.", "signature": "EqQBCkYIBxgC"}
TOOL_USE = {"type": "tool_use", "id": "call_w1", "name": "get_weather", "input": {}}
TOOL_RESULT = {"type": "tool_result", "tool_use_id": "call_w1", "content": "22°C"}


def strip(wire: WireApi, body: dict[str, JSON]) -> tuple[dict[str, JSON], list[str]]:
    data = copy.deepcopy(body)
    assert carries_proxai_reasoning(json.dumps(body).encode(), wire)
    return data, strip_proxai_reasoning(data, wire)


def messages_body(*messages: JSON, **fields: JSON) -> dict[str, JSON]:
    return {"model": "claude-sonnet-4-5", "max_tokens": 4096, "messages": list(messages), **fields}


# --- the rewrite, sans-io -------------------------------------------------------------------


def test_a_responses_reasoning_item_with_proxais_envelope_is_dropped_whole() -> None:
    body = {
        "model": "gpt-5.4",
        "input": [{"role": "user", "content": "hi"}, OPENAI_REASONING, PROXAI_REASONING, CALL],
        "include": ["reasoning.encrypted_content"],
    }
    data, dropped = strip(RESPONSES, body)
    assert data["input"] == [{"role": "user", "content": "hi"}, OPENAI_REASONING, CALL]
    assert {k: v for k, v in data.items() if k != "input"} == {
        k: v for k, v in body.items() if k != "input"
    }
    assert dropped == ["input.reasoning"]


def test_a_thinking_block_proxai_signed_is_dropped_and_thinking_off_in_an_open_tool_loop() -> None:
    body = messages_body(
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": [PROXAI_THINKING, {"type": "text", "text": "Hm"}, TOOL_USE],
        },
        {"role": "user", "content": [TOOL_RESULT]},
        thinking={"type": "adaptive"},
        output_config={"effort": "high"},
        context_management={
            "edits": [
                {"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 1}},
                {"type": "clear_tool_uses_20250919"},
            ]
        },
    )
    data, dropped = strip(MESSAGES, body)
    assert data["messages"][1]["content"] == [{"type": "text", "text": "Hm"}, TOOL_USE]
    # Anthropic: "When thinking is enabled, a final assistant message must start with a
    # thinking block ... To avoid this requirement, disable thinking."
    assert data["thinking"] == {"type": "disabled"}
    assert data["context_management"] == {"edits": [{"type": "clear_tool_uses_20250919"}]}
    assert data["output_config"] == {"effort": "high"}
    assert dropped == ["messages.thinking", "thinking", "context_management.edits.clear_thinking"]


def test_thinking_stays_on_when_the_loop_is_closed_or_its_last_turn_is_anthropics() -> None:
    earlier = {"role": "assistant", "content": [PROXAI_THINKING, TOOL_USE]}
    # A new user turn after the loop: thinking from earlier turns may be left out.
    data, dropped = strip(
        MESSAGES,
        messages_body(
            {"role": "user", "content": "go"},
            earlier,
            {"role": "user", "content": [TOOL_RESULT]},
            {"role": "assistant", "content": [{"type": "text", "text": "22°C."}]},
            {"role": "user", "content": "And tomorrow?"},
            thinking={"type": "enabled", "budget_tokens": 2048},
        ),
    )
    assert data["messages"][1]["content"] == [TOOL_USE]
    assert data["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert dropped == ["messages.thinking"]
    # The loop's last assistant message came from Anthropic, signed: it starts with its own.
    last = {"role": "assistant", "content": [ANTHROPIC_THINKING, TOOL_USE]}
    data, dropped = strip(
        MESSAGES,
        messages_body(
            {"role": "user", "content": "go"},
            earlier,
            {"role": "user", "content": [TOOL_RESULT]},
            last,
            {"role": "user", "content": [TOOL_RESULT]},
            thinking={"type": "adaptive"},
        ),
    )
    assert data["messages"][3] == last
    assert data["thinking"] == {"type": "adaptive"}
    assert dropped == ["messages.thinking"]


def test_an_assistant_turn_that_was_only_proxais_thinking_goes_whole() -> None:
    data, dropped = strip(
        MESSAGES,
        messages_body(
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [PROXAI_THINKING]},
            {"role": "user", "content": "hello?"},
        ),
    )
    # Anthropic joins the consecutive user turns left behind.
    assert [m["role"] for m in data["messages"]] == ["user", "user"]
    assert dropped == ["messages.thinking"]
    assert "thinking" not in data


@pytest.mark.parametrize(
    ("wire", "body"),
    [
        # The prefix as words, or in places proxai never writes a envelope: nothing to drop.
        (RESPONSES, {"model": "m", "input": "what is proxai-reasoning-v1.?"}),
        (
            RESPONSES,
            {"model": "m", "input": [{**CALL, "arguments": '{"q": "proxai-reasoning-v1."}'}]},
        ),
        (MESSAGES, messages_body({"role": "user", "content": [{**PROXAI_THINKING}]})),
        (MESSAGES, messages_body({"role": "assistant", "content": "proxai-reasoning-v1.x"})),
    ],
)
def test_a_body_with_the_prefix_but_no_envelope_is_left_alone(
    wire: WireApi, body: dict[str, JSON]
) -> None:
    data, dropped = strip(wire, body)
    assert (data, dropped) == (body, [])


def test_only_bodies_holding_the_mark_are_looked_at() -> None:
    body = json.dumps({"model": "m", "input": [PROXAI_REASONING]}).encode()
    assert REASONING_ENVELOPE_MARK in body
    assert carries_proxai_reasoning(body, RESPONSES)
    assert carries_proxai_reasoning(body, MESSAGES)
    assert not carries_proxai_reasoning(body, CHAT)  # Chat bodies hold no envelopes
    assert not carries_proxai_reasoning(body, None)
    assert not carries_proxai_reasoning(body.replace(REASONING_ENVELOPE_MARK, b"x"), RESPONSES)


# --- end to end: a fail-over turn from a Chat upstream to a native one ----------------------


async def fail_over_turns(
    start_upstream: Any, proxai_for: Any, protocol: str, answer: JSON, two_turns: Any
) -> tuple[Any, Any, list[Any]]:
    """``two_turns(url)`` against a route of a Chat upstream, which answers turn 1 with a
    tool call (reasoning first) and is down for turn 2, then a native ``protocol``
    upstream answering ``answer``; its result, the native upstream, the outcomes."""
    local = await start_upstream([sse(TOOL_CALL_STREAM), Script(status=503, steps=[Send(b"{}")])])
    native = await start_upstream([Script.json(answer)])
    async with proxai_for(
        native,
        upstream={"protocol": protocol},
        upstreams={"local": {"base_url": local.base_url, **CHAT_UPSTREAM}},
        routes=[{"model": "*", "upstreams": ["local", "default"]}],
        retries={"max_attempts": 2},
        timeouts=REAL_TIMEOUTS,
    ) as px:
        with trio.fail_after(20):
            result = await trio.to_thread.run_sync(two_turns, px.url)
            outcomes = await px.wait_for_outcomes(2)
    assert [a.upstream for a in outcomes[1].attempts] == ["local", "default"]
    return result, native, outcomes


async def test_a_responses_turn_failing_over_to_openai_loses_proxais_reasoning_items(
    start_upstream: Any, proxai_for: Any
) -> None:
    """Turn 1 from the Chat upstream (Codex asks for the envelope); turn 2 finds it down
    and goes to the native Responses upstream, which must not see proxai's item."""
    answer = {
        "id": "resp_02",
        "object": "response",
        "created_at": 1767225600,
        "status": "completed",
        "model": "gpt-5.4",
        "output": [
            {
                "type": "message",
                "id": "msg_02",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": "22°C in Paris.", "annotations": []}],
            }
        ],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
    }

    def two_turns(url: str) -> Any:
        client = openai_client(url)
        question = {"role": "user", "content": "Weather in Paris?"}
        ask = {"model": "qwen3-coder", "tools": [WEATHER_TOOL], "store": False}
        ask["include"] = ["reasoning.encrypted_content"]
        with client.responses.stream(input=[question], **ask) as stream:
            first = stream.get_final_response()
        (call,) = [item for item in first.output if item.type == "function_call"]
        output = {"type": "function_call_output", "call_id": call.call_id, "output": "22°C"}
        return first, client.responses.create(input=[question, *first.output, output], **ask)

    (first, final), openai_up, outcomes = await fail_over_turns(
        start_upstream, proxai_for, "openai_responses", answer, two_turns
    )
    assert first.output[0].encrypted_content == wrap_reasoning("The user wants weather.")
    assert final.output_text == "22°C in Paris."
    (request,) = openai_up.requests
    assert REASONING_ENVELOPE_MARK not in request.body
    sent = json.loads(request.body)
    assert [item.get("type", "message") for item in sent["input"]] == [
        "message",
        "message",
        "function_call",
        "function_call_output",
    ]
    assert sent["include"] == ["reasoning.encrypted_content"]
    assert outcomes[1].translation is None
    assert outcomes[1].dropped == ["input.reasoning"]


async def test_a_messages_turn_failing_over_to_anthropic_loses_proxais_thinking(
    start_upstream: Any, proxai_for: Any
) -> None:
    answer = {
        "id": "msg_02",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": "22°C in Paris."}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 30, "output_tokens": 8},
    }
    tools = [{"name": "get_weather", "input_schema": {"type": "object"}}]

    def two_turns(url: str) -> Any:
        client = anthropic_client(url)
        question = {"role": "user", "content": "Weather in Paris?"}
        ask: dict[str, Any] = {"model": "claude-sonnet-4-5", "max_tokens": 4096, "tools": tools}
        ask["thinking"] = {"type": "enabled", "budget_tokens": 2048}
        with client.messages.stream(messages=[question], **ask) as stream:
            first = stream.get_final_message()
        call = first.content[-1]
        result = {"type": "tool_result", "tool_use_id": call.id, "content": "22°C"}
        history = [
            question,
            {"role": "assistant", "content": first.content},
            {"role": "user", "content": [result]},
        ]
        return first, client.messages.create(messages=history, **ask)

    (first, final), anthropic_up, outcomes = await fail_over_turns(
        start_upstream, proxai_for, "anthropic_messages", answer, two_turns
    )
    assert first.content[0].type == "thinking"
    assert first.content[0].signature == THINKING_SIGNATURE
    assert final.content[0].text == "22°C in Paris."
    (request,) = anthropic_up.requests
    assert REASONING_ENVELOPE_MARK not in request.body
    sent = json.loads(request.body)
    assistant = sent["messages"][1]
    assert [block["type"] for block in assistant["content"]] == ["text", "tool_use"]
    assert sent["messages"][2]["content"][0]["tool_use_id"] == assistant["content"][1]["id"]
    assert sent["thinking"] == {"type": "disabled"}
    assert outcomes[1].dropped == ["messages.thinking", "thinking"]


@pytest.mark.parametrize(
    "body",
    [
        b'{"model":  "gpt-5.4",\n "input": [ {"role": "user", "content": "hi"} ], "stream":true}',
        # The prefix, but no envelope of proxai's: parsed, nothing dropped, bytes kept.
        b'{ "model": "gpt-5.4", "input": "say proxai-reasoning-v1. twice",  "stream": true }',
    ],
)
async def test_a_native_request_without_a_envelope_is_forwarded_byte_for_byte(
    start_upstream: Any, proxai_for: Any, body: bytes
) -> None:
    upstream = await start_upstream([turn2_script()])
    async with proxai_for(upstream, upstream={"protocol": "openai_responses"}) as px:
        async with httpx.AsyncClient(timeout=10) as client:
            response = await client.post(
                px.url + "/v1/responses",
                content=body,
                headers={"content-type": "application/json", "authorization": "Bearer sk-x"},
            )
        (outcome,) = await px.wait_for_outcomes(1)
    assert response.status_code == 200
    assert upstream.requests[0].body == body
    assert outcome.dropped == []
