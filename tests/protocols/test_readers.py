"""The readers: each upstream event parsed once, by its API's reader, for the observer and the
translator alike.

A reader takes an event as ``(type, data bytes)``, whatever carried it, tells its observer
what happened (items opened, grown, no longer guarded, closed; the terminal) and returns
what it parsed, which a translator's decoder reads instead of parsing the bytes again.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, cast

import attrs
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxai.config import TimeoutsConfig
from proxai.outcome import Outcome, OutcomeKind
from proxai.protocols.chat.reader import ChatReader
from proxai.protocols.messages.reader import MessagesReader
from proxai.protocols.names import WireApi
from proxai.protocols.observer import UNREAD, Read
from proxai.protocols.responses.reader import ResponsesReader
from proxai.protocols.table import API_BY_WIRE
from proxai.protocols.tracking import ReaderFactory, StreamLimits, TrackingObserver
from proxai.testing import sse_event
from proxai.testing.seed import TURN1_EVENTS, TURN2_EVENTS
from proxai.testing.streams import data_frames
from proxai.testing.streams import made_bytes as raw
from proxai.translate.decoders import decoder_for
from proxai.translate.encoders import encoder_for
from proxai.translate.ir import TranslationContext
from proxai.translate.stream import ResponseTranslator
from proxai.wire.sse import SSEFramer

TIMEOUTS = TimeoutsConfig(idle=30.0, tool_arguments=20.0, total=1000.0)


def observer(reader: ReaderFactory) -> TrackingObserver:
    return TrackingObserver(TIMEOUTS, StreamLimits(), reader=reader)


def chat(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return orjson.dumps(
        {"id": "c1", "object": "chat.completion.chunk", "choices": [choice], **extra}
    )


def call(index: int, *, id: str | None = None, name: str | None = None, args: str = "") -> bytes:
    fragment: dict[str, Any] = {"index": index, "function": {"arguments": args}}
    if id is not None:
        fragment |= {"id": id, "type": "function"}
        fragment["function"]["name"] = name
    return chat({"tool_calls": [fragment]})


# -- what a reader tells its observer, event by event (no SSE involved) -------------------------


def test_the_chat_reader_guards_the_call_being_streamed_and_returns_the_chunk() -> None:
    obs = observer(ChatReader)
    first = call(0, id="call_a", name="get_weather", args='{"ci')
    assert obs.on_event(None, first, 1.0) == orjson.loads(first)
    assert obs.open_items == ["tool call get_weather (call_a)"]
    assert obs.deadline() == 1.0 + 20.0  # tool_arguments bounds the open call
    obs.on_event(None, call(0, args='ty":"Paris"}'), 5.0)
    assert obs.deadline() == 5.0 + 20.0  # its progress moved its deadline
    obs.on_event(None, call(1, id="call_b", name="get_time"), 6.0)
    # Chat streams a choice's calls one after another: the first is complete now.
    assert obs.deadline() == 6.0 + 20.0
    obs.on_event(None, chat({}, "tool_calls"), 7.0)
    assert obs.open_items == []
    assert obs.deadline() == 7.0 + 30.0  # idle only
    assert obs.on_event(None, b"[DONE]", 8.0) is UNREAD  # nothing to parse
    assert obs.finished
    verdict = obs.on_end(fault=None, detail=None, now=8.0)
    assert verdict.kind is OutcomeKind.COMPLETED and raw(verdict.closing) == b""


def test_the_chat_reader_returns_none_for_data_that_is_no_object() -> None:
    obs = observer(ChatReader)
    assert obs.on_event(None, b"[1, 2]", 0.0) is None
    assert obs.on_event(None, b"{not json", 0.0) is None
    outcome = Outcome("POST", "/v1/chat/completions")
    obs.fill(outcome)
    assert outcome.anomalies == ["data is not a JSON object", "data is not JSON"]


def test_a_chat_stall_ends_with_the_readers_error_chunk() -> None:
    obs = observer(ChatReader)
    obs.on_start(0.0)
    obs.on_event(None, call(0, id="call_a", name="f", args="{"), 0.0)
    verdict = obs.on_deadline(20.0)
    assert verdict.kind is OutcomeKind.STALLED_TOOL_ARGUMENTS
    error, done = data_frames(raw(verdict.closing))
    assert json.loads(error.data or b"")["error"]["code"] == "upstream_timeout"
    assert done.data == b"[DONE]"


def test_the_messages_reader_guards_tool_use_blocks_and_skips_pings() -> None:
    obs = observer(MessagesReader)
    start = {
        "type": "content_block_start",
        "index": 1,
        "content_block": {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}},
    }
    assert obs.on_event("content_block_start", orjson.dumps(start), 1.0) == start
    assert obs.open_items == ["tool_use get_weather (toolu_1)"]
    assert obs.deadline() == 21.0
    assert obs.on_event("ping", b'{"type": "ping"}', 2.0) is UNREAD
    delta = {
        "type": "content_block_delta",
        "index": 1,
        "delta": {"type": "input_json_delta", "partial_json": "{}"},
    }
    obs.on_event("content_block_delta", orjson.dumps(delta), 3.0)
    assert obs.deadline() == 23.0
    obs.on_event("content_block_stop", b'{"type": "content_block_stop", "index": 1}', 4.0)
    obs.on_event(
        "message_delta", b'{"type": "message_delta", "delta": {"stop_reason": "max_tokens"}}', 4.0
    )
    obs.on_event("message_stop", b'{"type": "message_stop"}', 4.0)
    assert obs.on_end(fault=None, detail=None, now=5.0).kind is OutcomeKind.INCOMPLETE
    assert obs.reader.blocks[1].aggregate == "{}"  # type: ignore[attr-defined]


def test_a_messages_stall_ends_with_an_overloaded_error_event() -> None:
    obs = observer(MessagesReader)
    obs.on_start(0.0)
    verdict = obs.on_deadline(30.0)
    assert verdict.kind is OutcomeKind.STALLED_IDLE
    (frame,) = data_frames(raw(verdict.closing))
    assert frame.event == "error"
    assert json.loads(frame.data or b"")["error"]["type"] == "overloaded_error"


def test_the_responses_reader_parses_only_what_it_tracks() -> None:
    obs = observer(lambda tracker: ResponsesReader(tracker, "gpt-test"))
    keepalive = b'{"type": "keepalive", "sequence_number": 0}'
    assert obs.on_event("keepalive", keepalive, 0.0) is UNREAD  # routed by its name alone
    assert obs.on_event(None, keepalive, 0.0) == orjson.loads(keepalive)  # no name: parsed
    for at, event in enumerate(TURN1_EVENTS[:5]):
        payload = obs.on_event(event["type"], orjson.dumps(event), float(at))
        # Hosted-tool progress is only counted; what the observer tracks is parsed.
        assert payload == (UNREAD if "web_search_call" in event["type"] else event)
    assert obs.open_items == ["function_call get_weather (call_weather_01)"]
    done = next(e for e in TURN1_EVENTS if e["type"] == "response.function_call_arguments.done")
    obs.on_event(done["type"], orjson.dumps(done), 10.0)
    # The arguments are complete: the call is open still, but no longer guarded.
    assert obs.open_items == ["function_call get_weather (call_weather_01)"]
    assert obs.deadline() == 10.0 + 30.0
    verdict = obs.on_deadline(40.0)
    error, failed = (json.loads(f.data or b"") for f in data_frames(raw(verdict.closing)))
    last = max(e.get("sequence_number", -1) for e in [*TURN1_EVENTS[:5], done])
    assert error["sequence_number"] == last + 1  # after the upstream's own
    assert failed["type"] == "response.failed" and failed["response"]["status"] == "failed"
    assert failed["response"]["id"] == TURN1_EVENTS[0]["response"]["id"]  # its last snapshot's


@pytest.mark.parametrize("wire", list(WireApi))
def test_every_api_row_builds_its_observer_on_its_reader(wire: WireApi) -> None:
    built = API_BY_WIRE[wire].observer(TIMEOUTS, None, StreamLimits())
    assert isinstance(built, TrackingObserver)
    readers = {WireApi.CHAT: ChatReader, WireApi.MESSAGES: MessagesReader}
    assert isinstance(built.reader, readers.get(wire, ResponsesReader))


# -- one parse per event, for the observer and the translator -----------------------------------

CHAT_STREAM = [
    chat({"role": "assistant", "content": ""}),
    chat({"content": "Hel"}),
    chat({"content": "lo"}),
    call(0, id="call_a", name="get_weather", args='{"city":'),
    call(0, args='"Paris"}'),
    chat({}, "tool_calls"),
    orjson.dumps(
        {"id": "c1", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4}}
    ),
    b"[DONE]",
]
MESSAGES_STREAM = [
    (
        "message_start",
        {
            "type": "message_start",
            "message": {"id": "msg_1", "model": "claude", "usage": {"input_tokens": 3}},
        },
    ),
    (
        "content_block_start",
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    ),
    ("ping", {"type": "ping"}),
    (
        "content_block_delta",
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "text_delta", "text": "Hello"},
        },
    ),
    ("content_block_stop", {"type": "content_block_stop", "index": 0}),
    (
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn"},
            "usage": {"output_tokens": 2},
        },
    ),
    ("message_stop", {"type": "message_stop"}),
]


def _stream(wire: WireApi) -> bytes:
    if wire is WireApi.CHAT:
        return b"".join(b"data: " + line + b"\n\n" for line in CHAT_STREAM)
    if wire is WireApi.MESSAGES:
        return b"".join(
            b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"
            for name, data in MESSAGES_STREAM
        )
    return b"".join(sse_event(event) for event in TURN1_EVENTS)


PAIRS = [
    (WireApi.CHAT, WireApi.RESPONSES),
    (WireApi.CHAT, WireApi.MESSAGES),
    (WireApi.RESPONSES, WireApi.CHAT),
    (WireApi.MESSAGES, WireApi.RESPONSES),
]


@pytest.mark.parametrize(("upstream", "client"), PAIRS, ids=lambda w: str(w))
def test_a_translated_stream_is_parsed_once(
    upstream: WireApi, client: WireApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = _stream(upstream)

    def translate(through_reader: bool) -> int:
        ctx = TranslationContext(client=client, upstream=upstream, stream=True, model="m")
        translator = ResponseTranslator(ctx, decoder_for(upstream), encoder_for(client, ctx))
        translator.start(200, sse=True)
        obs = API_BY_WIRE[upstream].observer(TIMEOUTS, None, StreamLimits())
        frames = SSEFramer().feed(body)
        calls = 0
        loads: Callable[[Any], Any] = orjson.loads

        def counting(data: Any) -> Any:
            nonlocal calls
            calls += 1
            return loads(data)

        monkeypatch.setattr(orjson, "loads", counting)
        reads: list[Read] | None = [] if through_reader else None
        if through_reader:
            translator.follow(obs)
        obs.read_frames(frames, 1.0, reads)
        out = translator.reads(reads) if reads is not None else translator.frames(frames)
        monkeypatch.setattr(orjson, "loads", loads)
        assert obs.finished and translator.client_end is OutcomeKind.COMPLETED
        assert out and translator.broken is None
        return calls

    parses = translate(through_reader=True)
    events = [f for f in SSEFramer().feed(body) if f.data is not None]
    unparsed = sum(1 for f in events if f.data == b"[DONE]" or f.event == "ping")
    assert parses == len(events) - unparsed  # once each, by the reader
    assert translate(through_reader=False) > parses  # the observer and the decoder each did


@pytest.mark.parametrize("upstream", list(WireApi))
def test_a_decoder_reads_the_readers_values_as_it_reads_the_bytes(upstream: WireApi) -> None:
    body = _stream(upstream)
    obs = API_BY_WIRE[upstream].observer(TIMEOUTS, None, StreamLimits())
    reads: list[Read] = []
    obs.read_frames(SSEFramer().feed(body), 1.0, reads)
    assert any(payload is not UNREAD for _, payload in reads)
    fed, parsed = decoder_for(upstream), decoder_for(upstream)
    fed.follow(obs)
    from_reads = [event for frame, payload in reads for event in fed.feed(frame, payload)]
    from_bytes = [event for frame in SSEFramer().feed(body) for event in parsed.feed(frame)]
    assert from_reads == from_bytes and from_reads
    assert fed.notes == parsed.notes


#: Where each API's reader keeps the items a decoder reads.
_RECORDS = {WireApi.CHAT: "calls", WireApi.MESSAGES: "blocks", WireApi.RESPONSES: "items"}
#: What a decoder may hold besides: the neutral stream's open items, its notes, usage.
_DECODERS_OWN = {"_open", "notes", "_usage"}


@pytest.mark.parametrize("follows", [True, False], ids=["relay's reader", "own reader"])
@pytest.mark.parametrize("upstream", list(WireApi))
def test_a_decoder_keeps_its_state_of_an_item_on_the_readers_item(
    upstream: WireApi, follows: bool
) -> None:
    """One record of the upstream's items per stream: the reader's. A decoder that kept
    its own map of calls or blocks again fails here."""
    obs = API_BY_WIRE[upstream].observer(TIMEOUTS, None, StreamLimits())
    decoder = decoder_for(upstream)
    frames = SSEFramer().feed(_stream(upstream))
    if follows:
        decoder.follow(obs)
        reads: list[Read] = []
        obs.read_frames(frames, 1.0, reads)
        events = [event for frame, payload in reads for event in decoder.feed(frame, payload)]
    else:
        events = [event for frame in frames for event in decoder.feed(frame)]
    assert events
    reader = obs.reader if follows else decoder.reader
    tracked = list(getattr(reader, _RECORDS[upstream]).values())
    states = {id(item.translation) for item in tracked if item.translation is not None}
    assert tracked and len(states) == len(tracked)  # each item, one state, on the item
    held = {k for k, v in vars(decoder).items() if isinstance(v, dict | list | set) and v}
    assert held <= _DECODERS_OWN
    for name in held:
        value = vars(decoder)[name]
        inside = value.values() if isinstance(value, dict) else value
        assert not any(id(entry) in states for entry in inside)


_ODD: list[Any] = [None, True, False, -1, 0, 1, 2, "0", "msg_x", 1.5, [], {}]
_DELTA = {
    "type": "response.output_text.delta",
    "item_id": TURN2_EVENTS[0]["item"]["id"],
    "output_index": 0,
    "content_index": 0,
    "delta": "ab",
    "sequence_number": 5,
}
_FIELDS = {
    "type": st.sampled_from(["response.output_text.delta", "response.other", *_ODD]),
    "delta": st.one_of(st.text(max_size=4), st.sampled_from(_ODD)),
    "sequence_number": st.sampled_from([*_ODD, 7, 8]),
    "output_index": st.sampled_from(_ODD),
    "content_index": st.sampled_from(_ODD),
    "item_id": st.sampled_from([*_ODD, _DELTA["item_id"]]),
}


@st.composite
def _deltas(draw: st.DrawFn) -> dict[str, Any]:
    """A text delta with some of its fields changed or left out."""
    delta = dict(_DELTA)
    for name in draw(st.sets(st.sampled_from(sorted(_FIELDS)), max_size=3)):
        if draw(st.booleans()):
            del delta[name]
        else:
            delta[name] = draw(_FIELDS[name])
    return delta


@settings(max_examples=300, deadline=None)
@given(st.lists(_deltas(), max_size=12))
def test_a_text_delta_read_inline_is_read_as_the_general_path_reads_it(
    deltas: list[dict[str, Any]],
) -> None:
    # The same stream read twice: by the reader, and by a reader whose every event goes
    # the general way (parsed, classified, applied).
    class General(ResponsesReader):
        read = ResponsesReader.read_any

    created = TURN1_EVENTS[0]  # the response's id, for proxai's closing
    items = [created, *(e for e in TURN2_EVENTS if e["type"].endswith(".added"))]
    *_, done, completed = TURN2_EVENTS
    closings, outcomes, texts = [], [], []
    for kind in (ResponsesReader, General):
        obs = observer(lambda tracker, kind=kind: kind(tracker, "gpt-test"))  # type: ignore[misc]
        for at, event in enumerate(items):
            obs.on_event(event["type"], orjson.dumps(event), float(at))
        for delta in deltas:
            obs.on_event("response.output_text.delta", orjson.dumps(delta), 5.0)
        reader = cast(ResponsesReader, obs.reader)
        texts.append({k: t.value() for k, t in reader.texts.items()})
        # The sequence numbers noted: proxai's own closing continues them.
        closings.append(raw(obs.on_deadline(1e6).closing))
        for event in (done, completed):
            obs.on_event(event["type"], orjson.dumps(event), 6.0)
        outcome = Outcome("POST", "/v1/responses")
        obs.fill(outcome)
        outcomes.append(attrs.asdict(outcome))
    assert texts[0] == texts[1]
    assert closings[0] == closings[1]
    assert outcomes[0] == outcomes[1]
