"""A :class:`~proxai.relay.relay.Relay` alone: an :class:`Exchange` in, a fake ``Downstream`` out.

No app, no ASGI: the relay is driven as the app drives it, with a scripted upstream in
memory and a downstream that records what it is sent (and can hang up, or stop reading),
on the virtual clock.
"""

from __future__ import annotations

import json
import math
from typing import Any

import attrs
import orjson
import trio
from trio.testing import MockClock

from proxai.config import RetriesConfig, TimeoutsConfig, TranslationOptions, UpstreamConfig
from proxai.outcome import OutcomeKind
from proxai.policy.retry import RetryPlan
from proxai.protocols.names import WireApi
from proxai.protocols.table import API_BY_WIRE
from proxai.protocols.tracking import StreamLimits
from proxai.relay.exchange import Exchange, ProxiedRequest, UpstreamTarget
from proxai.relay.relay import Relay
from proxai.testing import Script, Send, Sleep, Stall
from proxai.testing.memory import ScriptTransport
from proxai.testing.seed import TURN1_EVENTS, TURN1_REQUEST, TURN2_EVENTS
from proxai.testing.streams import data_frames
from proxai.translate.pairs import translate
from proxai.upstream.client import UpstreamClient
from proxai.wire.headers import Headers

TIMEOUTS = TimeoutsConfig(
    connect=5.0,
    first_byte=10.0,
    idle=30.0,
    tool_arguments=20.0,
    total=1000.0,
    client_write=50.0,
)


@attrs.define
class FakeDownstream:
    """Records what the relay sends; ``hang_up`` ends the exchange from the client's side,
    ``stop_reading_after`` makes every send after that many block until ``read_again``."""

    head: tuple[int, Headers] | None = None
    parts: list[tuple[float, bytes]] = attrs.field(factory=list)
    ended: bool = False
    stop_reading_after: float = math.inf
    hung_up: trio.Event = attrs.field(factory=trio.Event)
    reading: trio.Event = attrs.field(factory=trio.Event)
    sends: trio.CancelScope | None = None

    async def send_head(self, status: int, headers: Headers) -> None:
        assert self.head is None, "a second head"
        self.head = (status, list(headers))

    async def send_body(self, data: bytes, *, more: bool = True, frames: Any = ()) -> None:
        assert self.head is not None and not self.ended, "body outside its response"
        if len(self.parts) >= self.stop_reading_after and not self.reading.is_set():
            await self.reading.wait()
        self.parts.append((trio.current_time(), data))
        self.ended = not more

    async def wait_disconnect(self) -> None:
        await self.hung_up.wait()

    @property
    def body(self) -> bytes:
        return b"".join(data for _, data in self.parts)


def responses_bytes(events: list[dict[str, Any]]) -> bytes:
    return Script.sse(events).body


#: Where a translated request goes (spelled out: the table's paths are patterns).
UPSTREAM_PATHS = {WireApi.CHAT: b"/v1/chat/completions", WireApi.MESSAGES: b"/v1/messages"}


def exchange(script: Script, *, translated_from: WireApi | None = None) -> Exchange:
    """A Responses request to one scripted upstream (speaking ``translated_from``'s API
    instead, translated, when given)."""
    client = UpstreamClient(
        UpstreamConfig(base_url="http://upstream.test/v1"),
        TIMEOUTS,
        transport=ScriptTransport([script]),
        name="up",
    )
    if translated_from is None:
        api = API_BY_WIRE[WireApi.RESPONSES]
        target = UpstreamTarget(
            client,
            TIMEOUTS,
            orjson.dumps(TURN1_REQUEST),
            observer_factory=lambda t: api.observer(t, None, StreamLimits()),
        )
    else:
        upstream = API_BY_WIRE[translated_from]
        request = translate(WireApi.RESPONSES, translated_from, TURN1_REQUEST, TranslationOptions())
        target = UpstreamTarget(
            client,
            TIMEOUTS,
            orjson.dumps(request.body),
            observer_factory=lambda t: upstream.observer(t, None, StreamLimits()),
            raw_path=UPSTREAM_PATHS[translated_from],
            query=b"",
            translator=request.translator(),
        )
    return Exchange(
        ProxiedRequest("POST", "/v1/responses", b"/v1/responses", b"", []),
        {"up": target},
        RetryPlan(["up"], RetriesConfig()),
        TIMEOUTS,
    )


async def test_a_stream_passes_byte_for_byte_and_ends_with_the_body(
    autojump_clock: MockClock,
) -> None:
    stream = responses_bytes(TURN1_EVENTS)
    downstream = FakeDownstream()
    outcome = await Relay(exchange(Script.sse(TURN1_EVENTS)), downstream).run()
    assert downstream.head is not None and downstream.head[0] == 200
    assert downstream.body == stream and downstream.ended
    assert outcome.kind is OutcomeKind.COMPLETED and outcome.aggregates_match is True
    assert outcome.bytes_out == len(stream)


async def test_a_steady_stream_many_idle_periods_long_is_never_cut(
    autojump_clock: MockClock,
) -> None:
    # An event every 20 s for 300 s, idle 30 s: every wait ends well before its deadline,
    # though the waits' one scope (its deadline set by the first) passes many times.
    events: list[dict[str, Any] | bytes] = [
        *TURN2_EVENTS[:3],
        *[b": ping\n\n"] * 12,
        *TURN2_EVENTS[3:],
    ]
    downstream = FakeDownstream()
    outcome = await Relay(exchange(Script.sse(events, delay=20.0)), downstream).run()
    assert outcome.kind is OutcomeKind.COMPLETED
    assert downstream.body == Script.sse(events).body and downstream.ended
    assert trio.current_time() >= 20.0 * (len(events) - 1)


async def test_a_hand_over_interrupted_by_the_waits_deadline_is_made_again(
    autojump_clock: MockClock,
) -> None:
    # The client stops reading for 40 s (under client_write) while the upstream has sent
    # everything: the observer is blocked handing a chunk to the writer when the deadline
    # the first wait gave the waits' scope (idle, 30 s) passes. That is no wait's
    # deadline: the chunk is handed over again, once, and the stream ends whole.
    events: list[dict[str, Any] | bytes] = [
        *TURN2_EVENTS[:3],
        *[b": ping %d\n\n" % n for n in range(12)],
        *TURN2_EVENTS[3:],
    ]
    downstream = FakeDownstream(stop_reading_after=1)
    relay = Relay(exchange(Script.sse(events)), downstream)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(relay.run)
        await trio.sleep(40.0)
        assert len(downstream.parts) == 1
        downstream.reading.set()
    assert relay.outcome.kind is OutcomeKind.COMPLETED
    assert downstream.body == Script.sse(events).body and downstream.ended


async def test_a_read_queued_while_the_observer_is_blocked_past_its_deadline_is_no_stall(
    autojump_clock: MockClock,
) -> None:
    # Seven reads 0.1 s apart fill the client's side (the client stops reading after one:
    # the writer holds the second, its channel four), so the observer task is blocked
    # handing the seventh over when the upstream sends one more at t=20.6, which waits
    # queued for it (the reader is not blocked: its clock runs). The client reads again
    # at t=35, past idle (30 s) after the reads the observer had seen: the queued read,
    # 14 s old, says the upstream was not silent, and the rest comes at t=45.6.
    early = [*TURN2_EVENTS[:3], *[b": ping %d\n\n" % n for n in range(4)]]
    rest = TURN2_EVENTS[3:]
    steps = [
        *Script.sse(early, delay=0.1).steps,
        Sleep(20.0),
        Send(b": ping queued\n\n"),
        Sleep(25.0),
        *Script.sse(rest).steps,
    ]
    downstream = FakeDownstream(stop_reading_after=1)
    relay = Relay(exchange(Script(steps=tuple(steps))), downstream)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(relay.run)
        await trio.sleep(35.0)
        assert len(downstream.parts) == 1
        downstream.reading.set()
    assert relay.outcome.kind is OutcomeKind.COMPLETED, relay.outcome.detail
    assert downstream.body == b"".join(s.data for s in steps if isinstance(s, Send))


async def test_a_stall_mid_arguments_ends_with_the_protocols_error_after_the_upstreams_bytes(
    autojump_clock: MockClock,
) -> None:
    script = Script.sse(TURN1_EVENTS[:6], then=[Stall()])
    downstream = FakeDownstream()
    outcome = await Relay(exchange(script), downstream).run()
    sent = responses_bytes(TURN1_EVENTS[:6])
    assert downstream.body.startswith(sent) and downstream.ended
    error, failed = (json.loads(f.data or b"") for f in data_frames(downstream.body[len(sent) :]))
    assert error["code"] == "upstream_timeout" and failed["type"] == "response.failed"
    assert outcome.kind is OutcomeKind.STALLED_TOOL_ARGUMENTS
    assert trio.current_time() == 20.0  # tool_arguments after the call's last progress


async def test_a_stall_before_the_first_byte_is_an_http_error(autojump_clock: MockClock) -> None:
    downstream = FakeDownstream()
    outcome = await Relay(exchange(Script(steps=[Stall()])), downstream).run()
    assert downstream.head is not None and downstream.head[0] == 504
    assert json.loads(downstream.body)["error"]["code"] == "upstream_timeout"
    assert outcome.kind is OutcomeKind.STALLED_IDLE and outcome.status == 504


async def test_a_client_that_hangs_up_ends_the_request_at_once(autojump_clock: MockClock) -> None:
    downstream = FakeDownstream()
    relay = Relay(exchange(Script.sse(TURN1_EVENTS[:3], then=[Stall()])), downstream)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(relay.run)
        await trio.sleep(3.0)
        assert relay.snapshot().stage == "streaming"
        downstream.hung_up.set()
    assert trio.current_time() == 3.0
    assert relay.outcome.kind is OutcomeKind.CLIENT_DISCONNECTED
    assert downstream.body == responses_bytes(TURN1_EVENTS[:3]) and not downstream.ended


async def test_a_stalled_client_gets_the_closing_once_it_reads_again(
    autojump_clock: MockClock,
) -> None:
    # The client reads the first part, then nothing: the upstream keeps streaming, more
    # than the relay's channels hold.
    events: list[dict[str, Any] | bytes] = [*TURN2_EVENTS[:3], *[b": ping\n\n"] * 12]
    script = Script.sse(events, delay=1.0, then=[Stall()])
    downstream = FakeDownstream(stop_reading_after=1)
    relay = Relay(exchange(script), downstream)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(relay.run)
        await trio.sleep(60.0)  # past client_write
        assert relay.snapshot().stage == "client stalled"
        assert relay.outcome.kind is OutcomeKind.CLIENT_STALLED
        assert len(downstream.parts) == 1
        downstream.reading.set()
    # What was held, then the protocol's error: the writer's one closing record.
    (*_, error, failed) = data_frames(downstream.body)
    assert json.loads(error.data or b"")["type"] == "error"
    assert json.loads(failed.data or b"")["type"] == "response.failed"
    assert downstream.ended


async def test_an_upstream_cut_short_without_an_observer_ends_the_body_broken(
    autojump_clock: MockClock,
) -> None:
    # Not an event stream: no observer knows it, so it cannot end in the protocol's shape.
    script = Script(
        headers=(("content-type", "application/json"),),
        steps=[Send(b'{"partial": '), Stall()],
    )
    downstream = FakeDownstream()
    outcome = await Relay(exchange(script), downstream).run()
    assert downstream.body == b'{"partial": ' and not downstream.ended  # aborted
    assert outcome.kind is OutcomeKind.TOTAL_TIMEOUT


async def test_a_translated_upstreams_in_band_error_is_the_clients_and_recorded_failed(
    autojump_clock: MockClock,
) -> None:
    chunk = {"id": "c1", "object": "chat.completion.chunk", "model": "m"}
    lines = [
        {**chunk, "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hi"}}]},
        {"error": {"message": "the model is overloaded", "type": "server_error", "code": "busy"}},
    ]
    script = Script.sse([b"data: " + orjson.dumps(line) + b"\n\n" for line in lines])
    downstream = FakeDownstream()
    outcome = await Relay(exchange(script, translated_from=WireApi.CHAT), downstream).run()
    events = [json.loads(f.data or b"") for f in data_frames(downstream.body)]
    assert events[-1]["type"] == "response.failed"
    assert events[-1]["response"]["error"]["message"] == "the model is overloaded"
    assert outcome.kind is OutcomeKind.FAILED and outcome.translation == "responses→chat"


async def test_a_stalled_translated_client_gets_the_closing_of_its_own_api(
    autojump_clock: MockClock,
) -> None:
    # A Responses client over a Chat upstream stops reading: what it gets when it reads
    # again ends with Responses' error events, never Chat's ``data: {"error"}``/[DONE].
    chunk = {"id": "c1", "object": "chat.completion.chunk", "model": "m"}
    first = {**chunk, "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hi"}}]}
    more = {**chunk, "choices": [{"index": 0, "delta": {"content": " there"}}]}
    lines = [b"data: " + orjson.dumps(line) + b"\n\n" for line in [first, *[more] * 14]]
    script = Script.sse(lines, delay=1.0, then=[Stall()])
    downstream = FakeDownstream(stop_reading_after=1)
    relay = Relay(exchange(script, translated_from=WireApi.CHAT), downstream)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(relay.run)
        await trio.sleep(60.0)  # past client_write
        assert relay.outcome.kind is OutcomeKind.CLIENT_STALLED
        downstream.reading.set()
    frames = data_frames(downstream.body)
    assert all(f.data != b"[DONE]" for f in frames)
    events = [json.loads(f.data or b"") for f in frames]
    assert all("type" in event for event in events), "a Chat frame reached a Responses client"
    assert events[-2]["type"] == "error" and events[-1]["type"] == "response.failed"
    assert downstream.ended
