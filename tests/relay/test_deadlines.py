"""Deadlines on a virtual clock: each fires at exactly its time, and only then.

ProxaiApp runs over in-memory ASGI with a ScriptTransport upstream, under
pytest-trio's ``autojump_clock``: a test of a 30 s deadline takes no real time
and the instants it checks are exact. Timeouts (see memory_harness.TIMEOUTS):
first_byte 10 s, tool_arguments 20 s, idle 30 s, total 1000 s.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
from trio.testing import MockClock

from proxai.outcome import OutcomeKind
from proxai.testing import Close, Reset, Script, Send, Sleep, Stall, sse_event
from proxai.testing.memory_proxy import MemoryProxy
from proxai.testing.seed import TURN1_EVENTS, TURN1_REQUEST, TURN2_EVENTS, TURN2_REQUEST, turn_bytes

TURN1 = turn_bytes(TURN1_EVENTS)
TURN2 = turn_bytes(TURN2_EVENTS)


def stalled_after(events: list[dict[str, Any]], count: int) -> Script:
    return Script.sse(events[:count], then=[Stall()])


def assert_synthesized_failure(
    events: list[dict[str, Any]],
    *,
    after: int,
    message: str,
    sequence: int,
    code: str = "upstream_timeout",
) -> None:
    """The last two events are proxai's error + response.failed, after ``after`` upstream events;
    ``code`` names the cause (a stall's unless said)."""
    assert len(events) == after + 2
    error, failed = events[-2:]
    assert error["type"] == "error"
    assert error["sequence_number"] == sequence
    assert error["message"] == message
    assert error["code"] == code
    assert error["param"] is None
    assert error["error"] == {
        "type": "server_error",
        "code": code,
        "message": message,
        "param": None,
    }
    assert failed["type"] == "response.failed"
    assert failed["sequence_number"] == sequence + 1
    assert failed["response"]["status"] == "failed"
    assert failed["response"]["error"] == {"code": code, "message": message}


# --- each deadline at its exact time ----------------------------------------------------


@pytest.mark.parametrize("before_head", [[Stall()], [Sleep(50)]], ids=["stall", "late"])
async def test_stall_before_headers_is_504_at_first_byte(
    autojump_clock: MockClock, before_head: list[Any]
) -> None:
    # A silent upstream, or one whose headers would come at 50 s: 504 at first_byte's 10 s,
    # and proxai hangs up on the upstream then.
    async with MemoryProxy([Script(before_head=before_head)]) as proxy:
        exchange = await proxy.request({**TURN1_REQUEST, "stream": True})
        closed_at = await proxy.transport.requests[0].wait_closed()
    assert exchange.status == 504
    assert exchange.elapsed == 10.0
    assert closed_at == exchange.ended_at
    assert exchange.json()["error"]["code"] == "upstream_timeout"
    assert "first_byte" in exchange.json()["error"]["message"]
    assert exchange.outcome is not None and exchange.outcome.kind is OutcomeKind.STALLED_FIRST_BYTE


async def test_stall_after_headers_before_any_event_is_504_at_idle(
    autojump_clock: MockClock,
) -> None:
    async with MemoryProxy([Script(steps=[Stall()])]) as proxy:
        exchange = await proxy.request(TURN1_REQUEST)
    assert exchange.status == 504
    assert exchange.elapsed == 30.0
    error = exchange.json()["error"]
    assert error["type"] == "server_error"
    assert error["message"] == "upstream sent nothing for 30.0 s (after 0 events)"
    assert exchange.outcome is not None and exchange.outcome.kind is OutcomeKind.STALLED_IDLE


async def test_deadlines_start_when_the_headers_arrive(autojump_clock: MockClock) -> None:
    # trio's real clock is never near zero: a deadline must count from the stream's
    # start, not from the clock's origin.
    await trio.sleep(10_000)
    healthy = Script(steps=[Sleep(29), Send(turn_bytes(TURN2_EVENTS))])
    silent = Script(before_head=[Sleep(4)], steps=[Stall()])
    async with MemoryProxy([healthy, silent]) as proxy:
        ok = await proxy.request(TURN2_REQUEST)
        stalled = await proxy.request(TURN1_REQUEST)
    assert (ok.status, ok.body, ok.elapsed) == (200, TURN2, 29.0)
    assert (stalled.status, stalled.elapsed) == (504, 4.0 + 30.0)


async def test_stall_mid_arguments_fires_tool_arguments_at_its_time(
    autojump_clock: MockClock,
) -> None:
    # the seed's turn 1, silent after the first arguments delta (sent at t=5)
    script = Script.sse(
        TURN1_EVENTS[:5], then=[Sleep(5), Send(sse_event(TURN1_EVENTS[5])), Stall()]
    )
    async with MemoryProxy([script]) as proxy:
        exchange = await proxy.request(TURN1_REQUEST)
        closed_at = await proxy.transport.requests[0].wait_closed()
    assert exchange.status == 200
    assert exchange.elapsed == 25.0  # last delta at 5 + tool_arguments 20 (idle would be 35)
    assert closed_at == 25.0 + exchange.started_at
    message = (
        "upstream stalled for 20.0 s while streaming arguments of function_call get_weather "
        "(call_weather_01)"
    )
    events = exchange.events()
    assert events[:6] == TURN1_EVENTS[:6]
    assert_synthesized_failure(events, after=6, message=message, sequence=6)
    assert events[-1]["response"]["id"] == "resp_01"  # built from the last snapshot
    assert exchange.body.startswith(turn_bytes(TURN1_EVENTS[:6]))
    outcome = exchange.outcome
    assert outcome is not None
    assert outcome.kind is OutcomeKind.STALLED_TOOL_ARGUMENTS
    assert outcome.stalled_item == "function_call get_weather (call_weather_01)"
    assert outcome.detail == message
    assert [(c.name, c.arguments_length) for c in outcome.calls] == [
        ("get_weather", len('{"city":"北京"'))
    ]


@pytest.mark.parametrize(
    ("count", "kind", "elapsed", "message"),
    [
        # after response.created only
        (1, OutcomeKind.STALLED_IDLE, 30.0, "upstream sent nothing for 30.0 s (after 1 events)"),
        # mid hosted web_search (no item open)
        (3, OutcomeKind.STALLED_IDLE, 30.0, "upstream sent nothing for 30.0 s (after 3 events)"),
        # function_call opened, no delta yet
        (
            5,
            OutcomeKind.STALLED_TOOL_ARGUMENTS,
            20.0,
            "upstream stalled for 20.0 s while streaming arguments of function_call get_weather "
            "(call_weather_01)",
        ),
        # arguments.done arrived but output_item.done did not: only idle is left
        (
            8,
            OutcomeKind.STALLED_IDLE,
            30.0,
            "upstream sent nothing for 30.0 s while streaming output of function_call "
            "get_weather (call_weather_01)",
        ),
        # every item done, no terminal event
        (9, OutcomeKind.STALLED_IDLE, 30.0, "upstream sent nothing for 30.0 s (after 9 events)"),
    ],
)
async def test_every_stage_of_turn1(
    autojump_clock: MockClock, count: int, kind: OutcomeKind, elapsed: float, message: str
) -> None:
    async with MemoryProxy([stalled_after(TURN1_EVENTS, count)]) as proxy:
        exchange = await proxy.request(TURN1_REQUEST)
    assert exchange.elapsed == elapsed
    assert exchange.outcome is not None and exchange.outcome.kind is kind
    assert_synthesized_failure(exchange.events(), after=count, message=message, sequence=count)


async def test_stall_mid_text_fires_idle(autojump_clock: MockClock) -> None:
    async with MemoryProxy([stalled_after(TURN2_EVENTS, 3)]) as proxy:
        exchange = await proxy.request(TURN2_REQUEST)
    assert exchange.elapsed == 30.0
    message = "upstream sent nothing for 30.0 s while streaming text of message msg_01"
    assert_synthesized_failure(exchange.events(), after=3, message=message, sequence=3)
    assert exchange.outcome is not None
    assert exchange.outcome.kind is OutcomeKind.STALLED_IDLE
    assert exchange.outcome.stalled_item == "message msg_01"


# --- several open calls ----------------------------------------------------------------


def call_item(index: int, status: str = "in_progress", arguments: str = "") -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": f"fc_{index}",
        "call_id": f"call_{index}",
        "name": f"tool_{index}",
        "arguments": arguments,
        "status": status,
    }


def added(index: int) -> bytes:
    return sse_event(
        {"type": "response.output_item.added", "output_index": index, "item": call_item(index)}
    )


def _arguments_event(kind: str, index: int, **fields: str) -> bytes:
    return sse_event(
        {
            "type": f"response.function_call_arguments.{kind}",
            "output_index": index,
            "item_id": f"fc_{index}",
            **fields,
        }
    )


def delta(index: int, text: str) -> bytes:
    return _arguments_event("delta", index, delta=text)


def args_done(index: int, arguments: str) -> bytes:
    return _arguments_event("done", index, arguments=arguments)


def item_done(index: int, arguments: str) -> bytes:
    return sse_event(
        {
            "type": "response.output_item.done",
            "output_index": index,
            "item": call_item(index, "completed", arguments),
        }
    )


CREATED = sse_event(TURN1_EVENTS[0])


async def test_parallel_calls_are_each_guarded(autojump_clock: MockClock) -> None:
    # call 0 gets deltas until t=5; call 1 keeps streaming every 3 s: call 0 stalls at 25
    steps: list[Any] = [
        Send(CREATED + added(0) + added(1)),
        Send(delta(0, "{")),
        Sleep(5),
        Send(delta(0, '"a"')),
    ]
    for _ in range(10):
        steps += [Sleep(3), Send(delta(1, "x"))]
    async with MemoryProxy([Script(steps=steps)]) as proxy:
        exchange = await proxy.request(TURN1_REQUEST)
    assert exchange.elapsed == 25.0
    assert exchange.outcome is not None
    assert exchange.outcome.stalled_item == "function_call tool_0 (call_0)"
    assert exchange.events()[-2]["message"].endswith("of function_call tool_0 (call_0)")
    calls = [(c.name, c.arguments_length) for c in exchange.outcome.calls]
    assert calls == [("tool_0", 4), ("tool_1", 6)]  # call 1's deltas at 8, 11, ..., 23


@pytest.mark.parametrize("keepalives", [False, True])
async def test_a_hosted_mcp_tool_running_after_its_arguments_is_no_stall(
    autojump_clock: MockClock, keepalives: bool
) -> None:
    item = {
        "type": "mcp_call",
        "id": "mcp_1",
        "name": "roll",
        "server_label": "dice",
        "arguments": "",
    }
    start = [
        CREATED,
        sse_event({"type": "response.output_item.added", "output_index": 0, "item": item}),
        sse_event(
            {
                "type": "response.mcp_call_arguments.delta",
                "output_index": 0,
                "item_id": "mcp_1",
                "delta": "{}",
            }
        ),
        sse_event(
            {
                "type": "response.mcp_call_arguments.done",
                "output_index": 0,
                "item_id": "mcp_1",
                "arguments": "{}",
            }
        ),
    ]
    # the server runs the tool: 25 s of silence, or 60 s with keepalives every 10 s
    wait: list[Any] = [Sleep(25)]
    if keepalives:
        wait = [step for _ in range(6) for step in (Sleep(10), Send(b": keepalive\n\n"))]
    end = [
        sse_event({"type": "response.mcp_call.completed", "output_index": 0, "item_id": "mcp_1"}),
        sse_event(
            {
                "type": "response.output_item.done",
                "output_index": 0,
                "item": {**item, "arguments": "{}", "status": "completed"},
            }
        ),
        sse_event(TURN1_EVENTS[-1]),
    ]
    script = Script(steps=[Send(b"".join(start)), *wait, Send(b"".join(end))])
    async with MemoryProxy([script]) as proxy:
        exchange = await proxy.request(TURN1_REQUEST)
    assert exchange.body == script.body
    assert exchange.outcome is not None and exchange.outcome.kind is OutcomeKind.COMPLETED


async def test_a_finished_call_does_not_end_guarding_of_the_next(autojump_clock: MockClock) -> None:
    steps = [
        Send(CREATED + added(0) + delta(0, "{}")),
        Sleep(1),
        Send(args_done(0, "{}") + item_done(0, "{}")),
        Sleep(1),
        Send(added(1) + delta(1, '{"b"')),
        Stall(),
    ]
    async with MemoryProxy([Script(steps=steps)]) as proxy:
        exchange = await proxy.request(TURN1_REQUEST)
    assert exchange.elapsed == 22.0
    assert exchange.outcome is not None
    assert exchange.outcome.kind is OutcomeKind.STALLED_TOOL_ARGUMENTS
    assert exchange.outcome.stalled_item == "function_call tool_1 (call_1)"


# --- no false stalls -------------------------------------------------------------------


async def test_gaps_just_under_each_deadline_pass_untouched(autojump_clock: MockClock) -> None:
    arguments = ["{", '"city"', ":", '"北京"', "}"]
    steps: list[Any] = [Send(CREATED + added(0))]
    for part in arguments:  # tool_arguments is 20
        steps += [Sleep(19.99), Send(delta(0, part))]
    whole = "".join(arguments)
    steps += [Sleep(19.99), Send(args_done(0, whole)), Sleep(19.99), Send(item_done(0, whole))]
    steps += [
        Sleep(29.99),
        Send(b": ping\n\n"),
        Sleep(29.99),
        Send(sse_event(TURN1_EVENTS[-1])),
    ]  # idle 30
    script = Script(steps=steps)
    async with MemoryProxy([script]) as proxy:
        exchange = await proxy.request(TURN1_REQUEST)
    assert exchange.body == script.body
    assert exchange.outcome is not None
    assert exchange.outcome.kind is OutcomeKind.COMPLETED
    assert exchange.outcome.aggregates_match is True


async def test_pings_and_keepalives_keep_idle_alive_but_not_an_open_call(
    autojump_clock: MockClock,
) -> None:
    def numbered(event: dict[str, Any], seq: int) -> bytes:
        return sse_event({**event, "sequence_number": seq})

    opened = {"type": "response.output_item.added", "output_index": 0, "item": call_item(0)}
    first = {
        "type": "response.function_call_arguments.delta",
        "output_index": 0,
        "item_id": "fc_0",
        "delta": "{",
    }
    steps: list[Any] = [Send(CREATED + numbered(opened, 1) + numbered(first, 2))]
    for seq in range(3, 12):  # keepalive events at t = 1.5, 4.5, ..., comments in between
        steps += [
            Sleep(1.5),
            Send(numbered({"type": "keepalive"}, seq)),
            Sleep(1.5),
            Send(b": ping\n\n"),
        ]
    async with MemoryProxy([Script(steps=steps)]) as proxy:
        exchange = await proxy.request(TURN1_REQUEST)
    assert exchange.elapsed == 20.0
    assert exchange.outcome is not None
    assert exchange.outcome.kind is OutcomeKind.STALLED_TOOL_ARGUMENTS
    # seven keepalives (seq 3..9) arrived before t=20: proxai's events continue at 10
    events = exchange.events()
    assert events[-3] == {"type": "keepalive", "sequence_number": 9}
    assert events[-2]["sequence_number"] == 10
    assert events[-1]["sequence_number"] == 11


async def test_pings_alone_keep_a_stream_without_open_calls_alive(
    autojump_clock: MockClock,
) -> None:
    steps: list[Any] = [Send(CREATED)]
    for _ in range(10):
        steps += [Sleep(25), Send(b": ping\n\n")]
    steps += [Send(sse_event(TURN1_EVENTS[-1]))]
    async with MemoryProxy([Script(steps=steps)]) as proxy:
        exchange = await proxy.request(TURN1_REQUEST)
    assert exchange.elapsed == 250.0
    assert exchange.outcome is not None and exchange.outcome.kind is OutcomeKind.COMPLETED


async def test_a_slow_client_never_causes_a_stall(autojump_clock: MockClock) -> None:
    # The client takes 100 s (longer than every deadline) to accept each write; the
    # upstream sends the whole turn at once with small gaps. Backpressure reaches the
    # upstream, and no deadline counts proxai's own waiting.
    script = Script.sse(TURN1_EVENTS, delay=1.0)
    async with MemoryProxy([script]) as proxy:
        exchange = await proxy.request(TURN1_REQUEST, read_delay=100.0)
    assert exchange.body == TURN1
    assert exchange.outcome is not None and exchange.outcome.kind is OutcomeKind.COMPLETED
    # Each write takes 100 s and the writer joins what queued meanwhile: the turn goes
    # out in three writes, together far past the idle and tool_arguments deadlines.
    assert exchange.elapsed >= 100.0 * 3


async def test_reads_queued_behind_a_slow_write_go_out_together(
    autojump_clock: MockClock,
) -> None:
    # The upstream sends the turn one event a second; the client takes 50 s over its
    # first write. The reads that queued meanwhile go out in one write, whole events
    # only, and every later read, with the client keeping up, in its own write at once.
    steps: list[Any] = []
    for event in TURN1_EVENTS:
        steps += [Send(sse_event(event)), Sleep(1)]
    script = Script(steps=steps)
    async with MemoryProxy([script]) as proxy:
        slow = await proxy.request(TURN1_REQUEST, read_delay=lambda n: 50.0 if n == 0 else 0.0)
        fast = await proxy.request(TURN1_REQUEST)
    assert slow.body == fast.body == script.body
    assert all(chunk.endswith(b"\n\n") for _, chunk in slow.chunks)
    assert len(slow.chunks[1][1]) > len(sse_event(TURN1_EVENTS[1]))  # several reads joined
    assert len(slow.chunks) < len(TURN1_EVENTS)
    # Nothing queued, nothing joined: each event in its own write, when it arrived.
    assert [chunk for _, chunk in fast.chunks] == [sse_event(e) for e in TURN1_EVENTS]
    assert [at - fast.started_at for at, _ in fast.chunks] == list(
        map(float, range(len(TURN1_EVENTS)))
    )


class _LateTurn(trio.abc.Instrument):
    """Once, when the observer task is woken at or after ``after``, let ``latency``
    seconds pass before it runs: the run loop busy with other streams."""

    def __init__(self, clock: MockClock, after: float, latency: float) -> None:
        self.clock, self.after, self.latency = clock, after, latency
        self.fired = False

    def task_scheduled(self, task: trio.lowlevel.Task) -> None:
        if (
            not self.fired
            and task.name.endswith("Relay._observe")
            and self.clock.current_time() >= self.after
        ):
            self.fired = True
            self.clock.jump(self.latency)


async def _completes_with_a_late_observer(
    clock: MockClock, script: Script, late_after: float, **request: Any
) -> None:
    """Play ``script``; the observer's first turn from ``late_after`` s on comes 20 ms
    late, past the idle deadline. The stream must still complete, byte for byte."""
    async with MemoryProxy([script]) as proxy:
        late = _LateTurn(clock, after=trio.current_time() + late_after, latency=0.02)
        trio.lowlevel.add_instrument(late)
        try:
            exchange = await proxy.request(TURN1_REQUEST, **request)
        finally:
            trio.lowlevel.remove_instrument(late)
    assert late.fired
    assert exchange.outcome is not None
    assert exchange.outcome.kind is OutcomeKind.COMPLETED, exchange.outcome.detail
    assert exchange.body == script.body


async def test_an_event_that_arrives_just_before_idle_is_not_a_stall(
    autojump_clock: MockClock,
) -> None:
    # The next event comes 29.99 s after the last (idle is 30 s) and the observer gets
    # to run 20 ms later, past the deadline: the event was in time, the stream goes on.
    steps: list[Any] = [Send(sse_event(TURN1_EVENTS[0])), Send(sse_event(TURN1_EVENTS[1]))]
    steps += [Sleep(29.99), *(Send(sse_event(e)) for e in TURN1_EVENTS[2:])]
    await _completes_with_a_late_observer(autojump_clock, Script(steps=steps), 29.98)


async def test_an_event_just_in_time_behind_a_slow_client_is_not_dropped(
    autojump_clock: MockClock,
) -> None:
    # The client takes 100 s over its first write, so the writer's channel fills; the
    # next event comes 29.99 s after the last read and the observer runs 20 ms later,
    # then waits for room in the full channel.
    ping = b": ping\n\n"
    steps: list[Any] = [Send(sse_event(TURN1_EVENTS[0])), Sleep(1)]
    steps += [Send(sse_event(TURN1_EVENTS[1])), Send(ping), Send(ping)]
    steps += [Send(sse_event(TURN1_EVENTS[2])), Sleep(29.99)]
    steps += [Send(sse_event(e)) for e in TURN1_EVENTS[3:]]
    await _completes_with_a_late_observer(
        autojump_clock,
        Script(steps=steps),
        30.98,
        read_delay=lambda n: 100.0 if n == 0 else 0.0,
    )


async def test_joined_writes_are_never_larger_than_one_upstream_read(
    autojump_clock: MockClock,
) -> None:
    # Reads of 30,000 bytes queue behind a slow first write: they are joined two at a
    # time (60,000 bytes), never past 64 KiB, the most one upstream read can hold, so
    # client_write (which bounds one write) means what it did without joining.
    part = b"x" * 29_999 + b"\n"
    script = Script(
        headers=(("content-type", "application/octet-stream"),),
        steps=[Send(part) for _ in range(12)],
    )
    async with MemoryProxy([script]) as proxy:
        exchange = await proxy.request(
            b"", method="GET", path="/v1/blob", read_delay=lambda n: 50.0 if n == 0 else 0.0
        )
    assert exchange.outcome is not None
    assert exchange.outcome.kind is OutcomeKind.COMPLETED, exchange.outcome.detail
    assert exchange.body == script.body
    sizes = [len(chunk) for _, chunk in exchange.chunks]
    assert max(sizes) <= 64 * 1024
    assert 60_000 in sizes  # reads were joined


@pytest.mark.parametrize("pause_at", [1, 3, 10])
async def test_backpressure_pauses_the_upstream_clock(
    autojump_clock: MockClock, pause_at: int
) -> None:
    # A long call streamed 1 s apart to a client that stops reading for 300 s once:
    # the channels fill and the reader stops pulling. When the client reads again,
    # proxai drains what it holds and waits for the upstream, whose next delta comes
    # 1 s after the reader asks. The 300 s were proxai's waiting, not the upstream's
    # silence, so no deadline may fire.
    parts = [f'"k{i}":{i},' for i in range(40)]
    steps: list[Any] = [Send(CREATED + added(0))]
    for part in parts:
        steps += [Sleep(1), Send(delta(0, part))]
    steps += [Sleep(1), Send(item_done(0, "".join(parts))), Send(sse_event(TURN1_EVENTS[-1]))]
    script = Script(steps=steps)
    async with MemoryProxy([script]) as proxy:
        exchange = await proxy.request(
            TURN1_REQUEST, read_delay=lambda n: 300.0 if n == pause_at else 0.0
        )
    assert exchange.outcome is not None
    assert exchange.outcome.kind is OutcomeKind.COMPLETED, exchange.outcome.detail
    assert exchange.body == script.body
    assert exchange.elapsed > 300


async def test_a_slow_client_and_a_stalling_upstream_still_ends_at_the_upstream_stall(
    autojump_clock: MockClock,
) -> None:
    # Backpressure pauses the upstream clock, but real silence still counts: the call's
    # last delta arrives, then the upstream goes quiet for good.
    script = stalled_after(TURN1_EVENTS, 6)
    async with MemoryProxy([script]) as proxy:
        exchange = await proxy.request(TURN1_REQUEST, read_delay=50.0)
    assert (
        exchange.outcome is not None and exchange.outcome.kind is OutcomeKind.STALLED_TOOL_ARGUMENTS
    )
    assert exchange.events()[:6] == TURN1_EVENTS[:6]


async def test_total_fires_at_its_wall_clock_time(autojump_clock: MockClock) -> None:
    steps: list[Any] = [Send(CREATED)]
    for i in range(20):
        steps += [
            Sleep(10),
            Send(
                sse_event(
                    {
                        "type": "response.output_text.delta",
                        "output_index": 0,
                        "content_index": 0,
                        "item_id": "m",
                        "delta": str(i),
                    }
                )
            ),
        ]
    async with MemoryProxy([Script(steps=steps)], total=45.0) as proxy:
        exchange = await proxy.request(TURN1_REQUEST)
    assert exchange.elapsed == 45.0
    assert exchange.outcome is not None and exchange.outcome.kind is OutcomeKind.TOTAL_TIMEOUT
    assert (
        exchange.events()[-2]["message"]
        == "response exceeded proxai's total time limit of 45.0 s (after 5 events)"
    )


@pytest.mark.parametrize("first_gap", [0.0, 30.0])
async def test_total_bounds_streams_without_an_observer(
    autojump_clock: MockClock, first_gap: float
) -> None:
    chunk = b'data: {"choices":[]}\n\n'
    steps: list[Any] = [Sleep(first_gap)] if first_gap else []
    for _ in range(10):
        steps += [Send(chunk), Sleep(10)]
    async with MemoryProxy([Script(steps=steps)], total=25.0) as proxy:
        exchange = await proxy.request({"model": "m", "stream": True}, path="/v1/vendor/stream")
        closed_at = await proxy.transport.requests[0].wait_closed()
    assert exchange.elapsed == 25.0
    assert closed_at == exchange.ended_at
    assert exchange.outcome is not None and exchange.outcome.kind is OutcomeKind.TOTAL_TIMEOUT
    if first_gap:  # nothing reached the client yet: a plain 504
        assert exchange.status == 504
        assert exchange.json()["error"]["code"] == "upstream_timeout"
    else:  # cut at a boundary and ended broken: no observer knows this route's protocol
        assert exchange.status == 200
        assert exchange.body == chunk * 3
        assert exchange.aborted


@pytest.mark.parametrize("path", ["/v1/responses", "/v1/chat/completions"])
async def test_a_non_streaming_generation_waits_for_its_headers_up_to_total(
    autojump_clock: MockClock, path: str
) -> None:
    # Without "stream": true the upstream answers only when the whole response is ready,
    # which may take far longer than first_byte: only total bounds it.
    script = Script(
        before_head=[Sleep(300)],
        headers=(("content-type", "application/json"),),
        steps=[Send(b"{}")],
    )
    async with MemoryProxy([script, Script(before_head=[Stall()])], total=600.0) as proxy:
        slow = await proxy.request({"model": "m"}, path=path)
        stuck = await proxy.request({"model": "m", "stream": False}, path=path)
    assert (slow.status, slow.body, slow.elapsed) == (200, b"{}", 300.0)
    assert slow.outcome is not None and slow.outcome.kind is OutcomeKind.COMPLETED
    assert (stuck.status, stuck.elapsed) == (504, 600.0)
    assert stuck.outcome is not None and stuck.outcome.kind is OutcomeKind.TOTAL_TIMEOUT


async def test_total_before_headers(autojump_clock: MockClock) -> None:
    async with MemoryProxy([Script(before_head=[Stall()])], total=4.0) as proxy:
        exchange = await proxy.request(TURN1_REQUEST)
    assert exchange.status == 504
    assert exchange.elapsed == 4.0
    assert exchange.outcome is not None and exchange.outcome.kind is OutcomeKind.TOTAL_TIMEOUT


# --- ends without a terminal event --------------------------------------------------------


@pytest.mark.parametrize(
    ("ending", "kind", "code", "message"),
    [
        (
            None,
            OutcomeKind.UPSTREAM_EOF,
            "upstream_closed",
            "upstream closed the stream before the response completed while streaming arguments of "
            "function_call get_weather (call_weather_01)",
        ),
        (
            Close(),
            OutcomeKind.UPSTREAM_RESET,
            "upstream_reset",
            "upstream connection broke before the response completed while streaming arguments of "
            "function_call get_weather (call_weather_01): peer closed connection without sending "
            "complete message body",
        ),
        (
            Reset(),
            OutcomeKind.UPSTREAM_RESET,
            "upstream_reset",
            "upstream connection broke before the response completed while streaming arguments of "
            "function_call get_weather (call_weather_01): [Errno 104] Connection reset by peer",
        ),
    ],
)
async def test_early_end_gets_a_terminal_at_once(
    autojump_clock: MockClock, ending: Any, kind: OutcomeKind, code: str, message: str
) -> None:
    then = [Sleep(3), Send(b"event: response.function_call_arguments.delta\ndata: {")]
    if ending is not None:
        then.append(ending)
    script = Script.sse(TURN1_EVENTS[:6], then=then)
    async with MemoryProxy([script]) as proxy:
        exchange = await proxy.request(TURN1_REQUEST)
    assert exchange.elapsed == 3.0
    assert exchange.outcome is not None and exchange.outcome.kind is kind
    # the unfinished event is dropped: proxai's own events start at a boundary
    assert_synthesized_failure(exchange.events(), after=6, message=message, sequence=6, code=code)


async def test_eof_before_any_event_is_502(autojump_clock: MockClock) -> None:
    async with MemoryProxy([Script(steps=[Sleep(1)])]) as proxy:
        exchange = await proxy.request(TURN1_REQUEST)
    assert exchange.status == 502
    assert exchange.json()["error"]["code"] == "upstream_closed"
    assert exchange.outcome is not None and exchange.outcome.kind is OutcomeKind.UPSTREAM_EOF


async def test_upstream_that_never_hangs_up_after_the_terminal_event(
    autojump_clock: MockClock,
) -> None:
    script = Script.sse(TURN2_EVENTS, then=[Stall()])
    async with MemoryProxy([script]) as proxy:
        exchange = await proxy.request(TURN2_REQUEST)
        closed_at = await proxy.transport.requests[0].wait_closed()
    assert exchange.body == TURN2
    assert exchange.outcome is not None and exchange.outcome.kind is OutcomeKind.COMPLETED
    assert exchange.elapsed == 1.0  # the after-terminal grace, not the idle deadline
    assert closed_at == exchange.ended_at


# --- the client leaves ------------------------------------------------------------------


async def test_client_disconnect_mid_stall_ends_everything_at_once(
    autojump_clock: MockClock,
) -> None:
    async with MemoryProxy([stalled_after(TURN1_EVENTS, 6)]) as proxy:
        exchange = await proxy.request(TURN1_REQUEST, disconnect_after=7.0)
        closed_at = await proxy.transport.requests[0].wait_closed()
    assert closed_at - exchange.started_at == 7.0
    assert exchange.outcome is not None and exchange.outcome.kind is OutcomeKind.CLIENT_DISCONNECTED
    assert exchange.outcome.total_s == 7.0
    assert trio.current_time() - exchange.started_at == 7.0


# --- odd but plausible upstream input (found in review) ------------------------------------


async def test_an_empty_event_field_is_the_default_type(autojump_clock: MockClock) -> None:
    # "event:" with nothing after it names no type: parsers use "message", so does proxai.
    stream = b"".join(
        sse_event(e).replace(f"event: {e['type']}".encode(), b"event:") for e in TURN2_EVENTS
    )
    async with MemoryProxy([Script(steps=[Send(stream)])]) as proxy:
        exchange = await proxy.request(TURN2_REQUEST)
    assert exchange.body == stream
    assert exchange.outcome is not None and exchange.outcome.kind is OutcomeKind.COMPLETED


async def test_a_call_added_without_output_index_is_still_guarded(
    autojump_clock: MockClock,
) -> None:
    added_no_index = sse_event({"type": "response.output_item.added", "item": call_item(0)})
    delta_by_id = sse_event(
        {"type": "response.function_call_arguments.delta", "item_id": "fc_0", "delta": "{"}
    )
    steps: list[Any] = [Send(CREATED + added_no_index + delta_by_id)]
    for _ in range(10):
        steps += [Sleep(5), Send(b": ping\n\n")]
    async with MemoryProxy([Script(steps=steps)]) as proxy:
        exchange = await proxy.request(TURN1_REQUEST)
    assert exchange.elapsed == 20.0
    assert exchange.outcome is not None
    assert exchange.outcome.kind is OutcomeKind.STALLED_TOOL_ARGUMENTS
    assert exchange.outcome.stalled_item == "function_call tool_0 (call_0)"
    assert exchange.outcome.anomalies == []


async def test_an_odd_final_output_does_not_break_a_completed_stream(
    autojump_clock: MockClock,
) -> None:
    completed = {
        **TURN2_EVENTS[-1],
        "response": {**TURN2_EVENTS[-1]["response"], "output": [{"id": ["x"], "type": {"a": 1}}]},
    }
    stream = turn_bytes([*TURN2_EVENTS[:-1], completed])
    async with MemoryProxy([Script(steps=[Send(stream)])]) as proxy:
        exchange = await proxy.request(TURN2_REQUEST)
    assert exchange.body == stream
    assert exchange.outcome is not None and exchange.outcome.kind is OutcomeKind.COMPLETED


async def test_an_observer_that_fails_is_dropped_not_the_stream(
    autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    from proxai.protocols.responses.reader import ResponsesReader

    def broken(self: ResponsesReader, event: Any, data: bytes) -> object:
        raise RuntimeError("observer bug")

    monkeypatch.setattr(ResponsesReader, "read", broken)
    async with MemoryProxy([Script.sse(TURN1_EVENTS)]) as proxy:
        exchange = await proxy.request(TURN1_REQUEST)
    assert exchange.body == TURN1
    assert exchange.outcome is not None
    assert exchange.outcome.kind is OutcomeKind.COMPLETED
    assert exchange.outcome.anomalies == [
        "observer failed (RuntimeError: observer bug); relaying without it"
    ]


async def test_a_background_response_resumed_by_get_is_observed(autojump_clock: MockClock) -> None:
    async with MemoryProxy([Script.sse(TURN1_EVENTS[:6], then=[Stall()])]) as proxy:
        exchange = await proxy.request(b"", path="/v1/responses/resp_01", method="GET")
    assert exchange.elapsed == 20.0
    assert exchange.outcome is not None
    assert exchange.outcome.kind is OutcomeKind.STALLED_TOOL_ARGUMENTS


async def test_a_non_streaming_post_on_another_route_waits_up_to_total(
    autojump_clock: MockClock,
) -> None:
    script = Script(
        before_head=[Sleep(200)],
        headers=(("content-type", "application/json"),),
        steps=[Send(b"{}")],
    )
    async with MemoryProxy([script]) as proxy:
        exchange = await proxy.request(
            {"model": "gpt-image-1", "prompt": "a run"}, path="/v1/images/generations"
        )
    assert (exchange.status, exchange.body, exchange.elapsed) == (200, b"{}", 200.0)


@pytest.mark.parametrize("path", ["/v1//responses", "/v1/responses/", "/v1//responses//"])
async def test_odd_spellings_of_the_route_keep_the_observer(
    autojump_clock: MockClock, path: str
) -> None:
    async with MemoryProxy([Script.sse(TURN1_EVENTS[:6], then=[Stall()])]) as proxy:
        exchange = await proxy.request(TURN1_REQUEST, path=path)
    assert exchange.elapsed == 20.0
    assert exchange.outcome is not None
    assert exchange.outcome.kind is OutcomeKind.STALLED_TOOL_ARGUMENTS
