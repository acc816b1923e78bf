"""A Messages client never gets ``stop_reason: "tool_use"`` without a tool_use block
(issue 20 item 18a).

A Chat upstream that finishes with ``tool_calls`` after a call that never got a name
(the decoder drops it: there is nothing to call) used to reach Claude Code as
``tool_use`` with no block to run, and an agent loop waiting on a tool result.
"""

from __future__ import annotations

import json

from trio.testing import MockClock

from proxai.protocols.names import WireApi
from proxai.testing import Script, chat_chunk
from proxai.testing import stream_checks as checks
from proxai.testing.memory_proxy import MemoryProxy
from proxai.testing.streams import made_bytes as raw
from proxai.translate.encoders.messages import MessagesEncoder
from proxai.translate.ir import (
    Finished,
    FinishReason,
    ItemDelta,
    ItemDone,
    ItemKind,
    ItemStarted,
    Started,
    TranslationContext,
)


def _encoder(stream: bool) -> MessagesEncoder:
    context = TranslationContext(
        client=WireApi.MESSAGES, upstream=WireApi.CHAT, stream=stream, model="m"
    )
    return MessagesEncoder(context)


TEXT_THEN_TOOL_CALLS = [
    Started(),
    ItemStarted(0, ItemKind.TEXT),
    ItemDelta(0, "Let me look."),
    ItemDone(0),
    Finished(FinishReason.TOOL_CALLS),
]


def test_tool_calls_with_no_call_opened_end_the_turn() -> None:
    encoder = _encoder(stream=True)
    final = checks.messages_final(b"".join(raw(encoder.feed(e)) for e in TEXT_THEN_TOOL_CALLS))
    assert final.stop_reason == "end_turn"
    assert [b.type for b in final.content] == ["text"]
    whole = _encoder(stream=False)
    for event in TEXT_THEN_TOOL_CALLS:
        whole.feed(event)
    assert json.loads(whole.body())["stop_reason"] == "end_turn"


def test_tool_calls_with_a_call_is_tool_use() -> None:
    events = [
        *TEXT_THEN_TOOL_CALLS[:-1],
        ItemStarted(1, ItemKind.TOOL_CALL, call_id="call_1", name="shell"),
        ItemDelta(1, '{"cmd": "ls"}'),
        ItemDone(1),
        Finished(FinishReason.TOOL_CALLS),
    ]
    encoder = _encoder(stream=True)
    final = checks.messages_final(b"".join(raw(encoder.feed(e)) for e in events))
    assert final.stop_reason == "tool_use"
    assert [b.type for b in final.content] == ["text", "tool_use"]


async def test_claude_code_gets_end_turn_for_a_chat_call_that_never_got_a_name(
    autojump_clock: MockClock,
) -> None:
    nameless = {"tool_calls": [{"index": 0, "id": "call_1", "type": "function"}]}
    arguments = {"tool_calls": [{"index": 0, "function": {"arguments": '{"cmd": "ls"}'}}]}
    chunks = [
        chat_chunk({"role": "assistant", "content": "Checking."}),
        chat_chunk(nameless),
        chat_chunk(arguments),
        chat_chunk({}, "tool_calls"),
        b"data: [DONE]\n\n",
    ]
    upstreams = {"local": {"base_url": "http://local.test/v1", "protocol": "openai_chat"}}
    routes = [{"model": "*", "upstreams": ["local"]}]
    request = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 1024,
        "stream": True,
        "messages": [{"role": "user", "content": "list the files"}],
        "tools": [{"name": "shell", "input_schema": {"type": "object"}}],
    }
    async with MemoryProxy([Script.sse(chunks)], upstreams=upstreams, routes=routes) as proxy:
        exchange = await proxy.request(
            request, path="/v1/messages", headers=[(b"anthropic-version", b"2023-06-01")]
        )
    assert exchange.status == 200
    final = checks.messages_final(exchange.body)
    assert final.stop_reason == "end_turn"
    assert [b.type for b in final.content] == ["text"]
