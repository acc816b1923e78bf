"""The Responses WebSocket mode over in-memory carriers, on virtual time.

Every path of a client socket: the seed's two turns (state kept by proxai for an
upstream that keeps none), warm-ups, queued turns, request-level and mid-response
errors as frames, the client's faults (hang-up, stopped reading, binary and
oversized frames, bad JSON), the upgrade's refusals, the age limit and the drain.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
import trio.testing

from proxai.outcome import OutcomeKind
from proxai.testing.memory_proxy import MemoryProxy
from proxai.testing.memory_socket import Closed, Denied, open_memory_socket
from proxai.testing.seed import (
    TURN1_EVENTS,
    TURN1_REQUEST,
    TURN2_EVENTS,
    TURN2_REQUEST,
    WEATHER_RESULT,
    make_chat_seed_responder,
    seed_responder,
    turn1_script,
    turn1_stalled_script,
    turn2_script,
)
from proxai.testing.upstream import Script, Send, Stall
from proxai.testing.upstream import sse_event as up_event
from proxai.testing.ws_upstream import RecordedFrame, ScriptedSocketUpstream, SocketScript

#: What Codex's handshake carries besides the key.
HANDSHAKE = [
    (b"upgrade", b"websocket"),
    (b"connection", b"Upgrade"),
    (b"sec-websocket-key", b"dGhlIHNhbXBsZSBub25jZQ=="),
    (b"sec-websocket-version", b"13"),
    (b"sec-websocket-extensions", b"permessage-deflate; client_max_window_bits"),
    (b"openai-beta", b"responses_websockets=2026-02-06"),
    (b"user-agent", b"codex_cli_rs/0.171.0"),
]

CHAT = {"chat": {"base_url": "http://chat.test/v1", "protocol": "openai_chat"}}


def create(request: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """A ``response.create`` frame of a POST body (``stream`` left out, as the SDK does)."""
    body = {k: v for k, v in request.items() if k != "stream"}
    return {"type": "response.create", **body, **extra}


async def test_seed_two_turns_over_a_socket_to_a_responses_upstream(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Pass-through: each frame is the SSE event's data, byte for byte as JSON."""
    async with MemoryProxy(seed_responder) as proxy, open_memory_socket(proxy.app) as ws:
        await ws.send(create(TURN1_REQUEST))
        assert await ws.response() == TURN1_EVENTS
        await ws.send(create(TURN2_REQUEST))
        assert await ws.response() == TURN2_EVENTS
    first, second = (r.json() for r in proxy.transport.requests)
    assert first["stream"] is True and "type" not in first
    # The upstream keeps state (protocol openai) and stored resp_01: the id goes as sent.
    assert second["previous_response_id"] == "resp_01"
    assert second["input"] == TURN2_REQUEST["input"]
    outcomes = [o for o in proxy.outcomes if o.method == "response.create"]
    assert [o.kind for o in outcomes] == [OutcomeKind.COMPLETED, OutcomeKind.COMPLETED]
    assert {o.transport for o in outcomes} == {"websocket"}
    assert len({o.socket_id for o in outcomes}) == 1


async def test_store_false_turns_are_sent_self_contained_to_an_upstream_with_state(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Codex's store: false: OpenAI keeps nothing, so proxai expands the socket's last
    response into the turn and sends no previous_response_id."""
    async with MemoryProxy(seed_responder) as proxy, open_memory_socket(proxy.app) as ws:
        await ws.send(create(TURN1_REQUEST, store=False))
        assert await ws.response() == TURN1_EVENTS
        await ws.send(create(TURN2_REQUEST, store=False))
        await ws.response()
    second = proxy.transport.requests[1].json()
    assert "previous_response_id" not in second
    assert [i.get("type") for i in second["input"]] == [
        "message",
        "function_call",
        "function_call_output",
    ]
    assert second["input"][0] == TURN1_REQUEST["input"][0]


async def test_frames_are_the_upstream_event_data_unchanged(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with MemoryProxy([turn1_script()]) as proxy, open_memory_socket(proxy.app) as ws:
        await ws.send(create(TURN1_REQUEST))
        texts = []
        for _ in TURN1_EVENTS:
            _, text = await ws.receive()
            texts.append(text)
    assert texts == [
        up_event(e).split(b"data: ", 1)[1].rstrip(b"\n").decode() for e in TURN1_EVENTS
    ]


#: A Chat upstream: a get_weather call for the first request, text after a tool result.
chat_turns = make_chat_seed_responder(("适合慢跑。",))


async def test_seed_over_a_socket_to_a_chat_upstream_keeps_the_conversation(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Chat-only upstream: proxai holds the socket's conversation and expands
    previous_response_id into the whole context."""
    routes = [{"model": "*", "upstreams": ["chat"]}]
    async with (
        MemoryProxy(chat_turns, upstreams=CHAT, routes=routes) as proxy,
        open_memory_socket(proxy.app, headers=HANDSHAKE) as ws,
    ):
        await ws.send(create(TURN1_REQUEST))
        turn1 = await ws.response()
        assert turn1[-1]["type"] == "response.completed"
        done = [e["item"] for e in turn1 if e["type"] == "response.output_item.done"]
        assert done[0]["type"] == "function_call"
        rid = turn1[-1]["response"]["id"]
        await ws.send(create({**TURN2_REQUEST, "previous_response_id": rid}))
        turn2 = await ws.response()
        assert turn2[-1]["type"] == "response.completed"
        assert any(e.get("delta") == "适合慢跑。" for e in turn2)
    second = proxy.transport.requests[1].json()
    roles = [m["role"] for m in second["messages"]]
    assert roles == ["user", "assistant", "tool"]
    assert second["messages"][2]["content"] == WEATHER_RESULT
    # A turn is a POST: the handshake's own headers stay with the socket.
    sent = proxy.transport.requests[0]
    assert sent.header("sec-websocket-key") is None
    assert sent.header("sec-websocket-extensions") is None
    assert sent.header("user-agent") == "codex_cli_rs/0.171.0"


async def test_unknown_previous_response_on_a_chat_upstream_is_an_error_frame(
    autojump_clock: trio.testing.MockClock,
) -> None:
    routes = [{"model": "*", "upstreams": ["chat"]}]
    async with (
        MemoryProxy(chat_turns, upstreams=CHAT, routes=routes) as proxy,
        open_memory_socket(proxy.app) as ws,
    ):
        await ws.send(create(TURN2_REQUEST))
        frame = await ws.frame()
        assert isinstance(frame, dict)
        assert frame["type"] == "error" and frame["status"] == 400
        assert frame["error"]["code"] == "previous_response_not_found"
        assert frame["error"]["param"] == "previous_response_id"
        # The socket stays usable.
        await ws.send(create(TURN1_REQUEST))
        assert (await ws.response())[-1]["type"] == "response.completed"
    assert len(proxy.transport.requests) == 1


async def test_unknown_previous_response_goes_to_an_upstream_that_keeps_state(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with MemoryProxy(seed_responder) as proxy, open_memory_socket(proxy.app) as ws:
        await ws.send(create(TURN2_REQUEST))
        assert await ws.response() == TURN2_EVENTS
        # store: false: the upstream cannot have it either.
        await ws.send(create(TURN2_REQUEST, store=False))
        frame = await ws.frame()
        assert isinstance(frame, dict) and frame["error"]["code"] == "previous_response_not_found"
    assert proxy.transport.requests[0].json()["previous_response_id"] == "resp_01"
    assert len(proxy.transport.requests) == 1


async def test_warm_up_is_answered_locally_and_its_input_becomes_state(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Codex's first frame: generate false with its base instructions; the first real
    turn chains from the warm-up's id with only the new items."""
    routes = [{"model": "*", "upstreams": ["chat"]}]
    base = {"type": "message", "role": "developer", "content": "You are Codex." * 1000}
    async with (
        MemoryProxy(chat_turns, upstreams=CHAT, routes=routes) as proxy,
        open_memory_socket(proxy.app) as ws,
    ):
        await ws.send(
            create(
                {"model": "gpt-5.4", "input": [base]},
                generate=False,
                stream=True,
                client_metadata={"x": "y"},
            )
        )
        warm = await ws.response()
        assert [e["type"] for e in warm] == ["response.created", "response.completed"]
        assert [e["sequence_number"] for e in warm] == [0, 1]
        rid = warm[-1]["response"]["id"]
        assert rid.startswith("resp_") and len(rid) >= 5 + 32
        assert warm[-1]["response"]["output"] == []
        assert not proxy.transport.requests
        item = dict(TURN1_REQUEST["input"][0], id="msg_1", extra_field=1)
        await ws.send(
            create({**TURN1_REQUEST, "input": [item]}, previous_response_id=rid, stream=True)
        )
        assert (await ws.response())[-1]["type"] == "response.completed"
    sent = proxy.transport.requests[0].json()
    assert sent["messages"][0]["content"] == base["content"]
    assert "client_metadata" not in sent


async def test_a_warm_up_is_never_named_to_an_upstream_that_keeps_state(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The warm-up's id is proxai's: even with store true on an upstream that keeps state,
    the turn that chains from it goes self-contained (the warm-up's input first)."""
    base = {"type": "message", "role": "developer", "content": "You are Codex."}
    async with MemoryProxy(seed_responder) as proxy, open_memory_socket(proxy.app) as ws:
        await ws.send(create({"model": "gpt-5.4", "input": [base]}, generate=False))
        rid = (await ws.response())[-1]["response"]["id"]
        await ws.send(create(TURN1_REQUEST, previous_response_id=rid))
        assert await ws.response() == TURN1_EVENTS
        await ws.send(create(TURN2_REQUEST))  # chains from resp_01, which OpenAI stored
        assert await ws.response() == TURN2_EVENTS
    first, second = (r.json() for r in proxy.transport.requests)
    assert "previous_response_id" not in first
    assert first["input"] == [base, *TURN1_REQUEST["input"]]
    assert second["previous_response_id"] == "resp_01"
    assert second["input"] == TURN2_REQUEST["input"]


async def test_response_processed_gets_no_answer(autojump_clock: trio.testing.MockClock) -> None:
    async with MemoryProxy([turn1_script()]) as proxy, open_memory_socket(proxy.app) as ws:
        await ws.send({"type": "response.processed", "response_id": "resp_x"})
        await ws.send(create(TURN1_REQUEST))
        assert (await ws.frame()) == TURN1_EVENTS[0]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "not valid JSON"),
        ('["response.create"]', "JSON object"),
        ('{"type": "session.update"}', "unknown frame type 'session.update'"),
        (json.dumps(create(TURN1_REQUEST, background=True)), "background"),
    ],
)
async def test_bad_frames_get_an_error_frame_and_the_socket_stays_open(
    autojump_clock: trio.testing.MockClock, text: str, message: str
) -> None:
    async with MemoryProxy([turn1_script()]) as proxy, open_memory_socket(proxy.app) as ws:
        await ws.send(text)
        frame = await ws.frame()
        assert isinstance(frame, dict)
        assert frame["type"] == "error" and frame["status"] == 400
        assert frame["error"]["type"] == "invalid_request_error"
        assert message in frame["error"]["message"]
        await ws.send(create(TURN1_REQUEST))
        assert (await ws.response())[-1]["type"] == "response.completed"


async def test_projection_failure_is_the_http_400_message(
    autojump_clock: trio.testing.MockClock,
) -> None:
    bad = create(TURN1_REQUEST, tools="nope")
    async with MemoryProxy([turn1_script()]) as proxy:
        http = await proxy.request({**TURN1_REQUEST, "tools": "nope"})
        async with open_memory_socket(proxy.app) as ws:
            await ws.send(bad)
            frame = await ws.frame()
    assert isinstance(frame, dict) and frame["status"] == 400 == http.status
    assert frame["error"]["message"] == http.json()["error"]["message"]


async def test_upstream_429_is_an_error_frame_with_its_headers_in_both_places(
    autojump_clock: trio.testing.MockClock,
) -> None:
    script = Script(
        status=429,
        headers=[("content-type", "application/json"), ("retry-after", "7")],
        steps=[
            Send(
                b'{"error": {"type": "rate_limit_error", "code": "rate_limit_exceeded", '
                b'"message": "slow down"}}'
            )
        ],
    )
    async with MemoryProxy([script]) as proxy, open_memory_socket(proxy.app) as ws:
        await ws.send(create(TURN1_REQUEST))
        frame = await ws.frame()
    assert isinstance(frame, dict)
    assert frame["type"] == "error" and frame["status"] == 429
    assert frame["error"]["message"] == "slow down"
    assert frame["headers"]["retry-after"] == "7"
    assert frame["error"]["headers"]["retry-after"] == "7"


async def test_failover_before_the_first_event_works_as_over_http(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A 503 from the first upstream of the route: the turn goes to the next one (within
    the retry budget), and the client sees only the second's stream."""
    unavailable = Script(
        status=503,
        headers=[("content-type", "application/json")],
        steps=[Send(b'{"error": {"type": "server_error", "message": "busy"}}')],
    )
    upstreams = {"backup": {"base_url": "http://backup.test/v1", "api_key": "sk-b"}}
    routes = [{"model": "*", "upstreams": ["default", "backup"]}]
    async with (
        MemoryProxy(
            [unavailable, turn1_script()], upstreams=upstreams, routes=routes, retries={}
        ) as proxy,
        open_memory_socket(proxy.app) as ws,
    ):
        await ws.send(create(TURN1_REQUEST))
        assert await ws.response() == TURN1_EVENTS
    hosts = [r.header("host") for r in proxy.transport.requests]
    assert hosts == ["upstream.test", "backup.test"]
    turn = next(o for o in proxy.outcomes if o.method == "response.create")
    assert turn.kind is OutcomeKind.COMPLETED
    assert [(a.upstream, a.status) for a in turn.attempts] == [("default", 503), ("backup", 200)]


async def test_stall_before_the_first_byte_is_an_error_frame_with_the_http_status(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with (
        MemoryProxy([Script(before_head=[Stall()])]) as proxy,
        open_memory_socket(proxy.app) as ws,
    ):
        start = trio.current_time()
        await ws.send(create(TURN1_REQUEST))
        at, text = await ws.receive()
        assert isinstance(text, str)
        frame = json.loads(text)
        assert frame["type"] == "error" and frame["status"] == 504
        assert at - start == pytest.approx(10.0)  # MEMORY_TIMEOUTS first_byte
        await ws.send(create(TURN1_REQUEST))  # the socket goes on
        assert (await ws.frame())["type"] == "error"  # type: ignore[index]


async def test_stall_mid_arguments_ends_with_error_and_failed_frames_and_the_socket_goes_on(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with (
        MemoryProxy([turn1_stalled_script(), turn2_script()]) as proxy,
        open_memory_socket(proxy.app) as ws,
    ):
        sent = trio.current_time()
        await ws.send(create(TURN1_REQUEST))
        frames = await ws.response()
        failed_at = trio.current_time()
        assert [f["type"] for f in frames[-2:]] == ["error", "response.failed"]
        assert frames[-2]["code"] == "upstream_timeout"
        assert failed_at - sent == 20.0  # MEMORY_TIMEOUTS tool_arguments
        # The upstream was let go as the turn failed (tests/service/test_socket_endings.py
        # shows it on real sockets).
        assert proxy.transport.requests[0].closed_at == failed_at
        await ws.send(create(TURN1_REQUEST))
        assert await ws.response() == TURN2_EVENTS
    stalled = next(o for o in proxy.outcomes if o.method == "response.create")
    assert stalled.kind is OutcomeKind.STALLED_TOOL_ARGUMENTS


async def test_turns_run_one_at_a_time_in_order(autojump_clock: trio.testing.MockClock) -> None:
    scripts = [turn1_script(delay=0.5), turn2_script(delay=0.5)]
    async with MemoryProxy(scripts) as proxy, open_memory_socket(proxy.app) as ws:
        await ws.send(create(TURN1_REQUEST))
        await ws.send(create(TURN1_REQUEST))
        assert await ws.response() == TURN1_EVENTS
        assert await ws.response() == TURN2_EVENTS
    first, second = proxy.transport.requests
    assert second.received_at >= first.received_at + 0.5 * (len(TURN1_EVENTS) - 1)


async def test_a_full_queue_answers_an_error_frame(autojump_clock: trio.testing.MockClock) -> None:
    server = {"websocket_max_queued": 1}
    async with (
        MemoryProxy([turn1_script(delay=1.0)], server=server) as proxy,
        open_memory_socket(proxy.app) as ws,
    ):
        await ws.send(create(TURN1_REQUEST))  # taken by the runner
        await trio.sleep(0.1)
        await ws.send(create(TURN1_REQUEST))  # queued
        await ws.send(create(TURN1_REQUEST))  # over
        frames = [await ws.frame() for _ in range(2 * len(TURN1_EVENTS) + 1)]
    errors = [f for f in frames if isinstance(f, dict) and f["type"] == "error"]
    assert [e["error"]["code"] for e in errors] == ["websocket_queue_full"]
    # The two accepted turns both ran, one after the other.
    kinds = [f["type"] for f in frames if isinstance(f, dict)]
    assert kinds.count("response.completed") == 2


async def test_client_hang_up_mid_response_closes_the_upstream_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with (
        MemoryProxy([turn1_stalled_script()]) as proxy,
        open_memory_socket(proxy.app) as ws,
    ):
        await ws.send(create(TURN1_REQUEST))
        await ws.frame()
        await trio.sleep(1)
        hung_up = trio.current_time()
        await ws.close()
        await ws.finished.wait()
        ended = trio.current_time()
    assert ended - hung_up < 0.1
    record = proxy.transport.requests[0]
    assert record.closed_at is not None and record.closed_at - hung_up < 0.1
    turn = next(o for o in proxy.outcomes if o.method == "response.create")
    assert turn.kind is OutcomeKind.CLIENT_DISCONNECTED
    assert proxy.app.in_flight == 0


async def test_client_that_stops_reading_is_cut_after_client_write(
    autojump_clock: trio.testing.MockClock,
) -> None:
    long = Script.sse(
        [{"type": "response.output_text.delta", "delta": "x" * 1000}] * 200, delay=0.01
    )
    async with (
        MemoryProxy([long], client_write=3.0) as proxy,
        open_memory_socket(proxy.app, buffer=2) as ws,
    ):
        await ws.send(create(TURN1_REQUEST))
        started = trio.current_time()
        await ws.finished.wait()  # never reads: the socket is cut
        ended = trio.current_time()
    assert ended - started < 3.0 + 5
    turn = next(o for o in proxy.outcomes if o.method == "response.create")
    assert turn.kind is OutcomeKind.CLIENT_STALLED
    assert proxy.transport.requests[0].closed_at is not None


async def test_binary_frame_closes_with_1003(autojump_clock: trio.testing.MockClock) -> None:
    async with MemoryProxy([turn1_script()]) as proxy, open_memory_socket(proxy.app) as ws:
        await ws.send_bytes(b"\x00")
        assert await ws.frame() == Closed(1003, "binary frames are not supported")


async def test_frame_over_the_body_limit_closes_with_1009(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = {"max_request_body_bytes": 1000}
    async with (
        MemoryProxy([turn1_script()], server=server) as proxy,
        open_memory_socket(proxy.app) as ws,
    ):
        await ws.send(create(TURN1_REQUEST, instructions="x" * 2000))
        frame = await ws.frame()
    assert isinstance(frame, Closed) and frame.code == 1009


async def test_websocket_off_answers_426(autojump_clock: trio.testing.MockClock) -> None:
    async with (
        MemoryProxy([turn1_script()], server={"websocket": False}) as proxy,
        open_memory_socket(proxy.app) as ws,
    ):
        denied = await ws.frame()
    assert isinstance(denied, Denied) and denied.status == 426
    assert denied.json()["error"]["code"] == "websocket_not_supported"


async def test_no_key_is_401_before_accepting(autojump_clock: trio.testing.MockClock) -> None:
    auth = {"keys": ["sk-client"]}
    async with MemoryProxy([turn1_script()], auth=auth) as proxy:
        async with open_memory_socket(proxy.app) as ws:
            denied = await ws.frame()
        assert isinstance(denied, Denied) and denied.status == 401
        assert not ws.accepted.is_set()
        headers = [(b"authorization", b"Bearer sk-client")]
        async with open_memory_socket(proxy.app, headers=headers) as ws:
            await ws.send(create(TURN1_REQUEST))
            assert (await ws.response())[-1]["type"] == "response.completed"


@pytest.mark.parametrize(
    "headers",
    [
        [(b"origin", b"https://evil.example")],
        [(b"sec-fetch-site", b"cross-site"), (b"sec-fetch-mode", b"websocket")],
    ],
)
async def test_web_pages_are_refused_with_403_before_accepting(
    autojump_clock: trio.testing.MockClock,
    headers: list[tuple[bytes, bytes]],
) -> None:
    async with MemoryProxy([turn1_script()]) as proxy:
        async with open_memory_socket(proxy.app, headers=headers) as ws:
            denied = await ws.frame()
        assert isinstance(denied, Denied) and denied.status == 403
        async with open_memory_socket(proxy.app, headers=headers, http_response=False) as ws:
            assert await ws.frame() == Denied(403, [], b"")


async def test_other_paths_are_404(autojump_clock: trio.testing.MockClock) -> None:
    async with (
        MemoryProxy([turn1_script()]) as proxy,
        open_memory_socket(proxy.app, path="/v1/chat/completions") as ws,
    ):
        denied = await ws.frame()
    assert isinstance(denied, Denied) and denied.status == 404


async def test_a_turn_counts_in_max_concurrent_streams(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = {"max_concurrent_streams": 1}
    async with (
        MemoryProxy([turn1_stalled_script()], server=server) as proxy,
        open_memory_socket(proxy.app) as a,
        open_memory_socket(proxy.app) as b,
    ):
        await a.send(create(TURN1_REQUEST))
        await a.frame()
        assert proxy.app.in_flight == 1
        await b.send(create(TURN1_REQUEST))
        frame = await b.frame()
        assert isinstance(frame, dict) and frame["status"] == 503
        http = await proxy.request(TURN1_REQUEST)
        assert http.status == 503
        await a.close()
    assert proxy.app.in_flight == 0


async def test_socket_ends_after_max_age_with_the_limit_error(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = {"websocket_max_age": 100.0}
    async with (
        MemoryProxy([turn1_script()], server=server) as proxy,
        open_memory_socket(proxy.app) as ws,
    ):
        opened = trio.current_time()
        at, text = await ws.receive()
        assert isinstance(text, str)
        frame = json.loads(text)
        assert frame["type"] == "error" and frame["status"] == 400
        assert frame["error"]["code"] == "websocket_connection_limit_reached"
        assert at - opened == pytest.approx(100.0)
        assert await ws.frame() == Closed(1000, "websocket_connection_limit_reached")


async def test_age_limit_waits_for_the_response_in_flight(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = {"websocket_max_age": 1.0}
    async with (
        MemoryProxy([turn1_script(delay=0.5)], server=server) as proxy,
        open_memory_socket(proxy.app) as ws,
    ):
        await ws.send(create(TURN1_REQUEST))
        assert await ws.response() == TURN1_EVENTS
        frame = await ws.frame()
        assert isinstance(frame, dict)
        assert frame["error"]["code"] == "websocket_connection_limit_reached"


async def test_drain_closes_idle_sockets_with_1001(autojump_clock: trio.testing.MockClock) -> None:
    async with MemoryProxy([turn1_script()]) as proxy, open_memory_socket(proxy.app) as ws:
        await ws.send(create(TURN1_REQUEST))
        await ws.response()
        proxy.app.begin_drain()
        assert await ws.frame() == Closed(1001, "proxai is shutting down")


async def test_state_is_bounded_and_over_it_the_turn_gets_an_error_frame(
    autojump_clock: trio.testing.MockClock,
) -> None:
    routes = [{"model": "*", "upstreams": ["chat"]}]
    server = {"websocket_max_state_bytes": 100}
    async with (
        MemoryProxy(chat_turns, upstreams=CHAT, routes=routes, server=server) as proxy,
        open_memory_socket(proxy.app) as ws,
    ):
        await ws.send(create(TURN1_REQUEST, instructions="x"))
        rid = (await ws.response())[-1]["response"]["id"]
        await ws.send(create({**TURN2_REQUEST, "previous_response_id": rid}))
        frame = await ws.frame()
    assert isinstance(frame, dict) and frame["status"] == 400
    assert "websocket_max_state_bytes" in frame["error"]["message"]


async def test_upgrade_and_each_response_leave_a_record(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with (
        MemoryProxy(seed_responder) as proxy,
        open_memory_socket(proxy.app) as ws,
    ):
        await ws.send(create(TURN1_REQUEST))
        await ws.response()
    turn, upgrade = proxy.outcomes
    assert turn.method == "response.create" and turn.transport == "websocket"
    assert upgrade.method == "GET" and upgrade.status == 101
    assert upgrade.socket_id == turn.socket_id and upgrade.events == 1


# -- an upstream that speaks the WebSocket mode itself (websocket = true) ---------------

WS = {"websocket": True}


def ws_seed(frame: RecordedFrame) -> SocketScript:
    """The seed's turns, played by a Responses WebSocket upstream."""
    turn2 = frame.json().get("previous_response_id") == "resp_01"
    return SocketScript.events(TURN2_EVENTS if turn2 else TURN1_EVENTS)


async def test_seed_over_a_socket_to_a_websocket_upstream_is_one_upstream_socket(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """websocket = true: one upstream socket for the client socket, each frame relayed
    (the client's fields in order, ``stream`` said), each event frame back unchanged."""
    upstream = ScriptedSocketUpstream(ws_seed)
    async with trio.open_nursery() as nursery:
        await nursery.start(upstream.serve)
        async with MemoryProxy([turn1_script()], upstream=WS, socket_upstream=upstream) as proxy:
            async with open_memory_socket(
                proxy.app, headers=[(b"openai-beta", b"responses_websockets=2026-02-06")]
            ) as ws:
                await ws.send(create(TURN1_REQUEST))
                texts = [(await ws.receive())[1] for _ in TURN1_EVENTS]
                await ws.send(create(TURN2_REQUEST))
                assert await ws.response() == TURN2_EVENTS
            (socket,) = upstream.sockets
            await socket.wait_closed()
        nursery.cancel_scope.cancel()
    assert texts == [f.decode() for f in SocketScript.events(TURN1_EVENTS).frames]
    assert proxy.transport.requests == []  # nothing went over HTTP
    first, second = (f.json() for f in upstream.frames)
    assert first["type"] == "response.create" and first["stream"] is True
    assert [k for k in first if k not in ("type", "stream")] == [
        k for k in TURN1_REQUEST if k != "stream"
    ]
    assert second["previous_response_id"] == "resp_01"
    assert socket.header("openai-beta") == "responses_websockets=2026-02-06"
    assert socket.header("authorization") == "Bearer sk-up"
    assert socket.closed_by_client and socket.close_code == 1000
    turns = [o for o in proxy.outcomes if o.method == "response.create"]
    assert [o.kind for o in turns] == [OutcomeKind.COMPLETED, OutcomeKind.COMPLETED]


async def test_client_hang_up_closes_the_upstream_socket_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    stalled = SocketScript.events(TURN1_EVENTS[:3], then=[Stall()])
    upstream = ScriptedSocketUpstream([stalled])
    async with trio.open_nursery() as nursery:
        await nursery.start(upstream.serve)
        async with MemoryProxy([turn1_script()], upstream=WS, socket_upstream=upstream) as proxy:
            async with open_memory_socket(proxy.app) as ws:
                await ws.send(create(TURN1_REQUEST))
                for _ in range(3):
                    await ws.frame()
                await trio.sleep(1)
                hung_up = trio.current_time()
                await ws.close()
                await ws.finished.wait()
            (socket,) = upstream.sockets
            closed = await socket.wait_closed()
        nursery.cancel_scope.cancel()
    assert closed - hung_up < 0.1
    turn = next(o for o in proxy.outcomes if o.method == "response.create")
    assert turn.kind is OutcomeKind.CLIENT_DISCONNECTED


async def test_a_websocket_upstream_error_frame_is_the_clients_error_frame(
    autojump_clock: trio.testing.MockClock,
) -> None:
    error = {"type": "rate_limit_error", "code": "rate_limit_exceeded", "message": "slow down"}
    upstream = ScriptedSocketUpstream(
        [SocketScript.error(429, error, {"retry-after": "7"}), SocketScript.events(TURN1_EVENTS)]
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(upstream.serve)
        async with (
            MemoryProxy([turn1_script()], upstream=WS, socket_upstream=upstream) as proxy,
            open_memory_socket(proxy.app) as ws,
        ):
            await ws.send(create(TURN1_REQUEST))
            frame = await ws.frame()
            await ws.send(create(TURN1_REQUEST))
            again = await ws.response()
        nursery.cancel_scope.cancel()
    assert isinstance(frame, dict) and frame["type"] == "error" and frame["status"] == 429
    assert frame["error"]["code"] == "rate_limit_exceeded"
    assert frame["headers"]["retry-after"] == "7"
    assert frame["error"]["headers"]["retry-after"] == "7"
    assert again == TURN1_EVENTS
    assert len(upstream.sockets) == 1  # the socket was kept after the error frame
