"""Compaction on upstreams that do not compact (issue 23), in memory on virtual time:
``POST /v1/responses/compact`` and the ``compaction_trigger`` form over a Chat and an
Anthropic upstream, the compaction item coming back as its summary, a stall during the
summarizing request, and an upstream that compacts itself left to do so."""

from __future__ import annotations

import json
from typing import Any

import orjson
import trio
import trio.testing

from proxai.outcome import OutcomeKind
from proxai.protocols.responses.compaction import Summary, seal, unseal
from proxai.testing import Script, Stall
from proxai.testing.memory_proxy import MemoryProxy
from proxai.testing.upstream import RecordedRequest, chat_chunk, sse_event

SUMMARY = "The user asked for the weather in 北京; get_weather said sunny. Next: plan a run."
TOOL = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}
HISTORY: list[dict[str, Any]] = [
    {"type": "message", "role": "user", "content": "Weather in 北京?"},
    {
        "type": "function_call",
        "call_id": "call_1",
        "name": "get_weather",
        "arguments": '{"city":"北京"}',
    },
    {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
    {"type": "message", "role": "assistant", "content": "It is sunny."},
]
TRIGGERED = {
    "model": "gpt-5.4",
    "instructions": "You are Codex.",
    "input": [*HISTORY, {"type": "compaction_trigger"}],
    "tools": [TOOL],
    "stream": True,
    "store": False,
}
COMPACT = {"model": "gpt-5.4", "instructions": "You are Codex.", "input": HISTORY, "tools": [TOOL]}
CHAT = {"protocol": "openai_chat"}
ANTHROPIC = {"protocol": "anthropic_messages"}


def chat_summary(request: RecordedRequest) -> Script:
    """A Chat upstream that writes :data:`SUMMARY` (thinking first), streamed or whole."""
    if request.json().get("stream"):
        return Script.sse(
            [
                chat_chunk({"role": "assistant", "reasoning_content": "Let me sum up."}),
                chat_chunk({"content": SUMMARY[:20]}),
                chat_chunk({"content": SUMMARY[20:]}),
                chat_chunk({}, "stop"),
                b"data: [DONE]\n\n",
            ]
        )
    message = {"role": "assistant", "content": SUMMARY}
    return Script.json(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1767225600,
            "model": "qwen3-coder",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 300, "completion_tokens": 40, "total_tokens": 340},
        }
    )


def anthropic_event(kind: str, **body: Any) -> bytes:
    return f"event: {kind}\ndata: ".encode() + orjson.dumps({"type": kind, **body}) + b"\n\n"


def anthropic_summary(request: RecordedRequest) -> Script:
    """An Anthropic upstream that writes :data:`SUMMARY`, streamed or whole."""
    usage = {"input_tokens": 300, "output_tokens": 40}
    if request.json().get("stream"):
        start = {
            "id": "msg_01",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-5",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 300, "output_tokens": 1},
        }
        return Script.sse(
            [
                anthropic_event("message_start", message=start),
                anthropic_event(
                    "content_block_start", index=0, content_block={"type": "text", "text": ""}
                ),
                anthropic_event(
                    "content_block_delta", index=0, delta={"type": "text_delta", "text": SUMMARY}
                ),
                anthropic_event("content_block_stop", index=0),
                anthropic_event(
                    "message_delta", delta={"stop_reason": "end_turn"}, usage={"output_tokens": 40}
                ),
                anthropic_event("message_stop"),
            ]
        )
    return Script.json(
        {
            "id": "msg_01",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-5",
            "content": [{"type": "text", "text": SUMMARY}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": usage,
        }
    )


def the_one_compaction(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The compaction item of a well-formed compaction stream (Codex's check: exactly one
    ``compaction`` among the output items done, then ``response.completed``)."""
    kinds = [e["type"] for e in events]
    assert kinds == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert [i["type"] for i in done] == ["compaction"]
    completed = events[-1]["response"]
    assert completed["status"] == "completed" and completed["output"] == done
    assert len({e["response"]["id"] for e in events if "response" in e}) == 1
    item: dict[str, Any] = done[0]
    return item


def summary_request_of(upstream_body: dict[str, Any], *, anthropic: bool = False) -> str:
    """The prompt the summarizing request ended with."""
    last = upstream_body["messages"][-1]
    assert last["role"] == "user"
    content = last["content"]
    if isinstance(content, str):
        return content
    return str(content[-1]["text"])


async def test_a_compaction_trigger_over_a_chat_upstream_is_one_compaction_item(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with MemoryProxy(chat_summary, upstream=CHAT) as proxy:
        answer = await proxy.request(TRIGGERED)
        item = the_one_compaction(answer.events())
        assert unseal(item["encrypted_content"]).text == SUMMARY
        assert item["id"].startswith("cmp_")
        # The next turn carries the compaction item: the Chat upstream gets the summary.
        follow_up = {
            **TRIGGERED,
            "input": [item, {"type": "message", "role": "user", "content": "Go on."}],
        }
        await proxy.request(follow_up)
    summarizing, after = (r.json() for r in proxy.transport.requests)
    assert proxy.transport.requests[0].target == "/v1/chat/completions"
    assert summarizing["tool_choice"] == "none" and summarizing["stream"] is True
    assert summary_request_of(summarizing) == proxy.config.compaction.prompt
    roles = [m["role"] for m in summarizing["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "user"]
    first = after["messages"][1]
    assert first["role"] == "user"
    assert first["content"] == f"{proxy.config.compaction.summary_prefix}\n\n{SUMMARY}"
    assert after["messages"][2] == {"role": "user", "content": "Go on."}
    assert proxy.outcomes[0].kind is OutcomeKind.COMPLETED
    assert proxy.outcomes[0].stored_as is None  # a compaction stores nothing


async def test_the_compact_endpoint_over_a_chat_upstream_answers_the_sdks_shape(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with MemoryProxy(chat_summary, upstream=CHAT) as proxy:
        answer = await proxy.request(COMPACT, path="/v1/responses/compact")
    assert answer.status == 200
    assert (b"content-type", b"application/json") in answer.headers
    compacted = answer.json()
    assert compacted["object"] == "response.compaction"
    assert compacted["id"].startswith("resp_") and isinstance(compacted["created_at"], int)
    # OpenAI's shape: the user messages, then the one compaction item.
    assert compacted["output"][:-1] == [HISTORY[0]]
    item = compacted["output"][-1]
    assert item["type"] == "compaction" and unseal(item["encrypted_content"]).text == SUMMARY
    assert compacted["usage"]["input_tokens"] == 300
    assert compacted["usage"]["output_tokens"] == 40
    sent = proxy.transport.requests[0].json()
    assert proxy.transport.requests[0].target == "/v1/chat/completions"
    assert sent.get("stream") is not True


async def test_both_forms_over_an_anthropic_upstream(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with MemoryProxy(anthropic_summary, upstream=ANTHROPIC) as proxy:
        streamed = await proxy.request({**TRIGGERED, "model": "claude-sonnet-4-5"})
        whole = await proxy.request(
            {**COMPACT, "model": "claude-sonnet-4-5"}, path="/v1/responses/compact"
        )
        item = the_one_compaction(streamed.events())
        follow_up = {
            **TRIGGERED,
            "model": "claude-sonnet-4-5",
            "input": [item, {"type": "message", "role": "user", "content": "Go on."}],
        }
        await proxy.request(follow_up)
    assert unseal(item["encrypted_content"]).text == SUMMARY
    assert unseal(whole.json()["output"][-1]["encrypted_content"]).text == SUMMARY
    first, _, after = (r.json() for r in proxy.transport.requests)
    assert proxy.transport.requests[0].target == "/v1/messages"
    assert first["tool_choice"] == {"type": "none"}
    assert summary_request_of(first, anthropic=True) == proxy.config.compaction.prompt
    summary_text = json.dumps(after["messages"][0], ensure_ascii=False)
    assert SUMMARY in summary_text and after["messages"][0]["role"] == "user"


async def test_the_prompt_and_prefix_come_from_the_config(
    autojump_clock: trio.testing.MockClock,
) -> None:
    table = {"prompt": "Sum it up, tersely.", "summary_prefix": "Story so far:"}
    async with MemoryProxy(chat_summary, upstream=CHAT, compaction=table) as proxy:
        item = the_one_compaction((await proxy.request(TRIGGERED)).events())
        await proxy.request({**TRIGGERED, "input": [item, {"role": "user", "content": "Go."}]})
    summarizing, after = (r.json() for r in proxy.transport.requests)
    assert summary_request_of(summarizing) == "Sum it up, tersely."
    assert after["messages"][1]["content"] == f"Story so far:\n\n{SUMMARY}"


async def test_a_stall_during_the_summary_ends_in_the_responses_error(
    autojump_clock: trio.testing.MockClock,
) -> None:
    stalled = Script.sse([chat_chunk({"role": "assistant", "content": "The user"})], then=[Stall()])
    async with MemoryProxy([stalled], upstream=CHAT) as proxy:
        answer = await proxy.request(TRIGGERED)
    events = answer.events()
    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        "error",
        "response.failed",
    ]
    assert events[-1]["response"]["output"] == []  # no item from a summary cut off
    assert proxy.outcomes[0].kind is OutcomeKind.STALLED_IDLE
    assert answer.elapsed == proxy.config.timeouts.idle


async def test_a_stall_before_the_compact_endpoints_answer_is_an_http_error(
    autojump_clock: trio.testing.MockClock,
) -> None:
    stalled = Script(status=200, before_head=[Stall()])
    async with MemoryProxy([stalled], upstream=CHAT, total=50.0) as proxy:
        answer = await proxy.request(COMPACT, path="/v1/responses/compact")
    # A whole answer: no first_byte deadline, the total one (as for any such request).
    assert answer.status == 504
    assert answer.json()["error"]["code"] == "upstream_timeout"
    assert answer.elapsed == 50.0
    assert proxy.outcomes[0].kind is OutcomeKind.TOTAL_TIMEOUT


async def test_a_compaction_item_proxai_did_not_make_is_refused_before_going_upstream(
    autojump_clock: trio.testing.MockClock,
) -> None:
    theirs = {"type": "compaction", "id": "cmp_openai", "encrypted_content": "gAAAAABopaque"}
    edited = {"type": "compaction", "encrypted_content": seal(Summary("x"))[:-2] + "zz"}
    async with MemoryProxy(chat_summary, upstream=CHAT) as proxy:
        foreign = await proxy.request({**TRIGGERED, "input": [theirs, HISTORY[0]]})
        damaged = await proxy.request({**TRIGGERED, "input": [HISTORY[0], edited]})
    assert foreign.status == 400
    error = foreign.json()["error"]
    assert error["param"] == "input[0].encrypted_content"
    assert "not made by proxai" in error["message"]
    assert damaged.status == 400 and "edited" in damaged.json()["error"]["message"]
    assert proxy.transport.requests == []


def responses_upstream(request: RecordedRequest) -> Script:
    """An upstream that compacts itself (OpenAI): it answers both forms its own way."""
    item = {"id": "cmp_openai", "type": "compaction", "encrypted_content": "gAAAAABopaque"}
    if request.target.endswith("/compact"):
        body = {
            "id": "resp_openai",
            "object": "response.compaction",
            "created_at": 1,
            "output": [item],
            "usage": {},
        }
        return Script.json(body)
    response = {"id": "resp_openai", "object": "response", "status": "completed", "output": [item]}
    return Script.sse(
        [
            sse_event({"type": "response.created", "sequence_number": 0, "response": response}),
            sse_event(
                {
                    "type": "response.output_item.done",
                    "sequence_number": 1,
                    "output_index": 0,
                    "item": item,
                }
            ),
            sse_event({"type": "response.completed", "sequence_number": 2, "response": response}),
        ]
    )


async def test_an_upstream_that_compacts_gets_both_forms_unchanged(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ours = {"type": "compaction", "encrypted_content": seal(Summary(SUMMARY))}
    theirs = {"type": "compaction", "id": "cmp_openai", "encrypted_content": "gAAAAABopaque"}
    async with MemoryProxy(responses_upstream) as proxy:
        whole = await proxy.request(COMPACT, path="/v1/responses/compact")
        streamed = await proxy.request(TRIGGERED)
        mixed = await proxy.request({**TRIGGERED, "input": [ours, theirs, HISTORY[0]]})
    compact_sent, trigger_sent, mixed_sent = proxy.transport.requests
    assert compact_sent.target == "/v1/responses/compact"
    assert compact_sent.json() == COMPACT
    assert whole.json()["output"][0]["encrypted_content"] == "gAAAAABopaque"
    assert trigger_sent.target == "/v1/responses" and trigger_sent.json() == TRIGGERED
    assert streamed.events()[-1]["response"]["output"][0]["id"] == "cmp_openai"
    # proxai's own compaction (from a Chat upstream earlier on the route) is its summary
    # for OpenAI too, which could not read it; OpenAI's own stays as it is.
    sent = mixed_sent.json()["input"]
    assert sent[0]["role"] == "user" and SUMMARY in sent[0]["content"][0]["text"]
    assert sent[1] == theirs
    assert mixed.events()[-1]["type"] == "response.completed"
