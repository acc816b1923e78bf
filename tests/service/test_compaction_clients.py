"""Compaction over a Chat-only upstream on real sockets, with the official openai SDK:
``client.responses.compact()`` parses proxai's answer into its ``CompactedResponse``, the
stream accumulator takes the ``compaction_trigger`` form's one compaction item, and the
item sent back reaches the upstream as its summary (issue 23)."""

from __future__ import annotations

from typing import Any

import pytest

from proxai.protocols.responses.compaction import unseal
from proxai.testing import Script

from ..helpers import CHAT_COMPLETION, chunk, openai_client, run, sse

openai = pytest.importorskip("openai")

SUMMARY = "The user asked for the weather in Paris: sunny. Next: suggest a walk."
COMPLETION = {
    **CHAT_COMPLETION,
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": SUMMARY}, "finish_reason": "stop"}
    ],
}
SUMMARY_STREAM = [
    chunk({"role": "assistant", "content": SUMMARY[:30]}),
    chunk({"content": SUMMARY[30:]}),
    chunk({}, finish="stop"),
    b"data: [DONE]\n\n",
]
ANSWER_STREAM = [chunk({"role": "assistant", "content": "Go for a walk."}), chunk({}, "stop")]
HISTORY: list[dict[str, Any]] = [
    {"type": "message", "role": "user", "content": "Weather in Paris?"},
    {"type": "message", "role": "assistant", "content": "Sunny."},
]


async def test_the_sdks_compact_call_then_the_next_turn(
    start_upstream: Any, proxai_for: Any
) -> None:
    def compact_then_go_on(url: str) -> tuple[Any, Any]:
        client = openai_client(url)
        compacted = client.responses.compact(model="qwen3-coder", input=HISTORY)
        item = compacted.output[-1]
        follow_up = client.responses.create(
            model="qwen3-coder",
            input=[item.to_dict(), {"role": "user", "content": "And now?"}],
            store=False,
        )
        return compacted, follow_up

    scripts = [Script.json(COMPLETION), sse([*ANSWER_STREAM, b"data: [DONE]\n\n"])]
    (compacted, follow_up), upstream, outcomes = await run(
        start_upstream, proxai_for, scripts, compact_then_go_on, count=2
    )
    assert type(compacted).__name__ == "CompactedResponse"
    assert compacted.object == "response.compaction"
    assert [item.type for item in compacted.output] == ["message", "compaction"]
    assert type(compacted.output[-1]).__name__ == "ResponseCompactionItem"
    assert unseal(compacted.output[-1].encrypted_content).text == SUMMARY
    assert follow_up.output_text == "Go for a walk."
    summarizing, after = (r.json() for r in upstream.requests)
    assert upstream.requests[0].target == "/v1/chat/completions"
    assert [m["role"] for m in summarizing["messages"]] == ["user", "assistant", "user"]
    assert SUMMARY in after["messages"][0]["content"]
    assert [o.path for o in outcomes] == ["/v1/responses/compact", "/v1/responses"]


async def test_the_trigger_form_streams_one_compaction_item_the_sdk_accumulates(
    start_upstream: Any, proxai_for: Any
) -> None:
    def trigger(url: str) -> Any:
        client = openai_client(url)
        with client.responses.stream(
            model="qwen3-coder",
            input=[*HISTORY, {"type": "compaction_trigger"}],
            store=False,
        ) as stream:
            events = [event.type for event in stream]
            return events, stream.get_final_response()

    (events, final), upstream, _ = await run(
        start_upstream, proxai_for, [sse(SUMMARY_STREAM)], trigger
    )
    assert events.count("response.output_item.done") == 1
    assert events[-1] == "response.completed"
    assert [item.type for item in final.output] == ["compaction"]
    assert unseal(final.output[0].encrypted_content).text == SUMMARY
    assert upstream.requests[0].json()["stream"] is True


async def test_compact_follows_a_response_proxai_stored(
    start_upstream: Any, proxai_for: Any
) -> None:
    def turn_then_compact(url: str) -> Any:
        client = openai_client(url)
        first = client.responses.create(model="qwen3-coder", input="Weather in Paris?")
        return client.responses.compact(
            model="qwen3-coder", previous_response_id=first.id, input="Compact, please."
        )

    scripts = [sse([*ANSWER_STREAM, b"data: [DONE]\n\n"]), Script.json(COMPLETION)]
    compacted, upstream, _ = await run(
        start_upstream, proxai_for, scripts, turn_then_compact, count=2
    )
    assert unseal(compacted.output[-1].encrypted_content).text == SUMMARY
    summarizing = upstream.requests[1].json()["messages"]
    assert [m["role"] for m in summarizing] == ["user", "assistant", "user", "user"]
    assert summarizing[1]["content"] == "Go for a walk."
