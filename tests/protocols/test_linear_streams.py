"""Per-event work on a stream is constant, amortized (issue 20, item 7): observers and
decoders over many parallel tool calls measured at size n and 2n by counting their work
(:mod:`proxai.testing.work`: lines of Python run and bytes allocated), never by a clock.
The hostile sizes themselves (10,000 and 20,000 calls) are measured in bench/profile.md
(``bench/hostile.py``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from trio.testing import MockClock

from proxai.config import TimeoutsConfig
from proxai.outcome import OutcomeKind
from proxai.protocols.chat.observer import ChatObserver
from proxai.protocols.messages.observer import MessagesObserver
from proxai.protocols.names import WireApi
from proxai.protocols.responses.observer import ResponsesObserver
from proxai.protocols.tracking import ITEM_BYTES, StreamLimits, TrackingObserver
from proxai.testing import Script, chat_chunk, sse_event
from proxai.testing.memory_proxy import MemoryProxy
from proxai.testing.streams import made_bytes as raw
from proxai.testing.work import assert_linear
from proxai.translate.decoders import ChatDecoder, MessagesDecoder, ResponsesDecoder
from proxai.translate.encoders import encoder_for
from proxai.translate.ir import (
    Event,
    Finished,
    FinishReason,
    ItemDelta,
    ItemDone,
    ItemKind,
    ItemStarted,
    Started,
    TranslationContext,
)
from proxai.wire.sse import SSEFrame, SSEFramer

RESPONSES, CHAT, MESSAGES = WireApi.RESPONSES, WireApi.CHAT, WireApi.MESSAGES

TIMEOUTS = TimeoutsConfig(idle=30.0, tool_arguments=20.0, total=1000.0)
Operation = Callable[[int], Callable[[], object]]
Stream = Callable[[int], list[SSEFrame]]


def framed(events: list[bytes]) -> list[SSEFrame]:
    framer = SSEFramer()
    frames = framer.feed(b"".join(events))
    assert framer.close() == b""
    return frames


def chat_calls(n: int) -> list[SSEFrame]:
    """A Chat stream of ``n`` parallel tool calls, each a start and one fragment."""
    lines = [chat_chunk({"role": "assistant", "content": ""})]
    for i in range(n):
        start = {"index": i, "id": f"call_{i}", "type": "function", "function": {"name": "f"}}
        lines.append(chat_chunk({"tool_calls": [start]}))
        fragment = {"index": i, "function": {"arguments": '{"a": 1}'}}
        lines.append(chat_chunk({"tool_calls": [fragment]}))
    lines.append(chat_chunk({}, finish="tool_calls"))
    lines.append(b"data: [DONE]\n\n")
    return framed(lines)


def chat_finish_reasons(n: int) -> list[SSEFrame]:
    """``n`` calls open on choice 1 while choice 0 repeats its finish_reason ``n`` times."""
    lines = []
    for i in range(n):
        start = {"index": i, "id": f"call_{i}", "type": "function", "function": {"name": "f"}}
        lines.append(chat_chunk({"tool_calls": [start]}, index=1))
    lines += [chat_chunk({}, finish="stop")] * n
    return framed(lines)


def responses_calls(n: int) -> list[SSEFrame]:
    """A Responses stream of ``n`` function calls added one after another, all left open,
    each with one arguments delta."""
    events: list[bytes] = []
    for i in range(n):
        item = {"type": "function_call", "id": f"fc_{i}", "call_id": f"call_{i}", "name": "f"}
        added = {"type": "response.output_item.added", "output_index": i}
        events.append(sse_event(added | {"item": item | {"arguments": ""}}))
        delta = {"type": "response.function_call_arguments.delta", "output_index": i}
        events.append(sse_event(delta | {"item_id": f"fc_{i}", "delta": '{"a": 1}'}))
    return framed(events)


def messages_blocks(n: int) -> list[SSEFrame]:
    """A Messages stream of ``n`` tool_use blocks started one after another, all left open,
    each with one input delta and a usage update of its own."""
    events: list[bytes] = []
    for i in range(n):
        block = {"type": "tool_use", "id": f"toolu_{i}", "name": "f", "input": {}}
        events.append(
            sse_event({"type": "content_block_start", "index": i, "content_block": block})
        )
        delta = {"type": "input_json_delta", "partial_json": '{"a": 1}'}
        events.append(sse_event({"type": "content_block_delta", "index": i, "delta": delta}))
        usage = {f"tokens_{i}": i}
        events.append(sse_event({"type": "message_delta", "delta": {}, "usage": usage}))
    return framed(events)


def arguments_done_after_each_delta(n: int) -> list[SSEFrame]:
    """A call whose every arguments delta is followed by a ``.done`` that repeats nothing."""
    item = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "f"}
    added = {"type": "response.output_item.added", "output_index": 0}
    events = [sse_event(added | {"item": item | {"arguments": ""}})]
    where = {"output_index": 0, "item_id": "fc_1"}
    for _ in range(n):
        delta = {"type": "response.function_call_arguments.delta", **where, "delta": "x" * 400}
        done = {"type": "response.function_call_arguments.done", **where, "arguments": "{}"}
        events += [sse_event(delta), sse_event(done)]
    return framed(events)


def observing(make: Callable[[], TrackingObserver], stream: Stream) -> Operation:
    """Frames in one by one, the deadline asked after each, as the relay does per read."""

    def operation(n: int) -> Callable[[], object]:
        frames = stream(n)

        def run() -> None:
            observer = make()
            observer.on_start(0.0)
            for position, frame in enumerate(frames):
                observer.on_frames([frame], 1.0 + position / 1000)
                observer.deadline()

        return run

    return operation


def chat_observer() -> TrackingObserver:
    return ChatObserver(TIMEOUTS)


def responses_observer() -> TrackingObserver:
    return ResponsesObserver(TIMEOUTS)


def messages_observer() -> TrackingObserver:
    return MessagesObserver(TIMEOUTS)


@pytest.mark.parametrize(
    ("make", "stream"),
    [
        (chat_observer, chat_calls),
        (chat_observer, chat_finish_reasons),
        (responses_observer, responses_calls),
        (responses_observer, arguments_done_after_each_delta),
        (messages_observer, messages_blocks),
    ],
    ids=["chat-calls", "chat-finish-reasons", "responses-calls", "responses-done", "messages"],
)
def test_an_observer_grows_linearly(make: Callable[[], TrackingObserver], stream: Stream) -> None:
    """10,000 parallel calls cost ~10 s, 20,000 ~35 s: every fragment re-guarded every call
    of its choice, every read's deadline walked every open item, every ``.done`` joined
    everything so far, every usage update copied the usage so far."""
    assert_linear(observing(make, stream), 300)


def decoding(make: Callable[[], Any], stream: Stream) -> Operation:
    def operation(n: int) -> Callable[[], object]:
        frames = stream(n)

        def run() -> None:
            decoder = make()
            for frame in frames:
                decoder.feed(frame)

        return run

    return operation


def thinking_signature(n: int) -> list[SSEFrame]:
    """One thinking block whose signature comes in ``n`` pieces."""
    start = {"type": "thinking", "thinking": "", "signature": ""}
    events = [
        sse_event({"type": "message_start", "message": {"id": "msg_1", "model": "m"}}),
        sse_event({"type": "content_block_start", "index": 0, "content_block": start}),
    ]
    delta = {"type": "signature_delta", "signature": "s" * 64}
    events += [sse_event({"type": "content_block_delta", "index": 0, "delta": delta})] * n
    events.append(sse_event({"type": "content_block_stop", "index": 0}))
    return framed(events)


def text_done_after_each_delta(n: int) -> list[SSEFrame]:
    """A text part whose every delta is followed by a ``.done`` that repeats nothing."""
    item = {"type": "message", "id": "msg_1", "role": "assistant", "content": []}
    events = [sse_event({"type": "response.output_item.added", "output_index": 0, "item": item})]
    where = {"output_index": 0, "item_id": "msg_1", "content_index": 0}
    for _ in range(n):
        events.append(
            sse_event({"type": "response.output_text.delta", **where, "delta": "x" * 400})
        )
        events.append(sse_event({"type": "response.output_text.done", **where, "text": ""}))
    return framed(events)


@pytest.mark.parametrize(
    ("make", "stream"),
    [
        (ChatDecoder, chat_calls),
        (ResponsesDecoder, responses_calls),
        (MessagesDecoder, messages_blocks),
        (MessagesDecoder, thinking_signature),
        (ResponsesDecoder, text_done_after_each_delta),
    ],
    ids=["chat-calls", "responses-calls", "messages-calls", "messages-signature", "responses-done"],
)
def test_a_decoder_grows_linearly(make: Callable[[], Any], stream: Stream) -> None:
    """Each new call closed what was open by walking every open item; a signature was
    joined by ``+`` piece by piece; each ``.done`` joined everything so far."""
    assert_linear(decoding(make, stream), 300)


def encoding(api: WireApi, stream: bool) -> Operation:
    """``n`` parallel calls, then their ends, into an encoder (and its body, when whole)."""

    def operation(n: int) -> Callable[[], object]:
        events: list[Event] = [Started(id="up_1", model="m")]
        for i in range(n):
            events += [ItemStarted(i, ItemKind.TOOL_CALL, call_id=f"c{i}", name="f")]
            events += [ItemDelta(i, '{"a": 1}')]
        events += [ItemDone(i) for i in range(n)]
        events.append(Finished(FinishReason.TOOL_CALLS))

        def run() -> None:
            ctx = TranslationContext(client=api, upstream=CHAT, stream=stream)
            encoder = encoder_for(api, ctx)
            for event in events:
                encoder.feed(event)
            if not stream:
                encoder.body()

        return run

    return operation


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "body"])
@pytest.mark.parametrize("api", [RESPONSES, CHAT, MESSAGES])
def test_an_encoder_grows_linearly(api: WireApi, stream: bool) -> None:
    assert_linear(encoding(api, stream), 300)


# -- open items per stream are capped ----------------------------------------------------


def test_an_item_past_max_open_items_ends_the_stream_with_the_protocols_error() -> None:
    observer = ChatObserver(TIMEOUTS, StreamLimits(max_open_items=10))
    observer.on_start(0.0)
    frames = chat_calls(11)
    observer.on_frames(frames[:21], 1.0)  # the role chunk, then 10 calls
    assert observer.over_limit is None
    observer.on_frames(frames[21:], 2.0)
    verdict = observer.over_limit
    assert verdict is not None and verdict.kind is OutcomeKind.UPSTREAM_OVER_LIMIT
    assert "more than 10 items at once (proxai max_open_items)" in (verdict.detail or "")
    assert raw(verdict.closing).endswith(b"data: [DONE]\n\n")
    assert observer.deadline() <= 2.0  # due now, whatever the relay does
    assert len(observer.open_items) == 10  # nothing more was tracked


CHAT_UPSTREAM = {"local": {"protocol": "openai_chat", "base_url": "http://local.test/v1"}}
TO_CHAT = [{"model": "*", "upstreams": ["local"]}]
GO = [{"role": "user", "content": "go"}]
REQUESTS = {
    CHAT: ("/v1/chat/completions", {"messages": GO}),
    RESPONSES: ("/v1/responses", {"input": "go"}),
    MESSAGES: ("/v1/messages", {"max_tokens": 100, "messages": GO}),
}
CALLS = 1100  # past the default max_open_items, 1024


def chat_call_lines(n: int) -> list[bytes]:
    lines = [chat_chunk({"role": "assistant", "content": ""})]
    for i in range(n):
        start = {"index": i, "id": f"call_{i}", "type": "function", "function": {"name": "f"}}
        lines.append(chat_chunk({"tool_calls": [start]}))
        lines.append(chat_chunk({"tool_calls": [{"index": i, "function": {"arguments": "{}"}}]}))
    return [*lines, chat_chunk({}, finish="tool_calls"), b"data: [DONE]\n\n"]


@pytest.mark.parametrize("client", [CHAT, RESPONSES, MESSAGES])
async def test_a_stream_of_too_many_parallel_calls_ends_with_the_clients_error(
    autojump_clock: MockClock, client: WireApi
) -> None:
    """Past ``max_open_items`` the stream ends as a stall does: the client's protocol's
    error after what it got, the upstream let go, ``upstream_over_limit`` recorded."""
    path, body = REQUESTS[client]
    script = Script.sse(chat_call_lines(CALLS))
    async with MemoryProxy([script], upstreams=CHAT_UPSTREAM, routes=TO_CHAT) as proxy:
        exchange = await proxy.request({"model": "m", "stream": True, **body}, path=path)
        (upstream,) = proxy.transport.requests
    outcome = exchange.outcome
    assert outcome is not None and outcome.kind is OutcomeKind.UPSTREAM_OVER_LIMIT
    assert "more than 1024 items at once (proxai max_open_items)" in (outcome.detail or "")
    assert exchange.status == 200
    assert upstream.bytes_sent < len(script.body)  # let go before the end
    events = exchange.events()  # every event whole
    last = events[-1]
    if client is CHAT:
        assert exchange.body.endswith(b"data: [DONE]\n\n")
        assert last["error"]["type"] == "server_error"
        deltas = [e["choices"][0]["delta"] for e in events[1:-1]]
        calls = {call["index"] for delta in deltas for call in delta["tool_calls"]}
        assert len(calls) == 1024
    elif client is RESPONSES:
        assert last["type"] == "response.failed"
        assert events[-2]["type"] == "error"
    else:
        assert last["type"] == "error"


async def test_too_many_items_before_any_byte_is_a_502(autojump_clock: MockClock) -> None:
    script = Script.sse(chat_call_lines(CALLS), chunk_size=1 << 20)  # all in one read
    async with MemoryProxy([script], upstreams=CHAT_UPSTREAM, routes=TO_CHAT) as proxy:
        path, body = REQUESTS[CHAT]
        exchange = await proxy.request({"model": "m", "stream": True, **body}, path=path)
    assert exchange.status == 502
    assert exchange.json()["error"]["code"] == "upstream_over_limit"
    assert exchange.outcome is not None
    assert exchange.outcome.kind is OutcomeKind.UPSTREAM_OVER_LIMIT


async def test_max_open_items_is_configurable(autojump_clock: MockClock) -> None:
    script = Script.sse(chat_call_lines(CALLS))
    server = {"max_open_items": 2000}
    async with MemoryProxy(
        [script], upstreams=CHAT_UPSTREAM, routes=TO_CHAT, server=server
    ) as proxy:
        path, body = REQUESTS[CHAT]
        exchange = await proxy.request({"model": "m", "stream": True, **body}, path=path)
    assert exchange.outcome is not None
    assert exchange.outcome.kind is OutcomeKind.COMPLETED
    assert exchange.outcome.calls_more == CALLS - 32


# -- 10,000 parallel calls translated (issue 38, item 8) ------------------------------------

#: Parallel calls within a raised ``max_open_items``: what judges them is then what a
#: translated stream holds of its items (``max_event_bytes``).
MANY = 10_000
MANY_OPEN = {"max_open_items": 40_000}


def call_types(exchange: Any) -> dict[str, int]:
    """How many events of each type the client got."""
    counts: dict[str, int] = {}
    for event in exchange.events():
        counts[event["type"]] = counts.get(event["type"], 0) + 1
    return counts


@pytest.mark.parametrize("client", [RESPONSES, MESSAGES])
async def test_parallel_calls_within_every_bound_complete_translated(
    autojump_clock: MockClock, client: WireApi
) -> None:
    """10,000 calls, with ``max_event_bytes`` room for their records: every call reaches
    the client closed, and the response completes."""
    server = {**MANY_OPEN, "max_event_bytes": MANY * ITEM_BYTES + (1 << 20)}
    path, body = REQUESTS[client]
    async with MemoryProxy(
        [Script.sse(chat_call_lines(MANY))], upstreams=CHAT_UPSTREAM, routes=TO_CHAT, server=server
    ) as proxy:
        exchange = await proxy.request({"model": "m", "stream": True, **body}, path=path)
    assert exchange.outcome is not None and exchange.outcome.kind is OutcomeKind.COMPLETED
    counts = call_types(exchange)
    if client is RESPONSES:
        assert counts["response.function_call_arguments.done"] == MANY
        assert counts["response.output_item.done"] == MANY
        final = exchange.events()[-1]
        assert final["type"] == "response.completed"
        assert len(final["response"]["output"]) == MANY
    else:
        assert counts["content_block_stop"] == MANY
        assert exchange.events()[-1]["type"] == "message_stop"


@pytest.mark.parametrize("client", [RESPONSES, MESSAGES])
async def test_parallel_calls_past_max_event_bytes_end_as_they_pass_it_naming_it(
    autojump_clock: MockClock, client: WireApi
) -> None:
    """At the default ``max_event_bytes`` 10,000 call records (2 KiB counted each) are past
    it: the stream ends at the call that passes it, not once the upstream sent everything,
    and the client's error and the outcome say which bound and what it counted."""
    script = Script.sse(chat_call_lines(MANY))
    path, body = REQUESTS[client]
    async with MemoryProxy(
        [script], upstreams=CHAT_UPSTREAM, routes=TO_CHAT, server=MANY_OPEN
    ) as proxy:
        exchange = await proxy.request({"model": "m", "stream": True, **body}, path=path)
        (upstream,) = proxy.transport.requests
    outcome = exchange.outcome
    assert outcome is not None and outcome.kind is OutcomeKind.UPSTREAM_OVER_LIMIT
    assert upstream.bytes_sent < len(script.body) * 0.9  # let go as it passed the bound
    detail = outcome.detail or ""
    assert "holds more than 16777216 bytes (proxai max_event_bytes)" in detail
    assert f"item records at {ITEM_BYTES} bytes each" in detail
    last = exchange.events()[-1]
    if client is RESPONSES:
        assert last["type"] == "response.failed"
        assert last["response"]["error"]["code"] == "upstream_over_limit"
        assert last["response"]["error"]["message"] == detail
    else:
        assert last == {"type": "error", "error": {"type": "api_error", "message": detail}}


async def test_open_chat_calls_count_against_max_event_bytes(autojump_clock: MockClock) -> None:
    """A Chat stream's calls are counted as they open, as the other APIs' items are: one
    that opens calls and never finishes them is bounded by ``max_event_bytes`` too, not
    only by ``max_open_items``."""
    lines = chat_call_lines(600)[:-2]  # 600 calls open, then the body ends
    server = {**MANY_OPEN, "max_event_bytes": 256 * 1024}
    path, body = REQUESTS[RESPONSES]
    async with MemoryProxy(
        [Script.sse(lines)], upstreams=CHAT_UPSTREAM, routes=TO_CHAT, server=server
    ) as proxy:
        exchange = await proxy.request({"model": "m", "stream": True, **body}, path=path)
    outcome = exchange.outcome
    assert outcome is not None and outcome.kind is OutcomeKind.UPSTREAM_OVER_LIMIT
    assert "holds more than 262144 bytes (proxai max_event_bytes)" in (outcome.detail or "")
