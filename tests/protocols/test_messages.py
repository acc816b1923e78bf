"""Anthropic Messages: routing and keys, the observer's deadlines, and the anthropic SDK."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import trio
from trio.testing import MockClock

from proxai.outcome import OutcomeKind
from proxai.testing import Close, Script, Send, Sleep, Stall
from proxai.testing.memory_proxy import MemoryProxy
from proxai.testing.streams import data_frames
from tests.helpers import (
    ANTHROPIC_UPSTREAM,
    END,
    MESSAGE_START,
    MESSAGES,
    REAL_TIMEOUTS,
    REQUEST,
    TEXT,
    TOOL,
    WHOLE,
    event,
    stall_timeouts,
)

anthropic = pytest.importorskip("anthropic")

SSE_HEADERS = (("content-type", "text/event-stream; charset=utf-8"), ("request-id", "req_1"))


def second_tool(partial_json: str) -> list[bytes]:
    """A second tool_use block (index 2, get_aqi): start, one input delta, stop."""
    return [
        event(
            "content_block_start",
            index=2,
            content_block={"type": "tool_use", "id": "toolu_02", "name": "get_aqi", "input": {}},
        ),
        event(
            "content_block_delta",
            index=2,
            delta={"type": "input_json_delta", "partial_json": partial_json},
        ),
        event("content_block_stop", index=2),
    ]


def sse(events: list[bytes], then: list[Any] | None = None) -> Script:
    return Script(headers=SSE_HEADERS, steps=[*(Send(e) for e in events), *(then or [])])


def error_event(body: bytes) -> dict[str, Any]:
    frames = data_frames(body, whole=False)
    assert frames[-1].event == "error"
    payload: dict[str, Any] = json.loads(frames[-1].data or b"")
    assert payload["type"] == "error"
    assert set(payload["error"]) == {"type", "message"}
    return payload["error"]


# --- routing and keys -----------------------------------------------------------------------


async def test_messages_go_to_the_anthropic_upstream_with_its_key(
    autojump_clock: MockClock,
) -> None:
    async with MemoryProxy([sse(WHOLE)], upstreams=ANTHROPIC_UPSTREAM) as proxy:
        exchange = await proxy.request(
            REQUEST,
            path=MESSAGES,
            headers=[
                (b"x-api-key", b"sk-ant-client"),
                (b"authorization", b"Bearer sk-client"),
                (b"anthropic-version", b"2023-06-01"),
                (b"anthropic-beta", b"fine-grained-tool-streaming-2025-05-14"),
            ],
        )
    assert exchange.body == b"".join(WHOLE)
    (request,) = proxy.transport.requests
    assert request.target == "/v1/messages"
    assert request.header("x-api-key") == "sk-ant-upstream"
    assert request.header("authorization") is None
    assert request.header("anthropic-version") == "2023-06-01"
    assert request.header("anthropic-beta") == "fine-grained-tool-streaming-2025-05-14"
    outcome = exchange.outcome
    assert outcome is not None
    assert outcome.kind is OutcomeKind.COMPLETED
    assert outcome.upstream == "claude"
    assert outcome.model == "claude-test-model"
    assert outcome.tools == ["get_weather"]
    assert outcome.usage == {"input_tokens": 25, "output_tokens": 42}
    assert [(c.type, c.name, c.arguments_length) for c in outcome.calls] == [
        ("tool_use", "get_weather", len('{"city": "北京"}'))
    ]


async def test_without_an_anthropic_upstream_other_messages_paths_are_an_anthropic_404(
    autojump_clock: MockClock,
) -> None:
    # POST /v1/messages itself is translated for an OpenAI-compatible upstream
    # (tests/translate/test_end_to_end.py); the rest of Anthropic's API has no translation.
    async with MemoryProxy([sse(WHOLE)]) as proxy:
        exchange = await proxy.request(b"", path=MESSAGES + "/batches", method="GET")
    assert exchange.status == 404
    body = exchange.json()
    assert body["type"] == "error"
    assert body["error"]["type"] == "not_found_error"
    assert "no Anthropic upstream is configured" in body["error"]["message"]
    assert proxy.transport.requests == []


async def test_errors_before_the_stream_are_anthropic_shaped(autojump_clock: MockClock) -> None:
    async with MemoryProxy([Script(before_head=[Stall()])], upstreams=ANTHROPIC_UPSTREAM) as proxy:
        timeout = await proxy.request(REQUEST, path=MESSAGES)
        invalid = await proxy.request(b"{nope", path=MESSAGES)
        projected = await proxy.request({**REQUEST, "max_tokens": "many"}, path=MESSAGES)
    assert (timeout.status, timeout.json()["error"]["type"]) == (504, "timeout_error")
    assert (invalid.status, invalid.json()["error"]["type"]) == (400, "invalid_request_error")
    assert projected.status == 400
    assert projected.json() == {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "invalid request: max_tokens: expected an integer, got a string",
        },
    }


# --- deadlines on a virtual clock (first_byte 10, tool_arguments 20, idle 30) ---------------


async def test_stall_in_tool_input_fires_tool_arguments(autojump_clock: MockClock) -> None:
    script = sse([MESSAGE_START, *TEXT, *TOOL[:3]], then=[Sleep(2), Send(b": keep\n\n"), Stall()])
    async with MemoryProxy([script], upstreams=ANTHROPIC_UPSTREAM) as proxy:
        exchange = await proxy.request(REQUEST, path=MESSAGES)
    assert exchange.elapsed == 20.0
    error = error_event(exchange.body)
    assert error == {
        "type": "overloaded_error",
        "message": (
            "upstream stalled for 20.0 s while streaming input of tool_use get_weather (toolu_01)"
        ),
    }
    assert exchange.outcome is not None
    assert exchange.outcome.kind is OutcomeKind.STALLED_TOOL_ARGUMENTS
    assert exchange.outcome.stalled_item == "tool_use get_weather (toolu_01)"


async def test_pings_keep_idle_alive_but_not_an_open_tool(autojump_clock: MockClock) -> None:
    steps: list[Any] = [Send(MESSAGE_START + TOOL[0] + TOOL[2])]
    for _ in range(10):
        steps += [Sleep(6), Send(event("ping"))]
    async with MemoryProxy(
        [Script(headers=SSE_HEADERS, steps=steps)], upstreams=ANTHROPIC_UPSTREAM
    ) as proxy:
        exchange = await proxy.request(REQUEST, path=MESSAGES)
    assert exchange.elapsed == 20.0
    assert (
        exchange.outcome is not None and exchange.outcome.kind is OutcomeKind.STALLED_TOOL_ARGUMENTS
    )


async def test_stall_mid_text_is_idle(autojump_clock: MockClock) -> None:
    async with MemoryProxy(
        [sse([MESSAGE_START, *TEXT[:3]], then=[Stall()])], upstreams=ANTHROPIC_UPSTREAM
    ) as proxy:
        exchange = await proxy.request(REQUEST, path=MESSAGES)
    assert exchange.elapsed == 30.0
    assert error_event(exchange.body) == {
        "type": "overloaded_error",
        "message": "upstream sent nothing for 30.0 s while streaming text of text block 0",
    }


@pytest.mark.parametrize("ending", [None, Close()])
async def test_no_message_stop_before_eof_gets_an_api_error(
    autojump_clock: MockClock, ending: Any
) -> None:
    script = sse([MESSAGE_START, *TEXT, *TOOL[:3]], then=[ending] if ending else [])
    async with MemoryProxy([script], upstreams=ANTHROPIC_UPSTREAM) as proxy:
        exchange = await proxy.request(REQUEST, path=MESSAGES)
    error = error_event(exchange.body)
    assert error["type"] == "api_error"
    assert (
        "before the response completed while streaming input of tool_use get_weather"
        in error["message"]
    )


async def test_an_upstream_error_event_is_terminal(autojump_clock: MockClock) -> None:
    overloaded = event("error", error={"type": "overloaded_error", "message": "Overloaded"})
    async with MemoryProxy(
        [sse([MESSAGE_START, overloaded], then=[Stall()])], upstreams=ANTHROPIC_UPSTREAM
    ) as proxy:
        exchange = await proxy.request(REQUEST, path=MESSAGES)
    assert exchange.body == MESSAGE_START + overloaded
    assert exchange.elapsed == 1.0
    assert exchange.outcome is not None and exchange.outcome.kind is OutcomeKind.FAILED


async def test_an_error_event_with_text_data_is_terminal(autojump_clock: MockClock) -> None:
    error = b"event: error\ndata: upstream gateway timeout\n\n"
    async with MemoryProxy(
        [sse([MESSAGE_START, error], then=[Stall()])], upstreams=ANTHROPIC_UPSTREAM
    ) as proxy:
        exchange = await proxy.request(REQUEST, path=MESSAGES)
    assert exchange.body == MESSAGE_START + error  # nothing appended
    assert exchange.outcome is not None and exchange.outcome.kind is OutcomeKind.FAILED


async def test_max_tokens_is_incomplete(autojump_clock: MockClock) -> None:
    end = [
        event("message_delta", delta={"stop_reason": "max_tokens"}, usage={"output_tokens": 9}),
        event("message_stop"),
    ]
    async with MemoryProxy(
        [sse([MESSAGE_START, *TEXT, *end])], upstreams=ANTHROPIC_UPSTREAM
    ) as proxy:
        exchange = await proxy.request(REQUEST, path=MESSAGES)
    assert exchange.outcome is not None and exchange.outcome.kind is OutcomeKind.INCOMPLETE


# --- the official anthropic SDK through a real server ---------------------------------------


def drive(base_url: str) -> tuple[list[str], str, BaseException | None]:
    client = anthropic.Anthropic(
        base_url=base_url, api_key="sk-ant-client", max_retries=0, timeout=20
    )
    kinds: list[str] = []
    partial = ""
    try:
        for ev in client.messages.create(**REQUEST):
            kinds.append(ev.type)
            if ev.type == "content_block_delta" and ev.delta.type == "input_json_delta":
                partial += ev.delta.partial_json
    except Exception as exc:
        return kinds, partial, exc
    return kinds, partial, None


async def run_sdk(
    start_upstream: Any,
    proxai_for: Any,
    script: Script,
    timeouts: dict[str, float] = REAL_TIMEOUTS,
) -> Any:
    """The anthropic SDK against a real proxai: ``timeouts`` far (a healthy stream) unless a
    test's stall needs its one deadline short (what the SDK makes of it is the test; when
    it fires is on the virtual clock above)."""
    upstream = await start_upstream([script])
    tables = {
        "upstreams": {
            "claude": {
                "protocol": "anthropic_messages",
                "base_url": upstream.base_url,
                "api_key": "sk-ant-upstream",
            }
        }
    }
    async with proxai_for(upstream, timeouts=timeouts, **tables) as px:
        started = trio.current_time()
        with trio.fail_after(15):
            result = await trio.to_thread.run_sync(drive, px.url)
            (outcome,) = await px.wait_for_outcomes(1)
        elapsed = trio.current_time() - started
    return (*result, outcome, elapsed, upstream)


async def test_sdk_reads_a_healthy_stream(start_upstream: Any, proxai_for: Any) -> None:
    kinds, partial, error, outcome, _, upstream = await run_sdk(
        start_upstream,
        proxai_for,
        Script.sse([b"".join(WHOLE)], chunk_size=37, headers=SSE_HEADERS),
    )
    assert error is None
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert json.loads(partial) == {"city": "北京"}
    assert outcome.kind is OutcomeKind.COMPLETED
    assert upstream.requests[0].header("x-api-key") == "sk-ant-upstream"


async def test_sdk_raises_on_a_stall_in_tool_input(start_upstream: Any, proxai_for: Any) -> None:
    _, partial, error, outcome, elapsed, _ = await run_sdk(
        start_upstream,
        proxai_for,
        sse([MESSAGE_START, *TEXT, *TOOL[:3]], then=[Stall()]),
        stall_timeouts("tool_arguments"),
    )
    assert isinstance(error, anthropic.APIStatusError)
    assert "overloaded_error" in str(error)
    assert "upstream stalled for 0.3 s while streaming input of tool_use get_weather" in str(error)
    assert partial == '{"city": '
    assert outcome.kind is OutcomeKind.STALLED_TOOL_ARGUMENTS
    assert elapsed < 5


async def test_sdk_gets_a_retryable_error_before_the_stream(
    start_upstream: Any, proxai_for: Any
) -> None:
    kinds, _, error, outcome, _, _ = await run_sdk(
        start_upstream,
        proxai_for,
        Script(headers=SSE_HEADERS, steps=[Stall()]),
        stall_timeouts("idle"),
    )
    assert kinds == []
    assert isinstance(error, anthropic.InternalServerError)
    assert error.status_code == 504
    assert error.body["error"]["type"] == "timeout_error"
    assert outcome.kind is OutcomeKind.STALLED_IDLE


async def test_anthropic_sdk_models_list_goes_to_the_anthropic_upstream(
    start_upstream: Any, proxai_for: Any
) -> None:
    openai_upstream = await start_upstream([Script.json({"object": "list", "data": []})])
    claude = await start_upstream(
        [Script.json({"data": [], "has_more": False, "first_id": None, "last_id": None})]
    )
    tables = {
        "upstreams": {
            "claude": {
                "protocol": "anthropic_messages",
                "base_url": claude.base_url,
                "api_key": "sk-ant-upstream",
            }
        }
    }
    async with proxai_for(openai_upstream, **tables) as px, httpx.AsyncClient() as client:
        await client.get(px.base_url + "/models", headers={"anthropic-version": "2023-06-01"})
        await client.get(px.base_url + "/models")
    assert [r.target for r in claude.requests] == ["/v1/models"]
    assert claude.requests[0].header("x-api-key") == "sk-ant-upstream"
    assert [r.target for r in openai_upstream.requests] == ["/v1/models"]
    assert openai_upstream.requests[0].header("authorization") == "Bearer sk-upstream-test"


async def test_parallel_tool_use_blocks_are_each_guarded(autojump_clock: MockClock) -> None:
    second = second_tool("{")[:-1]  # still open
    steps: list[Any] = [Send(MESSAGE_START + b"".join(TOOL) + b"".join(second))]
    async with MemoryProxy(
        [Script(headers=SSE_HEADERS, steps=[*steps, Stall()])], upstreams=ANTHROPIC_UPSTREAM
    ) as proxy:
        exchange = await proxy.request(REQUEST, path=MESSAGES)
    assert exchange.elapsed == 20.0
    assert exchange.outcome is not None
    assert exchange.outcome.stalled_item == "tool_use get_aqi (toolu_02)"
    assert [(c.name, c.arguments_length) for c in exchange.outcome.calls] == [
        ("get_weather", len('{"city": "北京"}')),
        ("get_aqi", 1),
    ]


async def test_sdk_reads_parallel_tool_use_blocks(start_upstream: Any, proxai_for: Any) -> None:
    second = second_tool('{"city": "北京"}')
    stream = b"".join([MESSAGE_START, *TEXT, *TOOL, *second, *END])
    _, partial, error, outcome, _, _ = await run_sdk(
        start_upstream, proxai_for, Script.sse([stream], chunk_size=53, headers=SSE_HEADERS)
    )
    assert error is None
    assert partial == '{"city": "北京"}{"city": "北京"}'
    assert outcome.kind is OutcomeKind.COMPLETED
    assert [c.name for c in outcome.calls] == ["get_weather", "get_aqi"]
