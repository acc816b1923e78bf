"""The fault matrix: protocol x stage x fault, and the client's side of it.

Each case runs ProxaiApp over in-memory ASGI with a ScriptTransport upstream on
pytest-trio's virtual clock, so "within the deadline + 0.5 s" is checked as the
exact instant. Every case also checks that the upstream connection was closed
and that no task of the request is left.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import trio
from trio.testing import MockClock

from proxai.errors import ErrorShape
from proxai.outcome import OutcomeKind
from proxai.protocols.table import APIS, WireApi
from proxai.testing import Close, Reset, Script, Send, Sleep, Stall, sse_event
from proxai.testing.memory_proxy import MemoryExchange, MemoryProxy
from proxai.testing.soak import live_tasks
from tests.faults.cases import (
    CASES,
    CLIENT_STAGES,
    DISCONNECT_AT,
    MATRIX_TIMEOUTS,
    MAX_EVENT_BYTES,
    PRE_STREAM,
    Case,
)
from tests.faults.kits import KITS, SSE_HEADERS, STRAY_KITS

#: Each test of the client's side runs for every kit, named by its label.
each_api = pytest.mark.parametrize("protocol", list(KITS), ids=[k.name for k in KITS.values()])


def test_every_api_of_the_table_has_a_kit() -> None:
    """A row added to ``proxai.protocols.table.APIS`` is not in the matrix until it has a
    kit in tests/faults/kits.py; a kit of no row is a leftover."""
    missing = [api.wire.value for api in APIS if api.wire not in KITS]
    assert missing == [], f"no fault-matrix kit for {missing}: add one to tests/faults/kits.py"
    assert STRAY_KITS == []


def proxy_for(protocol: WireApi, scripts: list[Script], **timeouts: float) -> MemoryProxy:
    kit = KITS[protocol]
    return MemoryProxy(
        scripts,
        upstreams=kit.upstreams,
        server={"max_event_bytes": MAX_EVENT_BYTES},
        **{**MATRIX_TIMEOUTS, **timeouts},
    )


def fault_script(case: Case) -> Script:
    kit = KITS[case.wire]
    if case.stage == "before_headers":
        ending = {"silence": Stall(), "eof": Close(), "reset": Reset()}[case.fault]
        return Script(before_head=[ending])
    steps: list[Any] = [Send(kit.prefixes[case.stage])] if case.stage in kit.prefixes else []
    if case.fault == "silence":
        steps.append(Stall())
    elif case.fault == "reset":
        steps.append(Reset())
    elif case.fault == "oversized_event":
        steps += [Send(b"data: " + b"x" * (MAX_EVENT_BYTES + 1)), Stall()]
    return Script(headers=SSE_HEADERS, steps=steps)


def client_error(wire: WireApi, exchange: MemoryExchange) -> tuple[str, str]:
    """The error the client got: (type or code, message), HTTP or in-stream."""
    kit = KITS[wire]
    if exchange.status != 200:
        body = exchange.json()
        if kit.error_shape is ErrorShape.ANTHROPIC:
            assert body["type"] == "error"
            return body["error"]["type"], body["error"]["message"]
        assert set(body["error"]) == {"message", "type", "param", "code"}
        return body["error"]["code"], body["error"]["message"]
    return kit.read_error(exchange.body)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
async def test_fault(autojump_clock: MockClock, case: Case) -> None:
    kit = KITS[case.wire]
    script = fault_script(case)
    async with proxy_for(case.wire, [script]) as proxy:
        tasks_before = live_tasks()
        exchange = await proxy.request(kit.request, path=kit.path)
        with trio.fail_after(1):
            closed_at = await proxy.transport.requests[0].wait_closed()
        assert live_tasks() == tasks_before  # every task of the request has ended
    assert exchange.elapsed == case.ends_at
    assert closed_at <= exchange.ended_at if exchange.ended_at else True
    assert exchange.status == case.status
    error, message = client_error(case.wire, exchange)
    assert error == case.error
    assert case.message in message
    if case.stage not in PRE_STREAM:
        # what the upstream sent before the fault reached the client unchanged
        assert exchange.body.startswith(kit.prefixes[case.stage])
    assert exchange.outcome is not None
    assert exchange.outcome.kind is case.outcome
    assert exchange.outcome.detail is not None and case.message in exchange.outcome.detail


# --- the client's side ------------------------------------------------------------------------


@pytest.mark.parametrize("stage", CLIENT_STAGES)
@each_api
async def test_client_disconnect(autojump_clock: MockClock, protocol: WireApi, stage: str) -> None:
    kit = KITS[protocol]
    if stage == "before_headers":
        script = Script(before_head=[Stall()])
    else:
        script = Script(headers=SSE_HEADERS, steps=[Send(kit.prefixes.get(stage, b"")), Stall()])
    async with proxy_for(protocol, [script]) as proxy:
        tasks_before = live_tasks()
        exchange = await proxy.request(kit.request, path=kit.path, disconnect_after=DISCONNECT_AT)
        closed_at = await proxy.transport.requests[0].wait_closed()
        assert live_tasks() == tasks_before
    assert closed_at - exchange.started_at == DISCONNECT_AT
    assert exchange.outcome is not None
    assert exchange.outcome.kind is OutcomeKind.CLIENT_DISCONNECTED
    assert exchange.outcome.total_s == DISCONNECT_AT


ENDLESS_STEPS = 100_000


def endless(protocol: WireApi) -> Script:
    """A healthy stream that never ends: a small event every 0.1 s."""
    kit = KITS[protocol]
    tick = {
        WireApi.RESPONSES: sse_event({"type": "keepalive"}),
        WireApi.CHAT: b": tick\n\n",
        WireApi.MESSAGES: b'event: ping\ndata: {"type": "ping"}\n\n',
    }[protocol]
    steps: list[Any] = [Send(kit.prefixes["mid_text"])]
    for _ in range(ENDLESS_STEPS):
        steps += [Sleep(0.1), Send(tick)]
    return Script(headers=SSE_HEADERS, steps=steps)


@each_api
async def test_a_client_that_stops_reading(autojump_clock: MockClock, protocol: WireApi) -> None:
    # The client takes the first write, then reads nothing ever again (but stays
    # connected). No false stall: the upstream is healthy. The upstream connection is
    # released at client_write, and proxai read only what its channels hold.
    kit = KITS[protocol]
    async with proxy_for(protocol, [endless(protocol)]) as proxy:
        with trio.move_on_after(MATRIX_TIMEOUTS["client_write"] + 100):
            await proxy.request(
                kit.request, path=kit.path, read_delay=lambda n: math.inf if n >= 1 else 0.0
            )
        record = proxy.transport.requests[0]
        assert record.closed_at is not None
        assert record.closed_at - record.received_at == pytest.approx(
            MATRIX_TIMEOUTS["client_write"], abs=0.2
        )
        # bounded memory: a handful of small reads, not 50 s worth (500 events)
        assert record.bytes_sent < len(kit.prefixes["mid_text"]) + 40 * 60
        outcome = proxy.outcomes[0] if proxy.outcomes else None
    assert outcome is None or outcome.kind is OutcomeKind.CLIENT_STALLED


@each_api
async def test_a_client_that_stops_reading_gets_the_error_if_it_reads_again(
    autojump_clock: MockClock, protocol: WireApi
) -> None:
    kit = KITS[protocol]
    pause = MATRIX_TIMEOUTS["client_write"] + 30
    async with proxy_for(protocol, [endless(protocol)]) as proxy:
        exchange = await proxy.request(
            kit.request, path=kit.path, read_delay=lambda n: pause if n == 1 else 0.0
        )
    assert exchange.outcome is not None
    assert exchange.outcome.kind is OutcomeKind.CLIENT_STALLED
    error, message = kit.read_error(exchange.body)
    assert error in ("server_error", "api_error")
    assert "the client read nothing for 50.0 s" in message


@each_api
async def test_a_body_that_never_arrives_is_408(
    autojump_clock: MockClock, protocol: WireApi
) -> None:
    kit = KITS[protocol]
    async with proxy_for(protocol, [Script.json({})]) as proxy:
        exchange = await proxy.request(kit.request, path=kit.path, body_stalls=True)
    assert exchange.status == 408
    assert exchange.elapsed == MATRIX_TIMEOUTS["request_body"]
    error, message = client_error(protocol, exchange)
    anthropic = kit.error_shape is ErrorShape.ANTHROPIC
    assert error == ("invalid_request_error" if anthropic else "request_timeout")
    assert "did not arrive within 5.0 s" in message
    assert proxy.transport.requests == []
    assert exchange.outcome is not None
    assert exchange.outcome.kind is OutcomeKind.REQUEST_BODY_TIMEOUT


# --- input that is not what it should be: forwarded, recorded, still guarded -----------------

GARBAGE = {
    "not_sse": b"<html><body>502 Bad Gateway</body></html>\n\n",
    "non_json_data": b"data: {this is not json\n\n",
    "invalid_utf8": b'data: {"type":"\xff\xfe\xfd"}\n\n',
}


@pytest.mark.parametrize("garbage", list(GARBAGE))
@each_api
async def test_garbage_is_forwarded_recorded_and_deadlines_still_hold(
    autojump_clock: MockClock, protocol: WireApi, garbage: str
) -> None:
    kit = KITS[protocol]
    sent = kit.prefixes["mid_arguments"] + GARBAGE[garbage]
    async with proxy_for(
        protocol, [Script(headers=SSE_HEADERS, steps=[Send(sent), Stall()])]
    ) as proxy:
        exchange = await proxy.request(kit.request, path=kit.path)
    assert exchange.body.startswith(sent)  # unchanged, byte for byte
    assert exchange.elapsed == MATRIX_TIMEOUTS["tool_arguments"]
    assert exchange.outcome is not None
    assert exchange.outcome.kind is OutcomeKind.STALLED_TOOL_ARGUMENTS
    assert exchange.outcome.anomalies != []
