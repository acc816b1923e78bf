"""What a long stream keeps: of its request, the bytes each upstream is sent, at their size;
of its response, about its text (the observer's aggregates, and what the client's
protocol needs at the end), never an object per delta, and never more than
``max_event_bytes`` (issue 20, item 8)."""

from __future__ import annotations

import tracemalloc
from functools import partial
from typing import Any

import orjson
import pytest
from trio.testing import MockClock

from proxai.config import TimeoutsConfig
from proxai.outcome import OutcomeKind
from proxai.protocols.names import WireApi
from proxai.protocols.observer import Read
from proxai.protocols.table import APIS
from proxai.protocols.tracking import StreamLimits, TrackingObserver
from proxai.testing import Script, chat_chunk, sse_event
from proxai.testing.memory_proxy import MemoryProxy
from proxai.testing.work import kept_by
from proxai.translate.ir import TranslationContext
from proxai.translate.pairs import PAIRS
from proxai.wire.json_body import dumps_kept
from proxai.wire.sse import SSEFrame, SSEFramer

RESPONSES, CHAT, MESSAGES = WireApi.RESPONSES, WireApi.CHAT, WireApi.MESSAGES

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}


def allocated_per_item(make: object) -> float:
    """Bytes allocated per call of ``make`` that stay alive, over 200 calls."""
    assert callable(make)
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        kept = [make() for _ in range(200)]
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    grown = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    assert len(kept) == 200
    return grown / 200


def test_a_body_kept_for_a_stream_holds_its_size_not_orjsons_buffer() -> None:
    size = len(orjson.dumps(BODY))
    assert dumps_kept(BODY) == orjson.dumps(BODY)
    assert allocated_per_item(lambda: dumps_kept(BODY)) < size + 128
    # What this guards against: orjson's own result keeps its growth buffer.
    assert allocated_per_item(lambda: orjson.dumps(BODY)) > 1024


# -- what a stream keeps of its response ---------------------------------------------------

DELTA = "abcde"


def frames_of(events: list[bytes]) -> list[SSEFrame]:
    framer = SSEFramer()
    return [frame for data in events for frame in framer.feed(data)]


def text_stream(upstream: WireApi, deltas: int, text: str = DELTA) -> list[bytes]:
    """A stream of ``deltas`` text deltas in ``upstream``'s API, without its end."""
    if upstream is CHAT:
        return [chat_chunk({"role": "assistant", "content": ""})] + [
            chat_chunk({"content": text})
        ] * deltas
    if upstream is MESSAGES:
        start = {"type": "message_start", "message": {"id": "msg_1", "model": "m"}}
        block = {"type": "content_block_start", "index": 0}
        delta = {"type": "content_block_delta", "index": 0}
        return [
            sse_event(start),
            sse_event(block | {"content_block": {"type": "text", "text": ""}}),
        ] + [sse_event(delta | {"delta": {"type": "text_delta", "text": text}})] * deltas
    item = {"type": "message", "id": "msg_1", "role": "assistant", "content": []}
    where = {"output_index": 0, "item_id": "msg_1", "content_index": 0}
    added = {"type": "response.output_item.added", "output_index": 0, "item": item}
    return [sse_event(added)] + [
        sse_event({"type": "response.output_text.delta", **where, "delta": text})
    ] * deltas


#: Each API's observer, as its row of the table builds it (a new row is measured too).
OBSERVERS: dict[WireApi, Any] = {
    api.wire: partial(lambda api, timeouts, limits: api.observer(timeouts, None, limits), api)
    for api in APIS
}


def kept_per_delta(client: WireApi, upstream: WireApi, deltas: int = 40_000) -> float:
    """Bytes the observer and (when the APIs differ) the translator of a stream keep per
    short text delta, by tracemalloc."""
    frames = frames_of(text_stream(upstream, deltas))

    def stream() -> object:
        observer = OBSERVERS[upstream](TimeoutsConfig(), StreamLimits())
        translator = None
        if client is not upstream:
            ctx = TranslationContext(client=client, upstream=upstream, stream=True, model="m")
            translator = PAIRS[(client, upstream)].translator(ctx)
            translator.follow(observer)  # as the relay has it: the observer's reader's items
        observer.on_start(0.0)
        for frame in frames:
            reads: list[Read] | None = None if translator is None else []
            observer.read_frames([frame], 1.0, reads)
            if translator is not None and reads is not None:
                translator.reads(reads)
        assert observer.over_limit is None
        return observer, translator

    return kept_by(stream) / deltas


@pytest.mark.parametrize(
    ("client", "upstream", "most"),
    [
        # The Responses client's response.completed carries the whole text: the encoder
        # keeps it, beside the observer's aggregate.
        (RESPONSES, CHAT, 2 * len(DELTA) + 4),
        (RESPONSES, MESSAGES, 2 * len(DELTA) + 4),
        # Chat and Messages clients need none of it at the end: only the observer keeps it.
        (MESSAGES, CHAT, len(DELTA) + 3),
        (CHAT, MESSAGES, len(DELTA) + 3),
        (CHAT, RESPONSES, 2 * len(DELTA) + 4),  # the decoder keeps it for ``.done``s
        (CHAT, CHAT, len(DELTA) + 3),
        (RESPONSES, RESPONSES, len(DELTA) + 3),
        (MESSAGES, MESSAGES, len(DELTA) + 3),
    ],
)
def test_a_stream_keeps_about_its_text_not_an_object_per_delta(
    client: WireApi, upstream: WireApi, most: int
) -> None:
    """Each 5-character delta was kept as its own str by the observer and by the encoder:
    about 124 bytes per delta for a translated stream, 62 for one relayed as is."""
    assert kept_per_delta(client, upstream) <= most


@pytest.mark.parametrize("upstream", [CHAT, RESPONSES, MESSAGES])
def test_an_observer_keeps_at_most_max_kept_and_compares_only_what_it_kept(
    upstream: WireApi,
) -> None:
    limit = 64 * 1024
    frames = frames_of(text_stream(upstream, 1000, "x" * 1000))  # 1 MB of text
    observer: TrackingObserver = OBSERVERS[upstream](TimeoutsConfig(), StreamLimits(max_kept=limit))

    def stream() -> object:
        observer.on_start(0.0)
        for frame in frames:
            observer.on_frames([frame], 1.0)
        return observer

    assert kept_by(stream) < 2 * limit
    assert observer.over_limit is None  # relayed as is, a long stream goes on
    assert any("kept 65536 bytes for its end-of-stream checks" in a for a in observer._anomalies)


@pytest.mark.parametrize("upstream", [CHAT, RESPONSES, MESSAGES])
def test_a_new_observer_and_its_reader_hold_under_2_kib(upstream: WireApi) -> None:
    """Every held stream keeps one: with an instance dict each (the tracking observer's
    31 attributes are past the 30 whose keys CPython shares) they held 2.3-3.2 KiB."""
    make = OBSERVERS[upstream]
    timeouts, limits = TimeoutsConfig(), StreamLimits()
    assert allocated_per_item(lambda: make(timeouts, limits)) < 2048


CHAT_UPSTREAM = {"local": {"protocol": "openai_chat", "base_url": "http://local.test/v1"}}
MESSAGES_UPSTREAM = {
    "local": {"protocol": "anthropic_messages", "base_url": "http://local.test/v1"}
}
GO = [{"role": "user", "content": "go"}]
REQUESTS = {
    CHAT: ("/v1/chat/completions", {"messages": GO}),
    RESPONSES: ("/v1/responses", {"input": "go"}),
    MESSAGES: ("/v1/messages", {"max_tokens": 100, "messages": GO}),
}


@pytest.mark.parametrize(
    ("client", "upstream"), [(RESPONSES, CHAT), (MESSAGES, CHAT), (CHAT, MESSAGES)]
)
async def test_a_translated_stream_holding_more_than_max_event_bytes_ends_with_the_clients_error(
    autojump_clock: MockClock, client: WireApi, upstream: WireApi
) -> None:
    """A translated stream's translator holds what its client's protocol needs at the end
    (all of the text, for a Responses client): past ``max_event_bytes`` the stream ends
    as a fault, and the upstream is let go."""
    script = Script.sse(text_stream(upstream, 400, "x" * 1000))  # 400 KB, never ending
    upstreams = CHAT_UPSTREAM if upstream is CHAT else MESSAGES_UPSTREAM
    routes = [{"model": "*", "upstreams": ["local"]}]
    server = {"max_event_bytes": 100_000}
    path, body = REQUESTS[client]
    async with MemoryProxy([script], upstreams=upstreams, routes=routes, server=server) as proxy:
        exchange = await proxy.request({"model": "m", "stream": True, **body}, path=path)
        (sent,) = proxy.transport.requests
    outcome = exchange.outcome
    assert outcome is not None and outcome.kind is OutcomeKind.UPSTREAM_OVER_LIMIT
    assert "holds more than 100000 bytes (proxai max_event_bytes)" in (outcome.detail or "")
    assert sent.bytes_sent < len(script.body)
    assert exchange.status == 200
    last = exchange.events()[-1]
    if client is RESPONSES:
        assert last["type"] == "response.failed"
    elif client is MESSAGES:
        assert last == {"type": "error", "error": {"type": "api_error", "message": outcome.detail}}
    else:
        assert exchange.body.endswith(b"data: [DONE]\n\n")
        assert exchange.events()[-1]["error"]["message"] == outcome.detail


async def test_a_stream_relayed_as_is_goes_on_past_max_event_bytes(
    autojump_clock: MockClock,
) -> None:
    lines = text_stream(CHAT, 400, "x" * 1000)
    lines += [chat_chunk({}, finish="stop"), b"data: [DONE]\n\n"]
    async with MemoryProxy([Script.sse(lines)], server={"max_event_bytes": 100_000}) as proxy:
        path, body = REQUESTS[CHAT]
        exchange = await proxy.request({"model": "m", "stream": True, **body}, path=path)
    assert exchange.outcome is not None and exchange.outcome.kind is OutcomeKind.COMPLETED
    assert exchange.body == Script.sse(lines).body


def test_a_responses_stream_keeps_its_last_snapshot_at_about_its_size_on_the_wire() -> None:
    """The last ``response`` snapshot, kept for a failure proxai may synthesize, is held as
    the event's bytes: parsed, its many short fields took about three times that."""
    response = {"id": "resp_1", "object": "response", "model": "m", "output": []}
    response["metadata"] = {f"key_{i}": f"value {i}" for i in range(60)}
    event = sse_event({"type": "response.created", "sequence_number": 0, "response": response})
    make = OBSERVERS[RESPONSES]
    timeouts, limits = TimeoutsConfig(), StreamLimits()

    def observed() -> object:
        observer = make(timeouts, limits)
        observer.on_start(0.0)
        observer.on_frames(frames_of([event]), 1.0)  # framed here: what it keeps counts
        return observer

    fresh = allocated_per_item(lambda: make(timeouts, limits))
    assert allocated_per_item(observed) - fresh < 1.3 * len(event)
