"""Translation end to end: real proxai, a scripted upstream of another API, the official SDKs.

Each test runs the client's own SDK (openai or anthropic, in a worker thread)
against a real proxai whose only upstream speaks another API, and checks what
the SDK's accumulator built, what the upstream was sent, and the outcome record.
"""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import orjson
import pytest
import trio
from trio.testing import MockClock

from proxai.outcome import OutcomeKind
from proxai.testing import Script, Send, Sleep, Stall
from proxai.testing.memory_proxy import MemoryProxy
from tests.fixtures import FIXTURES
from tests.helpers import (
    CHAT_COMPLETION,
    CHAT_UPSTREAM,
    REAL_TIMEOUTS,
    TEXT_STREAM,
    TOOL_CALL_STREAM,
    WEATHER_TOOL,
    anthropic_client,
    capture,
    chunk,
    messages_stream,
    openai_client,
    responses_stream,
    run,
    sse,
    stall_timeouts,
)

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")


# --- Responses client (Codex) over a Chat upstream ------------------------------------------


def chat_stream(url: str, model: str, messages: list[dict[str, Any]]) -> Any:
    """The final completion of a Chat client's stream offering the weather tool, with usage."""
    tool = {
        "type": "function",
        "function": {"name": "get_weather", "parameters": WEATHER_TOOL["parameters"]},
    }
    with openai_client(url).chat.completions.stream(
        model=model, messages=messages, tools=[tool], stream_options={"include_usage": True}
    ) as stream:
        return stream.get_final_completion()


async def test_a_responses_client_gets_a_chat_upstreams_tool_call_as_responses_events(
    start_upstream: Any, proxai_for: Any
) -> None:
    final, upstream, (outcome,) = await run(
        start_upstream, proxai_for, [sse(TOOL_CALL_STREAM)], responses_stream
    )
    kinds = [item.type for item in final.output]
    assert kinds == ["reasoning", "message", "function_call"]
    reasoning, message, call = final.output
    assert reasoning.content[0].text == "The user wants weather."
    assert reasoning.encrypted_content == "proxai-reasoning-v1.The user wants weather."
    assert message.content[0].text == "Let me check."
    assert (call.name, call.call_id, json.loads(call.arguments)) == (
        "get_weather",
        "call_w1",
        {"city": "Paris"},
    )
    assert final.status == "completed"
    assert final.usage.input_tokens == 120
    assert final.usage.input_tokens_details.cached_tokens == 100
    assert final.usage.output_tokens == 30
    # The upstream got a Chat request at its Chat path.
    (request,) = upstream.requests
    assert request.target == "/v1/chat/completions"
    sent = json.loads(request.body)
    assert sent["messages"] == [{"role": "user", "content": "Weather in Paris?"}]
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
    assert [t["function"]["name"] for t in sent["tools"]] == ["get_weather"]
    assert request.header("authorization") == "Bearer sk-upstream-test"
    assert outcome.kind is OutcomeKind.COMPLETED
    assert outcome.translation == "responses→chat"
    assert any("web_search" in d for d in outcome.dropped)


async def test_the_reasoning_envelope_comes_back_as_reasoning_content_next_turn(
    start_upstream: Any, proxai_for: Any
) -> None:
    def two_turns(url: str) -> Any:
        first = responses_stream(url)
        client = openai_client(url)
        history = [{"role": "user", "content": "Weather in Paris?"}]
        history += [item.model_dump(exclude_none=True) for item in first.output]
        history.append(
            {"type": "function_call_output", "call_id": "call_w1", "output": "22°C, sunny"}
        )
        with client.responses.stream(
            model="qwen3-coder", input=history, tools=[WEATHER_TOOL], store=False
        ) as stream:
            return stream.get_final_response()

    final, upstream, _ = await run(
        start_upstream,
        proxai_for,
        [sse(TOOL_CALL_STREAM), sse(TEXT_STREAM)],
        two_turns,
        count=2,
    )
    assert final.output_text == "It is sunny."
    second = json.loads(upstream.requests[1].body)["messages"]
    assert [m["role"] for m in second] == ["user", "assistant", "tool"]
    assistant = second[1]
    assert assistant["reasoning_content"] == "The user wants weather."
    assert assistant["tool_calls"][0]["id"] == "call_w1"
    assert second[2] == {"role": "tool", "tool_call_id": "call_w1", "content": "22°C, sunny"}


async def test_reasoning_the_sdk_sends_back_as_received_reaches_the_chat_upstream(
    start_upstream: Any, proxai_for: Any
) -> None:
    """No ``include`` (so no envelope): the openai SDK's output items go back as they are,
    ``input=[..., *previous.output, function_call_output]``, as SDK users write it."""

    def two_turns(url: str) -> Any:
        client = openai_client(url)
        question = {"role": "user", "content": "Weather in Paris?"}
        with client.responses.stream(
            model="qwen3-coder", input=[question], tools=[WEATHER_TOOL], store=False
        ) as stream:
            first = stream.get_final_response()
        (call,) = [item for item in first.output if item.type == "function_call"]
        output = {"type": "function_call_output", "call_id": call.call_id, "output": "22°C"}
        with client.responses.stream(
            model="qwen3-coder",
            input=[question, *first.output, output],
            tools=[WEATHER_TOOL],
            store=False,
        ) as stream:
            return first, stream.get_final_response()

    (first, final), upstream, outcomes = await run(
        start_upstream,
        proxai_for,
        [sse(TOOL_CALL_STREAM), sse(TEXT_STREAM)],
        two_turns,
        count=2,
    )
    reasoning = first.output[0]
    assert reasoning.type == "reasoning" and reasoning.encrypted_content is None
    assert final.output_text == "It is sunny."
    second = json.loads(upstream.requests[1].body)["messages"]
    assert [m["role"] for m in second] == ["user", "assistant", "tool"]
    assert second[1]["reasoning_content"] == "The user wants weather."
    assert second[1]["tool_calls"][0]["id"] == "call_w1"
    assert all("input.reasoning" not in outcome.dropped for outcome in outcomes)


async def test_a_stall_mid_tool_arguments_ends_the_responses_client_with_its_error(
    start_upstream: Any, proxai_for: Any
) -> None:
    # What the SDK makes of the stall is the test (its timing is on a virtual clock in
    # tests/relay/test_deadlines.py): only tool_arguments is short.
    script = sse(TOOL_CALL_STREAM[:5], then=[Stall()])
    error, _, (outcome,) = await run(
        start_upstream,
        proxai_for,
        [script],
        capture(responses_stream),
        timeouts=stall_timeouts("tool_arguments"),
    )
    assert isinstance(error, openai.APIError) and not isinstance(error, openai.APIStatusError)
    assert "stalled" in error.message
    assert outcome.kind is OutcomeKind.STALLED_TOOL_ARGUMENTS


async def test_a_client_that_hangs_up_after_its_terminal_event_completed_its_exchange(
    autojump_clock: MockClock,
) -> None:
    # Codex closes its connection as soon as it reads response.completed, which proxai
    # sends at the Chat upstream's usage chunk, before the upstream's [DONE] (5 s later
    # here). On a virtual clock the hang-up is exactly between the two (at 0.5 s): the
    # client had its whole response, so the exchange is completed, ended by the
    # after-terminal grace (1 s) as it would have been without the hang-up.
    late_done = sse(TOOL_CALL_STREAM[:-1], then=[Sleep(5), Send(TOOL_CALL_STREAM[-1])])
    body = {"model": "qwen3-coder", "input": "Weather in Paris?", "stream": True}
    async with MemoryProxy([late_done], upstream=CHAT_UPSTREAM) as proxy:
        exchange = await proxy.request(body, disconnect_after=0.5)
        closed_at = await proxy.transport.requests[0].wait_closed()
    assert exchange.events()[-1]["type"] == "response.completed"
    assert closed_at - exchange.started_at == 1.0  # the grace, not the [DONE] at 5 s
    outcome = exchange.outcome
    assert outcome is not None and outcome.kind is OutcomeKind.COMPLETED
    assert outcome.total_s == 1.0
    assert outcome.usage is not None and outcome.usage["prompt_tokens"] == 120
    assert [call.name for call in outcome.calls] == ["get_weather"]


async def test_an_early_close_is_never_a_success(start_upstream: Any, proxai_for: Any) -> None:
    # finish_reason came, but the stream closed before [DONE]: the client gets an error.
    error, _, (outcome,) = await run(
        start_upstream, proxai_for, [sse(TEXT_STREAM[:2])], capture(responses_stream)
    )
    assert isinstance(error, openai.APIError)
    assert outcome.kind is OutcomeKind.UPSTREAM_EOF


async def test_an_upstream_error_chunk_fails_the_response(
    start_upstream: Any, proxai_for: Any
) -> None:
    failing = [
        chunk({"role": "assistant", "content": "Hm"}),
        b'data: {"error": {"message": "model overloaded", "type": "server_error", '
        b'"code": "overloaded"}}\n\n',
    ]
    error, _, (outcome,) = await run(
        start_upstream, proxai_for, [sse(failing)], capture(responses_stream)
    )
    assert isinstance(error, openai.APIError)
    assert "model overloaded" in error.message
    assert outcome.kind is OutcomeKind.FAILED


async def test_a_non_streamed_responses_request_gets_a_whole_response(
    start_upstream: Any, proxai_for: Any
) -> None:
    completion = {
        "id": "chatcmpl-9",
        "object": "chat.completion",
        "created": 1767225600,
        "model": "qwen3-coder",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Bonjour"},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
    }
    script = Script.json(completion)

    def create(url: str) -> Any:
        return openai_client(url).responses.create(model="qwen3-coder", input="Say hello")

    response, upstream, (outcome,) = await run(start_upstream, proxai_for, [script], create)
    assert response.output_text == "Bonjour"
    assert response.usage.total_tokens == 7
    assert json.loads(upstream.requests[0].body).get("stream") in (None, False)
    assert outcome.kind is OutcomeKind.COMPLETED


async def test_an_upstream_429_reaches_the_client_in_its_apis_shape_with_retry_after(
    start_upstream: Any, proxai_for: Any
) -> None:
    body = b'{"error": {"message": "slow down", "type": "rate_limit_error", "code": null}}'
    script = Script(
        status=429,
        headers=[("content-type", "application/json"), ("retry-after", "7")],
        steps=[Send(body)],
    )
    error, _, _ = await run(start_upstream, proxai_for, [script], capture(responses_stream))
    assert isinstance(error, openai.RateLimitError)
    assert error.response.headers["retry-after"] == "7"
    assert "slow down" in error.message


async def test_previous_response_id_cannot_be_honoured_statelessly(
    start_upstream: Any, proxai_for: Any
) -> None:
    def create(url: str) -> Any:
        return openai_client(url).responses.create(
            model="qwen3-coder", input="more", previous_response_id="resp_1"
        )

    error, upstream, _ = await run(start_upstream, proxai_for, [], capture(create))
    assert isinstance(error, openai.BadRequestError)
    assert error.body["param"] == "previous_response_id"
    assert upstream.requests == []


# --- Messages client (Claude Code) over a Chat upstream -------------------------------------


async def test_a_messages_client_gets_a_chat_upstreams_tool_call_as_anthropic_events(
    start_upstream: Any, proxai_for: Any
) -> None:
    final, upstream, (outcome,) = await run(
        start_upstream, proxai_for, [sse(TOOL_CALL_STREAM)], messages_stream
    )
    assert [block.type for block in final.content] == ["thinking", "text", "tool_use"]
    assert final.content[0].thinking == "The user wants weather."
    assert final.content[1].text == "Let me check."
    assert (final.content[2].name, final.content[2].input) == ("get_weather", {"city": "Paris"})
    assert final.stop_reason == "tool_use"
    assert final.usage.output_tokens == 30
    assert final.usage.cache_read_input_tokens == 100
    (request,) = upstream.requests
    assert request.target == "/v1/chat/completions"
    sent = json.loads(request.body)
    assert sent["messages"][0] == {"role": "system", "content": "You are terse."}
    assert sent["max_tokens"] == 1024
    assert outcome.translation == "messages→chat"
    assert outcome.kind is OutcomeKind.COMPLETED


async def test_a_kimi_tool_id_goes_back_to_the_chat_upstream_as_it_issued_it(
    start_upstream: Any, proxai_for: Any
) -> None:
    """Kimi K2 names its calls ``functions.NAME:N``, which Anthropic's id pattern refuses:
    the Messages client gets an id it can use, and its tool_result next turn reaches the
    upstream under the id the upstream issued."""
    kimi_id = "functions.get_weather:0"
    stream = [line.replace(b'"call_w1"', orjson.dumps(kimi_id)) for line in TOOL_CALL_STREAM]
    tools = [{"name": "get_weather", "input_schema": {"type": "object"}}]

    def two_turns(url: str) -> Any:
        client = anthropic_client(url)
        question = {"role": "user", "content": "Weather in Paris?"}
        with client.messages.stream(
            model="claude-sonnet-4-5", max_tokens=1024, messages=[question], tools=tools
        ) as first_stream:
            first = first_stream.get_final_message()
        call = first.content[-1]
        result = {"type": "tool_result", "tool_use_id": call.id, "content": "22°C"}
        history = [
            question,
            {"role": "assistant", "content": first.content},
            {"role": "user", "content": [result]},
        ]
        with client.messages.stream(
            model="claude-sonnet-4-5", max_tokens=1024, messages=history, tools=tools
        ) as second_stream:
            return first, second_stream.get_final_message()

    (first, final), upstream, _ = await run(
        start_upstream, proxai_for, [sse(stream), sse(TEXT_STREAM)], two_turns, count=2
    )
    call = first.content[-1]
    assert call.type == "tool_use" and re.fullmatch(r"[a-zA-Z0-9_-]+", call.id)
    assert final.content[0].text == "It is sunny."
    second = json.loads(upstream.requests[1].body)["messages"]
    assert [m["role"] for m in second] == ["user", "assistant", "tool"]
    assert second[1]["tool_calls"][0]["id"] == kimi_id
    assert second[2]["tool_call_id"] == kimi_id


async def test_claude_codes_query_and_headers_do_not_reach_a_chat_upstream_as_a_path(
    start_upstream: Any, proxai_for: Any
) -> None:
    def beta(url: str) -> Any:
        client = anthropic_client(url)
        return client.beta.messages.create(
            model="claude-sonnet-4-5",
            max_tokens=64,
            messages=[{"role": "user", "content": "hi"}],
            betas=["context-management-2025-06-27"],
        )

    message, upstream, _ = await run(
        start_upstream, proxai_for, [Script.json(CHAT_COMPLETION)], beta
    )
    assert message.content[0].text == "Hello"
    assert upstream.requests[0].target == "/v1/chat/completions"


async def test_a_stall_ends_the_messages_client_with_an_overloaded_error(
    start_upstream: Any, proxai_for: Any
) -> None:
    script = sse(TOOL_CALL_STREAM[:5], then=[Stall()])
    error, _, (outcome,) = await run(
        start_upstream,
        proxai_for,
        [script],
        capture(messages_stream),
        timeouts=stall_timeouts("tool_arguments"),
    )
    assert isinstance(error, anthropic.APIStatusError)
    assert error.body["error"]["type"] == "overloaded_error"
    assert outcome.kind is OutcomeKind.STALLED_TOOL_ARGUMENTS


async def test_count_tokens_for_a_model_on_a_chat_upstream_is_estimated_by_proxai(
    start_upstream: Any, proxai_for: Any
) -> None:
    def count(url: str) -> Any:
        return anthropic_client(url).messages.count_tokens(
            model="claude-sonnet-4-5", messages=[{"role": "user", "content": "x" * 400}]
        )

    result, upstream, (outcome,) = await run(start_upstream, proxai_for, [], count)
    assert 100 <= result.input_tokens <= 120
    assert upstream.requests == []
    assert outcome.status == 200


async def test_a_route_fails_over_from_an_anthropic_upstream_to_a_chat_one(
    start_upstream: Any, proxai_for: Any
) -> None:
    anthropic_down = await start_upstream([Script(status=529, steps=[Send(b"{}")])])
    chat = await start_upstream([sse(TEXT_STREAM)])

    def ask(url: str) -> Any:
        with anthropic_client(url).messages.stream(
            model="claude-sonnet-4-5",
            max_tokens=64,
            messages=[{"role": "user", "content": "weather?"}],
        ) as stream:
            return stream.get_final_message()

    async with proxai_for(
        anthropic_down,
        upstream={"protocol": "anthropic_messages"},
        upstreams={"local": {"base_url": chat.base_url, **CHAT_UPSTREAM}},
        routes=[{"model": "claude-*", "upstreams": ["default", "local"]}],
        retries={"max_attempts": 2},
        timeouts=REAL_TIMEOUTS,
    ) as px:
        with trio.fail_after(20):
            final = await trio.to_thread.run_sync(ask, px.url)
            (outcome,) = await px.wait_for_outcomes(1)
    assert final.content[0].text == "It is sunny."
    assert [a.upstream for a in outcome.attempts] == ["default", "local"]
    assert outcome.translation == "messages→chat"
    assert anthropic_down.requests[0].target.startswith("/v1/messages")


# --- Chat client over a Responses upstream --------------------------------------------------


@pytest.mark.skipif(not FIXTURES.is_dir(), reason="the shared fixtures folder is absent")
async def test_a_chat_client_gets_a_responses_upstreams_function_call(
    start_upstream: Any, proxai_for: Any
) -> None:
    body = (FIXTURES / "responses_function_call_usage.1.sse").read_bytes()

    def chat(url: str) -> Any:
        return chat_stream(url, "gpt-5.4", [{"role": "user", "content": "weather?"}])

    final, upstream, (outcome,) = await run(
        start_upstream,
        proxai_for,
        [Script.sse([body], chunk_size=97)],
        chat,
        upstream={"protocol": "openai_responses"},
    )
    calls = final.choices[0].message.tool_calls
    assert calls and calls[0].function.name
    assert final.choices[0].finish_reason == "tool_calls"
    assert final.usage is not None and final.usage.total_tokens > 0
    assert upstream.requests[0].target == "/v1/responses"
    assert outcome.translation == "chat→responses"


# --- the other pairs --------------------------------------------------------------------------


def anthropic_event(kind: str, **body: Any) -> bytes:
    return f"event: {kind}\ndata: ".encode() + orjson.dumps({"type": kind, **body}) + b"\n\n"


MESSAGES_STREAM = [
    anthropic_event(
        "message_start",
        message={
            "id": "msg_01",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-5",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 40, "output_tokens": 1},
        },
    ),
    b": ping\n\n",
    anthropic_event("content_block_start", index=0, content_block={"type": "text", "text": ""}),
    anthropic_event("content_block_delta", index=0, delta={"type": "text_delta", "text": "Hi"}),
    anthropic_event("content_block_stop", index=0),
    anthropic_event(
        "content_block_start",
        index=1,
        content_block={"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}},
    ),
    anthropic_event(
        "content_block_delta",
        index=1,
        delta={"type": "input_json_delta", "partial_json": '{"city": "Oslo"}'},
    ),
    anthropic_event("content_block_stop", index=1),
    anthropic_event(
        "message_delta",
        delta={"stop_reason": "tool_use", "stop_sequence": None},
        usage={"output_tokens": 12},
    ),
    anthropic_event("message_stop"),
]
ANTHROPIC_UPSTREAM = {"protocol": "anthropic_messages"}


async def test_a_chat_client_gets_an_anthropic_upstreams_tool_use_as_chat_chunks(
    start_upstream: Any, proxai_for: Any
) -> None:
    def chat(url: str) -> Any:
        messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "?"}]
        return chat_stream(url, "claude-sonnet-4-5", messages)

    final, upstream, (outcome,) = await run(
        start_upstream, proxai_for, [sse(MESSAGES_STREAM)], chat, upstream=ANTHROPIC_UPSTREAM
    )
    message = final.choices[0].message
    assert message.content == "Hi"
    assert message.tool_calls[0].function.name == "get_weather"
    assert json.loads(message.tool_calls[0].function.arguments) == {"city": "Oslo"}
    assert final.choices[0].finish_reason == "tool_calls"
    assert final.usage is not None and final.usage.completion_tokens == 12
    request = upstream.requests[0]
    assert request.target == "/v1/messages"
    assert request.header("x-api-key") == "sk-upstream-test"
    sent = json.loads(request.body)
    assert sent["system"] == "Be brief." or sent["system"][0]["text"] == "Be brief."
    assert sent["max_tokens"] > 0
    assert outcome.translation == "chat→messages"


async def test_a_responses_client_gets_an_anthropic_upstreams_tool_use(
    start_upstream: Any, proxai_for: Any
) -> None:
    final, upstream, (outcome,) = await run(
        start_upstream,
        proxai_for,
        [sse(MESSAGES_STREAM)],
        responses_stream,
        upstream=ANTHROPIC_UPSTREAM,
    )
    assert [item.type for item in final.output] == ["message", "function_call"]
    assert final.output[0].content[0].text == "Hi"
    assert json.loads(final.output[1].arguments) == {"city": "Oslo"}
    assert upstream.requests[0].target == "/v1/messages"
    assert outcome.translation == "responses→messages"


async def test_an_upstream_keep_alive_becomes_an_anthropic_ping(
    start_upstream: Any, proxai_for: Any
) -> None:

    stream = [*TEXT_STREAM[:1], b": keep-alive\n\n", *TEXT_STREAM[1:]]

    def raw(url: str) -> bytes:
        body = {
            "model": "m",
            "max_tokens": 9,
            "stream": True,
            "messages": [{"role": "user", "content": "?"}],
        }
        return httpx.post(url + "/v1/messages", json=body, timeout=15).content

    body, _, _ = await run(start_upstream, proxai_for, [sse(stream)], raw)
    assert b"event: ping\n" in body
    assert b"keep-alive" not in body


async def test_the_base_url_answers_a_probe_without_going_upstream(
    start_upstream: Any, proxai_for: Any
) -> None:

    def probe(url: str) -> tuple[int, int, bytes]:
        head = httpx.head(url + "/", timeout=5)
        get = httpx.get(url + "/", timeout=5)
        return head.status_code, get.status_code, get.content

    (head, get, body), upstream, _ = await run(start_upstream, proxai_for, [], probe, count=0)
    assert (head, get) == (200, 200)
    assert json.loads(body)["service"] == "proxai"
    assert upstream.requests == []
