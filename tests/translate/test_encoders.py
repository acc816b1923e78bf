"""The encoders write what the official SDKs accumulate into exactly what was fed.

Hand-written neutral event sequences (text, reasoning, refusal, parallel tool
calls, custom tools, length, failures) go through each encoder; the bytes go
through openai-python's and anthropic's own stream accumulators
(``proxai.testing.stream_checks``) and through the strict checks of what Codex
and Claude Code rely on. A failure must make the SDK raise, never read as a
shorter success. A property test plays random well-formed sequences to all
three and compares the SDKs' final objects with what was fed.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Sequence
from typing import Any

import anthropic
import openai
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxai.config import TranslationOptions
from proxai.protocols.names import WireApi
from proxai.testing import stream_checks as checks
from proxai.testing.streams import made_bytes as raw
from proxai.translate.encoders import encoder_for
from proxai.translate.encoders.chat import ChatEncoder
from proxai.translate.encoders.messages import MessagesEncoder
from proxai.translate.encoders.responses import ResponsesEncoder
from proxai.translate.ir import (
    THINKING_SIGNATURE,
    Encoder,
    Event,
    Failed,
    Finished,
    FinishReason,
    ItemDelta,
    ItemDone,
    ItemKind,
    ItemStarted,
    Started,
    TranslationContext,
    Usage,
    wrap_reasoning,
)
from proxai.translate.pairs import translate

MODEL = "client-model"


def context(client: WireApi, **fields: Any) -> TranslationContext:
    fields.setdefault("model", MODEL)
    fields.setdefault("stream", True)
    return TranslationContext(client=client, upstream=WireApi.CHAT, **fields)


def counting() -> Callable[[], str]:
    """An id source that counts: t1, t2, t3..."""
    tokens = (f"t{n}" for n in itertools.count(1))
    return lambda: next(tokens)


def responses(events: Sequence[Event], **fields: Any) -> tuple[ResponsesEncoder, bytes]:
    encoder = ResponsesEncoder(context(WireApi.RESPONSES, **fields))
    return encoder, b"".join(raw(encoder.feed(e)) for e in events)


def chat(events: Sequence[Event], **fields: Any) -> tuple[ChatEncoder, bytes]:
    encoder = ChatEncoder(context(WireApi.CHAT, **fields))
    return encoder, b"".join(raw(encoder.feed(e)) for e in events)


def messages(events: Sequence[Event], **fields: Any) -> tuple[MessagesEncoder, bytes]:
    encoder = MessagesEncoder(context(WireApi.MESSAGES, **fields))
    return encoder, b"".join(raw(encoder.feed(e)) for e in events)


def text_item(key: int, *chunks: str, kind: ItemKind = ItemKind.TEXT) -> list[Event]:
    return [ItemStarted(key, kind), *(ItemDelta(key, c) for c in chunks), ItemDone(key)]


#: Reasoning, text, then two tool calls whose arguments interleave (as parallel calls do).
PARALLEL_CALLS: list[Event] = [
    Started(id="chatcmpl-abc123", model="upstream-model", created=1700000000),
    *text_item(0, "Let me ", "check both.", kind=ItemKind.REASONING),
    *text_item(1, "Checking ", "the weather."),
    ItemStarted(2, ItemKind.TOOL_CALL, call_id="call_paris", name="get_weather_0"),
    ItemDelta(2, '{"city":'),
    ItemStarted(3, ItemKind.TOOL_CALL, call_id="call_tokyo", name="get_weather_0"),
    ItemDelta(3, '{"city": "To'),
    ItemDelta(2, ' "Paris"}'),
    ItemDelta(3, 'kyo"}'),
    ItemDone(3),
    ItemDone(2),
    Usage(input_tokens=120, output_tokens=45, cached_tokens=100, reasoning_tokens=7),
    Finished(FinishReason.TOOL_CALLS),
]
TOOL_NAMES = {"get_weather_0": "get_weather"}
CALLS = [
    ("call_paris", "get_weather", {"city": "Paris"}),
    ("call_tokyo", "get_weather", {"city": "Tokyo"}),
]

RATE_LIMITED = Failed("Rate limit reached. Please try again in 2s.", code="rate_limit_exceeded")
#: A tool call cut off by the upstream's in-band error.
FAILED_MID_CALL: list[Event] = [
    Started(id="chatcmpl-x"),
    *text_item(0, "Calling."),
    ItemStarted(1, ItemKind.TOOL_CALL, call_id="call_1", name="shell"),
    ItemDelta(1, '{"cmd": "l'),
    RATE_LIMITED,
]


def chat_calls(message: Any) -> list[tuple[str, str, Any]]:
    """A Chat message's calls as (id, name, parsed arguments)."""
    calls = message.tool_calls or []
    return [(c.id, c.function.name, json.loads(c.function.arguments)) for c in calls]


def simple(reason: FinishReason, text: str = "Hello world", **finish: Any) -> list[Event]:
    return [Started(), *text_item(0, text[:5], text[5:]), Finished(reason, **finish)]


# -- Responses -----------------------------------------------------------------------------


def test_responses_text_reads_as_one_completed_message_with_usage() -> None:
    events: list[Event] = [
        Started(id="chatcmpl-abc", model="upstream-model"),
        *text_item(0, "Hel", "lo ", "world"),
        Usage(input_tokens=10, output_tokens=3, cached_tokens=4),
        Finished(FinishReason.STOP),
    ]
    _, body = responses(events)
    kinds = [e["type"] for e in checks.check_responses_stream(body)]
    assert kinds == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        *["response.output_text.delta"] * 3,
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    final = checks.responses_final(body)
    assert final.status == "completed"
    assert final.id == "resp_abc"
    assert final.model == MODEL  # the model the client asked for, not the upstream's
    assert final.output_text == "Hello world"
    assert final.usage is not None
    assert (final.usage.input_tokens, final.usage.output_tokens, final.usage.total_tokens) == (
        10,
        3,
        13,
    )
    assert final.usage.input_tokens_details.cached_tokens == 4
    assert final.usage.output_tokens_details.reasoning_tokens == 0


def test_responses_parallel_calls_are_items_in_the_order_they_were_added() -> None:
    _, body = responses(PARALLEL_CALLS, tool_names=TOOL_NAMES, ids=counting())
    events = checks.check_responses_stream(body)
    added = [e for e in events if e["type"] == "response.output_item.added"]
    assert [(e["output_index"], e["item"]["type"]) for e in added] == [
        (0, "reasoning"),
        (1, "message"),
        (2, "function_call"),
        (3, "function_call"),
    ]
    final = checks.responses_final(body)
    calls = [item for item in final.output if item.type == "function_call"]
    assert [(c.call_id, c.name, json.loads(c.arguments)) for c in calls] == CALLS
    assert [c.id for c in calls] == ["fc_t3", "fc_t4"]  # after rs_t1 and msg_t2
    reasoning = final.output[0]
    assert reasoning.type == "reasoning"
    assert reasoning.content is not None
    assert reasoning.content[0].text == "Let me check both."
    assert reasoning.encrypted_content is None  # the client did not ask for the envelope
    assert final.usage is not None
    assert final.usage.output_tokens_details.reasoning_tokens == 7


def test_responses_reasoning_rides_in_the_envelope_when_the_client_asks() -> None:
    _, body = responses(PARALLEL_CALLS, reasoning_envelope=True)
    (reasoning, *_) = checks.responses_final(body).output
    assert reasoning.type == "reasoning"
    assert reasoning.encrypted_content == wrap_reasoning("Let me check both.")
    deltas = [
        e["delta"]
        for e in checks.check_responses_stream(body)
        if "reasoning_text" in e["type"] and "delta" in e
    ]
    assert deltas == ["Let me ", "check both."]  # what Codex shows while it thinks


def test_responses_refusal_is_a_refusal_part() -> None:
    _, body = responses(
        [
            Started(),
            *text_item(0, "I can't ", "help.", kind=ItemKind.REFUSAL),
            Finished(FinishReason.STOP),
        ]
    )
    kinds = [e["type"] for e in checks.check_responses_stream(body)]
    assert "response.refusal.delta" in kinds and "response.refusal.done" in kinds
    (message,) = checks.responses_final(body).output
    assert message.type == "message"
    assert [(p.type, getattr(p, "refusal", None)) for p in message.content] == [
        ("refusal", "I can't help.")
    ]


@pytest.mark.parametrize(
    ("reason", "why"),
    [(FinishReason.LENGTH, "max_output_tokens"), (FinishReason.CONTENT_FILTER, "content_filter")],
)
def test_responses_cut_short_is_incomplete_with_the_whole_output(
    reason: FinishReason, why: str
) -> None:
    _, body = responses(simple(reason))
    assert checks.check_responses_stream(body)[-1]["type"] == "response.incomplete"
    final = checks.responses_final(body)
    assert final.status == "incomplete"
    assert final.incomplete_details is not None
    assert final.incomplete_details.reason == why
    assert final.output_text == "Hello world"


def test_responses_upstream_error_mid_call_raises_api_error_with_its_code() -> None:
    encoder, body = responses(FAILED_MID_CALL)
    assert encoder.finished
    events = checks.check_responses_stream(body)
    assert [e["type"] for e in events[-2:]] == ["error", "response.failed"]
    failed = events[-1]["response"]
    assert failed["status"] == "failed"
    assert failed["error"] == {
        "code": "rate_limit_exceeded",
        "message": RATE_LIMITED.message,
    }
    # the call cut short is in the failed response as far as it came, never completed
    assert [(i["type"], i["status"]) for i in failed["output"]] == [
        ("message", "completed"),
        ("function_call", "incomplete"),
    ]
    with pytest.raises(openai.APIError) as raised:
        checks.responses_final(body)
    assert raised.value.code == "rate_limit_exceeded"
    assert "try again in 2s" in raised.value.message  # Codex reads its retry delay here


def test_responses_fail_mid_stream_matches_the_observers_error_and_raises() -> None:
    encoder, body = responses(PARALLEL_CALLS[:6])
    body += raw(encoder.fail("upstream stalled for 30 s", code=None, try_again=True))
    assert encoder.finished
    assert raw(encoder.fail("again", code=None, try_again=False)) == b""
    assert raw(encoder.feed(Finished(FinishReason.STOP))) == b""
    events = checks.check_responses_stream(body)
    error = events[-2]
    assert error["error"] == {
        "type": "server_error",
        "code": "server_error",
        "message": "upstream stalled for 30 s",
        "param": None,
    }
    with pytest.raises(openai.APIError, match="upstream stalled for 30 s") as raised:
        checks.responses_final(body)
    assert raised.value.code == "server_error"


def test_responses_fail_before_anything_still_opens_the_response() -> None:
    encoder = ResponsesEncoder(context(WireApi.RESPONSES))
    body = raw(encoder.fail("no upstream answered", code=None, try_again=True))
    kinds = [e["type"] for e in checks.check_responses_stream(body)]
    assert kinds == ["response.created", "response.in_progress", "error", "response.failed"]


def test_responses_custom_tool_call_carries_the_unwrapped_input() -> None:
    patch = "*** Begin Patch\n*** Add File: a.txt\n+hi\n*** End Patch"
    arguments = json.dumps({"input": patch})
    events: list[Event] = [
        Started(),
        ItemStarted(0, ItemKind.TOOL_CALL, call_id="call_p", name="apply_patch"),
        *(ItemDelta(0, arguments[i : i + 7]) for i in range(0, len(arguments), 7)),
        ItemDone(0),
        Finished(FinishReason.TOOL_CALLS),
    ]
    _, body = responses(events, custom_tools=frozenset({"apply_patch"}))
    stream = checks.check_responses_stream(body)
    assert [e["type"] for e in stream if "custom_tool_call_input" in e["type"]] == [
        "response.custom_tool_call_input.delta",
        "response.custom_tool_call_input.done",
    ]
    assert not any("function_call" in e["type"] for e in stream)
    (call,) = checks.responses_final(body).output
    assert call.type == "custom_tool_call"
    assert (call.call_id, call.name, call.input) == ("call_p", "apply_patch", patch)


def test_responses_echoes_the_request_fields_it_was_given() -> None:
    tools = [
        {
            "type": "function",
            "name": "get_weather",
            "parameters": {"type": "object"},
            "strict": True,
        }
    ]
    echo = {
        "instructions": "Be brief.",
        "tools": tools,
        "tool_choice": "required",
        "parallel_tool_calls": False,
        "id": "not-this",
    }
    _, body = responses(simple(FinishReason.STOP), echo=echo, ids=counting())
    created = checks.check_responses_stream(body)[0]["response"]
    assert created["instructions"] == "Be brief."
    assert created["id"] == "resp_t1"
    final = checks.responses_final(body)
    assert final.instructions == "Be brief."
    assert final.tool_choice == "required"
    assert final.parallel_tool_calls is False
    assert [t.name for t in final.tools if t.type == "function"] == ["get_weather"]


def test_responses_body_is_the_whole_response() -> None:
    encoder, _ = responses(PARALLEL_CALLS, tool_names=TOOL_NAMES, reasoning_envelope=True)
    response = checks.responses_body(encoder.body())
    assert response.status == "completed"
    assert [item.type for item in response.output] == [
        "reasoning",
        "message",
        "function_call",
        "function_call",
    ]
    assert response.output_text == "Checking the weather."
    assert response.usage is not None and response.usage.total_tokens == 165


# -- Chat Completions ----------------------------------------------------------------------


def test_chat_parallel_calls_get_their_own_indexes_and_finish_with_tool_calls() -> None:
    _, body = chat(PARALLEL_CALLS, tool_names=TOOL_NAMES, include_usage=True)
    chunks = checks.check_chat_stream(body)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    openings = [
        call
        for c in chunks
        for choice in c["choices"]
        for call in choice["delta"].get("tool_calls", [])
        if "id" in call
    ]
    assert [(c["index"], c["id"], c["function"]) for c in openings] == [
        (0, "call_paris", {"name": "get_weather", "arguments": ""}),
        (1, "call_tokyo", {"name": "get_weather", "arguments": ""}),
    ]
    final = checks.chat_final(body)
    assert final.id == "chatcmpl-abc123"
    assert final.model == MODEL
    (choice,) = final.choices
    assert choice.finish_reason == "tool_calls"
    message = choice.message
    assert message.content == "Checking the weather."
    assert getattr(message, "reasoning_content", None) == "Let me check both."
    assert message.tool_calls is not None
    assert chat_calls(message) == CALLS
    assert final.usage is not None
    assert (final.usage.prompt_tokens, final.usage.completion_tokens, final.usage.total_tokens) == (
        120,
        45,
        165,
    )
    assert final.usage.prompt_tokens_details is not None
    assert final.usage.prompt_tokens_details.cached_tokens == 100
    assert final.usage.completion_tokens_details is not None
    assert final.usage.completion_tokens_details.reasoning_tokens == 7
    assert body.endswith(b"data: [DONE]\n\n")


def test_chat_sends_usage_only_when_the_client_asked() -> None:
    _, body = chat(PARALLEL_CALLS)
    assert all(c["choices"] for c in checks.check_chat_stream(body))
    assert checks.chat_final(body).usage is None


@pytest.mark.parametrize(
    ("reason", "finish_reason"),
    [
        (FinishReason.STOP, "stop"),
        (FinishReason.STOP_SEQUENCE, "stop"),
        (FinishReason.LENGTH, "length"),
        (FinishReason.CONTENT_FILTER, "content_filter"),
    ],
)
def test_chat_finish_reasons(reason: FinishReason, finish_reason: str) -> None:
    _, body = chat(simple(reason))
    final = checks.chat_final(body)
    assert final.choices[0].finish_reason == finish_reason
    assert final.choices[0].message.content == "Hello world"


def test_chat_says_tool_calls_when_an_upstream_said_stop_after_calling() -> None:
    events: list[Event] = [
        Started(),
        ItemStarted(0, ItemKind.TOOL_CALL, call_id="c", name="f"),
        ItemDone(0),
        Finished(FinishReason.STOP),
    ]
    _, body = chat(events)
    (choice,) = checks.chat_final(body).choices
    assert choice.finish_reason == "tool_calls"
    assert chat_calls(choice.message) == [("c", "f", {})]  # no arguments are still an object


def test_chat_refusal_streams_in_delta_refusal() -> None:
    _, body = chat(
        [
            Started(),
            *text_item(0, "I can't ", "help.", kind=ItemKind.REFUSAL),
            Finished(FinishReason.STOP),
        ]
    )
    message = checks.chat_final(body).choices[0].message
    assert message.refusal == "I can't help."
    assert not message.content


def test_chat_upstream_error_mid_call_raises_api_error() -> None:
    encoder, body = chat(FAILED_MID_CALL)
    assert encoder.finished
    chunks = checks.check_chat_stream(body)
    assert chunks[-1] == {
        "error": {
            "message": RATE_LIMITED.message,
            "type": "server_error",
            "param": None,
            "code": "rate_limit_exceeded",
        }
    }
    with pytest.raises(openai.APIError) as raised:
        checks.chat_final(body)
    assert raised.value.code == "rate_limit_exceeded"


def test_chat_fail_mid_stream_ends_with_the_observers_error_chunk() -> None:
    encoder, body = chat(PARALLEL_CALLS[:8])
    tail = raw(encoder.fail("upstream stalled for 30 s", code=None, try_again=True))
    assert tail == (
        b'data: {"error":{"message":"upstream stalled for 30 s","type":"server_error",'
        b'"param":null,"code":"server_error"}}\n\ndata: [DONE]\n\n'
    )
    with pytest.raises(openai.APIError, match="upstream stalled"):
        checks.chat_final(body + tail)


def test_chat_body_is_the_whole_completion() -> None:
    # A whole body is what a client that asked for no stream gets (a stream keeps no text).
    encoder, _ = chat(PARALLEL_CALLS, tool_names=TOOL_NAMES, stream=False)
    completion = checks.chat_body(encoder.body())
    (choice,) = completion.choices
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "Checking the weather."
    assert choice.message.tool_calls is not None
    assert [c.id for c in choice.message.tool_calls] == ["call_paris", "call_tokyo"]
    assert completion.usage is not None and completion.usage.total_tokens == 165


# -- Messages ------------------------------------------------------------------------------


def test_messages_parallel_calls_wait_for_the_open_block_and_index_in_opening_order() -> None:
    _, body = messages(PARALLEL_CALLS, tool_names=TOOL_NAMES)
    events = checks.check_messages_stream(body)
    starts = [
        (e["index"], e["content_block"]["type"])
        for e in events
        if e["type"] == "content_block_start"
    ]
    assert starts == [(0, "thinking"), (1, "text"), (2, "tool_use"), (3, "tool_use")]
    final = checks.messages_final(body)
    assert final.id == "msg_abc123"
    assert final.model == MODEL
    assert [b.type for b in final.content] == ["thinking", "text", "tool_use", "tool_use"]
    thinking, text, *calls = final.content
    assert thinking.type == "thinking" and thinking.thinking == "Let me check both."
    assert thinking.signature == THINKING_SIGNATURE  # unsigned reasoning still gets one
    assert text.type == "text" and text.text == "Checking the weather."
    assert [(c.id, c.name, c.input) for c in calls if c.type == "tool_use"] == CALLS
    assert final.stop_reason == "tool_use"
    # Anthropic counts input without the cache reads OpenAI counts in
    assert (
        final.usage.input_tokens,
        final.usage.cache_read_input_tokens,
        final.usage.output_tokens,
    ) == (20, 100, 45)


def test_messages_thinking_keeps_the_upstreams_signature() -> None:
    events: list[Event] = [
        Started(),
        ItemStarted(0, ItemKind.REASONING),
        ItemDelta(0, "hm"),
        ItemDone(0, signature="sig-abc"),
        Finished(FinishReason.STOP),
    ]
    _, body = messages(events)
    (thinking,) = checks.messages_final(body).content
    assert thinking.type == "thinking" and thinking.signature == "sig-abc"


@pytest.mark.parametrize(
    ("reason", "stop_reason"),
    [
        (FinishReason.STOP, "end_turn"),
        (FinishReason.TOOL_CALLS, "end_turn"),  # no tool_use block: nothing to run
        (FinishReason.LENGTH, "max_tokens"),
        (FinishReason.CONTENT_FILTER, "refusal"),
    ],
)
def test_messages_stop_reasons(reason: FinishReason, stop_reason: str) -> None:
    _, body = messages(simple(reason))
    final = checks.messages_final(body)
    assert (final.stop_reason, final.stop_sequence) == (stop_reason, None)
    assert [b.text for b in final.content if b.type == "text"] == ["Hello world"]


def test_messages_stop_sequence_names_the_sequence() -> None:
    _, body = messages(simple(FinishReason.STOP_SEQUENCE, stop_sequence="###"))
    final = checks.messages_final(body)
    assert (final.stop_reason, final.stop_sequence) == ("stop_sequence", "###")


def test_messages_refusal_is_text() -> None:
    _, body = messages(
        [
            Started(),
            *text_item(0, "No.", kind=ItemKind.REFUSAL),
            Finished(FinishReason.CONTENT_FILTER),
        ]
    )
    final = checks.messages_final(body)
    assert [(b.type, b.text) for b in final.content if b.type == "text"] == [("text", "No.")]
    assert final.stop_reason == "refusal"


def test_messages_tool_ids_are_escaped_reversibly_for_anthropic() -> None:
    events: list[Event] = [
        Started(),
        ItemStarted(0, ItemKind.TOOL_CALL, call_id="functions.Bash:0", name="Bash"),
        ItemDone(0),
        Finished(FinishReason.TOOL_CALLS),
    ]
    _, body = messages(events)
    (call,) = checks.messages_final(body).content
    assert call.type == "tool_use"
    assert (call.id, call.input) == ("proxai-id-functions-2eBash-3a0", {})


def test_messages_upstream_error_mid_call_raises_api_status_error() -> None:
    encoder, body = messages(FAILED_MID_CALL)
    assert encoder.finished
    events = checks.check_messages_stream(body)
    assert events[-1] == {
        "type": "error",
        "error": {"type": "rate_limit_error", "message": RATE_LIMITED.message},
    }
    with pytest.raises(anthropic.APIStatusError, match="rate_limit_error"):
        checks.messages_final(body)


@pytest.mark.parametrize(
    ("try_again", "error_type"), [(True, "overloaded_error"), (False, "api_error")]
)
def test_messages_fail_mid_stream_is_one_error_event(try_again: bool, error_type: str) -> None:
    encoder, body = messages(PARALLEL_CALLS[:8])
    tail = raw(encoder.fail("upstream stalled for 30 s", code=None, try_again=try_again))
    assert tail == (
        b'event: error\ndata: {"type":"error","error":{"type":"'
        + error_type.encode()
        + b'","message":"upstream stalled for 30 s"}}\n\n'
    )
    assert raw(encoder.ping()) == b""
    with pytest.raises(anthropic.APIStatusError, match=error_type):
        checks.messages_final(body + tail)


def test_messages_pings_only_while_the_stream_is_open() -> None:
    encoder = MessagesEncoder(context(WireApi.MESSAGES))
    assert raw(encoder.ping()) == b""
    body = (
        raw(encoder.feed(Started()))
        + raw(encoder.ping())
        + raw(encoder.feed(ItemStarted(0, ItemKind.TEXT)))
    )
    body += (
        raw(encoder.ping())
        + raw(encoder.feed(ItemDone(0)))
        + raw(encoder.feed(Finished(FinishReason.STOP)))
    )
    assert [e["type"] for e in checks.check_messages_stream(body)] == [
        "message_start",
        "content_block_start",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert raw(encoder.ping()) == b""


def test_messages_body_is_the_whole_message() -> None:
    encoder, _ = messages(PARALLEL_CALLS, tool_names=TOOL_NAMES, stream=False)
    message = checks.messages_body(encoder.body())
    assert [b.type for b in message.content] == ["thinking", "text", "tool_use", "tool_use"]
    assert message.content[1].type == "text"
    assert message.content[1].text == "Checking the weather."
    assert message.stop_reason == "tool_use"
    assert message.usage.input_tokens == 20


ENCODERS: dict[WireApi, Callable[[TranslationContext], Encoder]] = {
    WireApi.RESPONSES: ResponsesEncoder,
    WireApi.CHAT: ChatEncoder,
    WireApi.MESSAGES: MessagesEncoder,
}


STREAM_CHECKS: dict[WireApi, Callable[[bytes], object]] = {
    WireApi.RESPONSES: checks.check_responses_stream,
    WireApi.CHAT: checks.check_chat_stream,
    WireApi.MESSAGES: checks.check_messages_stream,
}


def test_a_failed_body_is_each_apis_error_shape() -> None:
    bodies = {}
    for client, make in ENCODERS.items():
        encoder = make(context(client))
        raw(encoder.feed(Failed("boom", code="server_error")))
        bodies[client] = orjson.loads(encoder.body())
    response = bodies[WireApi.RESPONSES]
    assert response["status"] == "failed"
    assert response["error"] == {"code": "server_error", "message": "boom"}
    assert bodies[WireApi.CHAT] == {
        "error": {"message": "boom", "type": "server_error", "param": None, "code": "server_error"}
    }
    assert bodies[WireApi.MESSAGES] == {
        "type": "error",
        "error": {"type": "api_error", "message": "boom"},
    }


# -- any well-formed sequence --------------------------------------------------------------

KINDS = [ItemKind.TEXT, ItemKind.REASONING, ItemKind.REFUSAL, ItemKind.TOOL_CALL]
json_values = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=8))
arguments = st.dictionaries(st.text(max_size=6), json_values, max_size=3)


@st.composite
def items(draw: st.DrawFn) -> tuple[ItemKind, list[str], Any]:
    """One item: its kind, its deltas, and (a call) its arguments object."""
    kind = draw(st.sampled_from(KINDS))
    if kind is ItemKind.TOOL_CALL:
        value = draw(arguments)
        whole = json.dumps(value, ensure_ascii=False)
        cuts = sorted(draw(st.lists(st.integers(0, len(whole)), max_size=6)))
        bounds = [0, *cuts, len(whole)]
        return kind, [whole[a:b] for a, b in itertools.pairwise(bounds)], value
    return kind, draw(st.lists(st.text(max_size=12), max_size=5)), None


@st.composite
def sequences(
    draw: st.DrawFn,
) -> tuple[list[Event], list[tuple[ItemKind, list[str], Any]], FinishReason]:
    """Items opened in key order, their deltas and ends interleaved at random; usage; the end."""
    drawn = draw(st.lists(items(), max_size=5))
    pending: list[list[Event]] = []
    for key, (kind, deltas, _) in enumerate(drawn):
        start = (
            ItemStarted(key, kind, call_id=f"call_{key}", name=f"tool_{key}")
            if kind is ItemKind.TOOL_CALL
            else ItemStarted(key, kind)
        )
        pending.append([start, *(ItemDelta(key, d) for d in deltas), ItemDone(key)])
    events: list[Event] = [Started(id="chatcmpl-prop", model="upstream")]
    opened = 0
    while any(pending):
        ready = [k for k, ops in enumerate(pending) if ops and (k < opened or k == opened)]
        key = draw(st.sampled_from(ready))
        if key == opened:
            opened += 1
        events.append(pending[key].pop(0))
    reason = draw(st.sampled_from(list(FinishReason)))
    if draw(st.booleans()):
        output = draw(st.integers(0, 10_000))
        events.append(
            Usage(
                input_tokens=draw(st.integers(0, 10_000)),
                output_tokens=output,
                cached_tokens=0,
                reasoning_tokens=min(output, 5),
            )
        )
    events.append(
        Finished(reason, stop_sequence="END" if reason is FinishReason.STOP_SEQUENCE else None)
    )
    return events, drawn, reason


def _texts(
    drawn: list[tuple[ItemKind, list[str], Any]], kind: ItemKind, events: list[Event]
) -> str:
    keys = {k for k, (item_kind, _, _) in enumerate(drawn) if item_kind is kind}
    return "".join(e.text for e in events if isinstance(e, ItemDelta) and e.key in keys)


def split(body: bytes, data: st.DataObject) -> list[bytes]:
    """``body`` in the pieces a network might deliver it in."""
    cuts = sorted(data.draw(st.lists(st.integers(0, len(body)), max_size=8)))
    bounds = [0, *cuts, len(body)]
    return [body[a:b] for a, b in itertools.pairwise(bounds)]


@settings(max_examples=60, deadline=None)
@given(sequences(), st.data())
def test_any_well_formed_sequence_accumulates_to_what_was_fed(
    sequence: tuple[list[Event], list[tuple[ItemKind, list[str], Any]], FinishReason],
    data: st.DataObject,
) -> None:
    """Whatever the items, their interleaving and the chunks the bytes arrive in."""
    events, drawn, reason = sequence
    has_calls = any(kind is ItemKind.TOOL_CALL for kind, _, _ in drawn)

    # Responses: every item, in the order added
    _, body = responses(events)
    checks.check_responses_stream(body)
    response = checks.responses_final(split(body, data))
    assert response.status == (
        "incomplete"
        if reason in (FinishReason.LENGTH, FinishReason.CONTENT_FILTER)
        else "completed"
    )
    assert [_responses_view(item) for item in response.output] == [_view(item) for item in drawn]

    # Chat: one message; its texts by kind, its calls in order
    _, body = chat(events, include_usage=True)
    checks.check_chat_stream(body)
    (choice,) = checks.chat_final(split(body, data)).choices
    message = choice.message
    assert (message.content or "") == _texts(drawn, ItemKind.TEXT, events)
    assert (message.refusal or "") == _texts(drawn, ItemKind.REFUSAL, events)
    assert (getattr(message, "reasoning_content", None) or "") == _texts(
        drawn, ItemKind.REASONING, events
    )
    assert chat_calls(message) == [
        (f"call_{k}", f"tool_{k}", v)
        for k, (kind, _, v) in enumerate(drawn)
        if kind is ItemKind.TOOL_CALL
    ]

    # Messages: one block per item, in opening order, whatever the interleaving
    _, body = messages(events)
    checks.check_messages_stream(body)
    final = checks.messages_final(split(body, data))
    assert [_messages_view(block) for block in final.content] == [
        _view(item, refusal_as=ItemKind.TEXT) for item in drawn
    ]
    if reason is FinishReason.STOP and has_calls:
        assert final.stop_reason == "tool_use"
    assert final.stop_sequence == ("END" if reason is FinishReason.STOP_SEQUENCE else None)


def _view(
    item: tuple[ItemKind, list[str], Any], *, refusal_as: ItemKind = ItemKind.REFUSAL
) -> tuple[str, Any]:
    kind, deltas, value = item
    if kind is ItemKind.TOOL_CALL:
        return "call", value
    if kind is ItemKind.REFUSAL:
        kind = refusal_as
    return kind.value, "".join(deltas)


def _responses_view(item: Any) -> tuple[str, Any]:
    if item.type == "function_call":
        return "call", json.loads(item.arguments)
    if item.type == "reasoning":
        return "reasoning", item.content[0].text
    (part,) = item.content
    return ("refusal", part.refusal) if part.type == "refusal" else ("text", part.text)


def _messages_view(block: Any) -> tuple[str, Any]:
    if block.type == "tool_use":
        return "call", block.input
    if block.type == "thinking":
        return "reasoning", block.thinking
    return "text", block.text


@pytest.mark.parametrize("client", list(WireApi))
def test_events_before_started_start_the_response_implicitly(client: WireApi) -> None:
    encoder = ENCODERS[client](context(client))
    body = b"".join(
        raw(encoder.feed(e)) for e in [*text_item(0, "hi"), Finished(FinishReason.STOP)]
    )
    if client is WireApi.RESPONSES:
        assert checks.responses_final(body).output_text == "hi"
    elif client is WireApi.CHAT:
        assert checks.chat_final(body).choices[0].message.content == "hi"
    else:
        assert [_messages_view(b) for b in checks.messages_final(body).content] == [("text", "hi")]


@settings(max_examples=40, deadline=None)
@given(sequences(), st.data())
def test_a_failure_anywhere_makes_every_sdk_raise(
    sequence: tuple[list[Event], list[tuple[ItemKind, list[str], Any]], FinishReason],
    data: st.DataObject,
) -> None:
    """Cut before the end and failed: an SDK error, never a shorter success."""
    events = sequence[0][: data.draw(st.integers(0, len(sequence[0]) - 1))]
    try_again = data.draw(st.booleans())
    raised: dict[WireApi, type[Exception]] = {
        WireApi.RESPONSES: openai.APIError,
        WireApi.CHAT: openai.APIError,
        WireApi.MESSAGES: anthropic.APIStatusError,
    }
    finals: dict[WireApi, Callable[[bytes], Any]] = {
        WireApi.RESPONSES: checks.responses_final,
        WireApi.CHAT: checks.chat_final,
        WireApi.MESSAGES: checks.messages_final,
    }
    for client, make in ENCODERS.items():
        encoder = make(context(client))
        body = b"".join(raw(encoder.feed(e)) for e in events)
        body += raw(encoder.fail("upstream went quiet", code=None, try_again=try_again))
        assert encoder.finished
        STREAM_CHECKS[client](body)
        with pytest.raises(raised[client], match="upstream went quiet"):
            finals[client](body)


# -- Deterministic output: the time and the ids are the context's ----------------------------

#: 2026-01-01T00:00:00.75Z: the encoders write whole seconds.
FIXED_NOW = 1767225600.75
#: A response the upstream gave no id, no time and a call without an id: everything made up.
UNNAMED: list[Event] = [
    Started(),
    *text_item(0, "Hi"),
    ItemStarted(1, ItemKind.TOOL_CALL, call_id="", name="shell"),
    ItemDelta(1, '{"cmd":"ls"}'),
    ItemDone(1),
    Usage(input_tokens=5, output_tokens=2),
    Finished(FinishReason.TOOL_CALLS),
]


def fixed(client: WireApi, **fields: Any) -> TranslationContext:
    """A context whose clock stands still and whose ids count."""
    return context(client, clock=lambda: FIXED_NOW, ids=counting(), **fields)


def whole_body(encoder: Encoder, events: Sequence[Event]) -> Any:
    for event in events:
        assert raw(encoder.feed(event)) == b""
    return orjson.loads(encoder.body())


def test_a_chat_body_takes_its_time_and_ids_from_the_context() -> None:
    body = whole_body(ChatEncoder(fixed(WireApi.CHAT, stream=False)), UNNAMED)
    call = {"id": "call_t2", "type": "function"}
    call["function"] = {"name": "shell", "arguments": '{"cmd":"ls"}'}
    assert body == {
        "id": "chatcmpl-t1",
        "object": "chat.completion",
        "created": 1767225600,
        "model": MODEL,
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "Hi",
                    "refusal": None,
                    "tool_calls": [call],
                },
                "logprobs": None,
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {
            "prompt_tokens": 5,
            "completion_tokens": 2,
            "total_tokens": 7,
            "prompt_tokens_details": {"cached_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0},
        },
    }


def test_a_messages_body_takes_its_ids_from_the_context() -> None:
    body = whole_body(MessagesEncoder(fixed(WireApi.MESSAGES, stream=False)), UNNAMED)
    assert body == {
        "id": "msg_t1",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": [
            {"type": "text", "text": "Hi"},
            {"type": "tool_use", "id": "toolu_t2", "name": "shell", "input": {"cmd": "ls"}},
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {
            "input_tokens": 5,
            "output_tokens": 2,
            "cache_read_input_tokens": 0,
            "cache_creation_input_tokens": 0,
        },
    }


def test_a_responses_body_takes_its_times_and_ids_from_the_context() -> None:
    body = whole_body(ResponsesEncoder(fixed(WireApi.RESPONSES, stream=False)), UNNAMED)
    own = {k: body.pop(k) for k in ("id", "created_at", "completed_at", "status", "output")}
    assert own == {
        "id": "resp_t1",
        "created_at": 1767225600,
        "completed_at": 1767225600,
        "status": "completed",
        "output": [
            {
                "id": "msg_t2",
                "type": "message",
                "status": "completed",
                "role": "assistant",
                "content": [
                    {"type": "output_text", "text": "Hi", "annotations": [], "logprobs": []}
                ],
            },
            {
                "type": "function_call",
                "arguments": '{"cmd":"ls"}',
                "id": "fc_t4",
                "status": "completed",
                "call_id": "call_t3",
                "name": "shell",
            },
        ],
    }


def test_a_chat_stream_is_the_same_bytes_every_time() -> None:
    head = (
        b'data: {"id":"chatcmpl-t1","object":"chat.completion.chunk","created":1767225600,'
        b'"model":"client-model","system_fingerprint":null,"choices":[{"index":0,"delta":'
    )
    tail = b',"logprobs":null,"finish_reason":null}]}\n\n'
    call = b'{"index":0,"id":"call_t2","type":"function","function":'
    call += b'{"name":"shell","arguments":""}}'
    arguments = b'{"index":0,"function":{"arguments":"{\\"cmd\\":\\"ls\\"}"}}'
    expected = [
        head + b'{"role":"assistant","content":""}' + tail,
        head + b'{"content":"Hi"}' + tail,
        head + b'{"tool_calls":[' + call + b"]}" + tail,
        head + b'{"tool_calls":[' + arguments + b"]}" + tail,
        head + b'{},"logprobs":null,"finish_reason":"tool_calls"}]}\n\n',
        b"data: [DONE]\n\n",
    ]
    for _ in range(2):
        encoder = ChatEncoder(fixed(WireApi.CHAT))
        assert b"".join(raw(encoder.feed(event)) for event in UNNAMED) == b"".join(expected)


@pytest.mark.parametrize("client", list(WireApi))
def test_every_stream_is_a_function_of_its_events_and_context(client: WireApi) -> None:
    runs = [
        b"".join(raw(encoder.feed(event)) for event in UNNAMED)
        for encoder in (encoder_for(client, fixed(client)) for _ in range(2))
    ]
    assert runs[0] == runs[1]
    first_id = {WireApi.CHAT: b"chatcmpl-t1", WireApi.RESPONSES: b"resp_t1"}
    assert b'"%s"' % first_id.get(client, b"msg_t1") in runs[0]


def test_a_translated_request_hands_its_clock_and_ids_to_the_response() -> None:
    request = translate(
        WireApi.RESPONSES,
        WireApi.CHAT,
        {"model": MODEL, "input": "hi", "stream": True},
        TranslationOptions(),
        clock=lambda: FIXED_NOW,
        ids=counting(),
    )
    frames = raw(encoder_for(WireApi.RESPONSES, request.context).feed(Started()))
    assert b'"id":"resp_t1"' in frames and b'"created_at":1767225600' in frames


@pytest.mark.parametrize(
    ("upstream_id", "client", "expected"),
    [
        ("chatcmpl-abc", WireApi.RESPONSES, "resp_abc"),
        ("resp_abc", WireApi.MESSAGES, "msg_abc"),
        ("msg_abc", WireApi.CHAT, "chatcmpl-abc"),
        ("msg_abc", WireApi.MESSAGES, "msg_abc"),
        ("gen-1.2", WireApi.MESSAGES, "msg_gen-1_2"),
    ],
)
def test_an_upstream_id_in_any_apis_style_keeps_its_token(
    upstream_id: str, client: WireApi, expected: str
) -> None:
    frames = raw(encoder_for(client, fixed(client)).feed(Started(id=upstream_id)))
    assert b'"%s"' % expected.encode() in frames
