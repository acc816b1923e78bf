"""Stored responses with the official openai SDK on real sockets (issue 23): the seed's
two turns through proxai onto upstreams that keep nothing (Chat-only, Anthropic), then
``retrieve``, ``input_items.list``, ``delete`` and ``retrieve`` again (``NotFoundError``)."""

from __future__ import annotations

from typing import Any

import openai
import pytest
import trio

from proxai.testing import RecordedRequest, Script
from proxai.testing.seed import TURN1_REQUEST, TURN2_REQUEST, WEATHER_RESULT

from ..helpers import CHAT_UPSTREAM, END, MESSAGE_START, TEXT, TOOL, event, openai_client
from .test_websocket import chat_turns

ANTHROPIC = {"protocol": "anthropic_messages", "api_key": "sk-ant-upstream"}


def anthropic_turns(request: RecordedRequest) -> Script:
    """An Anthropic upstream: a get_weather call first, text after its tool_result."""
    body = request.json()
    answered = any(
        isinstance(m["content"], list)
        and any(block.get("type") == "tool_result" for block in m["content"])
        for m in body["messages"]
    )
    if not answered:
        return Script.sse([MESSAGE_START, *TEXT, *TOOL, *END])
    text = [
        event("content_block_start", index=0, content_block={"type": "text", "text": ""}),
        event("content_block_delta", index=0, delta={"type": "text_delta", "text": "适合慢跑。"}),
        event("content_block_stop", index=0),
        event("message_delta", delta={"stop_reason": "end_turn"}, usage={"output_tokens": 5}),
        event("message_stop"),
    ]
    return Script.sse([MESSAGE_START, *text])


def unchained(request: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in request.items() if k not in ("stream", "previous_response_id")}


def seed_then_manage(url: str) -> dict[str, Any]:
    """The seed's two turns as an app writes them with the SDK (turn 2: the id of turn 1
    and only the tool's output), then the stored-response calls on turn 1."""
    client = openai_client(url)
    seen: dict[str, Any] = {}
    with client.responses.stream(**unchained(TURN1_REQUEST)) as stream:
        first = stream.get_final_response()
    (call,) = [item for item in first.output if item.type == "function_call"]
    output = {**TURN2_REQUEST["input"][0], "call_id": call.call_id}
    with client.responses.stream(
        model=TURN2_REQUEST["model"], previous_response_id=first.id, input=[output]
    ) as stream:
        second = stream.get_final_response()
    seen["first"], seen["second"], seen["call"] = first, second, call
    seen["retrieved"] = client.responses.retrieve(first.id)
    seen["inputs"] = list(client.responses.input_items.list(first.id))
    seen["second_inputs"] = list(client.responses.input_items.list(second.id, order="asc"))
    seen["deleted"] = client.responses.delete(first.id)
    try:
        client.responses.retrieve(first.id)
    except openai.NotFoundError as exc:
        seen["gone"] = exc
    try:
        client.responses.create(
            model=TURN2_REQUEST["model"], previous_response_id=first.id, input=[output]
        )
    except openai.BadRequestError as exc:
        seen["chained_after_delete"] = exc
    return seen


@pytest.mark.parametrize(
    ("kind", "responder", "upstream_table"),
    [("chat", chat_turns, CHAT_UPSTREAM), ("anthropic", anthropic_turns, ANTHROPIC)],
)
async def test_the_seed_and_the_stored_response_calls_on_an_upstream_that_keeps_nothing(
    start_upstream: Any, proxai_for: Any, kind: str, responder: Any, upstream_table: Any
) -> None:
    upstream = await start_upstream(responder)
    async with proxai_for(upstream, upstream=upstream_table) as px:
        with trio.fail_after(30):
            seen = await trio.to_thread.run_sync(seed_then_manage, px.url)
    first, second = seen["first"], seen["second"]
    assert first.status == "completed" and first.id.startswith("resp_")
    assert second.status == "completed" and second.previous_response_id == first.id
    assert second.output_text == "适合慢跑。"
    # The upstream's second request held the whole history, in order.
    sent = upstream.requests[1].json()
    if kind == "chat":
        assert [m["role"] for m in sent["messages"]] == ["user", "assistant", "tool"]
        assert sent["messages"][2]["content"] == WEATHER_RESULT
    else:
        roles = [m["role"] for m in sent["messages"]]
        assert roles == ["user", "assistant", "user"]
        blocks = sent["messages"][1]["content"]
        assert any(b["type"] == "tool_use" and b["id"] == seen["call"].call_id for b in blocks)
        result = sent["messages"][2]["content"][0]
        assert result["type"] == "tool_result" and result["tool_use_id"] == seen["call"].call_id
    assert "previous_response_id" not in sent
    # retrieve: the stored object, as the client saw it at the end of the stream.
    retrieved = seen["retrieved"]
    assert retrieved.id == first.id and retrieved.status == "completed"
    assert [i.type for i in retrieved.output] == [i.type for i in first.output]
    # input_items: turn 1's user message; turn 2's: the whole expanded input, in order.
    assert [i.type for i in seen["inputs"]] == ["message"]
    assert [i.type for i in seen["second_inputs"]] == [
        "message",
        *[i.type for i in first.output],
        "function_call_output",
    ]
    assert (
        seen["deleted"] is None
    )  # the SDK's delete() returns nothing (the body is checked in memory)
    assert seen["gone"].status_code == 404
    error = seen["chained_after_delete"].body
    assert error["code"] == "previous_response_not_found"
    assert error["param"] == "previous_response_id"
    assert len(upstream.requests) == 2  # retrieve, list, delete and the 400: proxai's own
