"""The upstream WebSocket (:class:`~proxai.upstream.websocket.UpstreamSocket`) against a
scripted Responses WebSocket server: real loopback sockets, and in memory on the virtual
clock where deadlines are the point (the relay's stall and its letting go)."""

from __future__ import annotations

import json
import ssl
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest
import trio
import trustme
from trio.testing import MockClock

from proxai.config import RetriesConfig, TimeoutsConfig, UpstreamConfig
from proxai.errors import ProxyError
from proxai.outcome import OutcomeKind
from proxai.policy.retry import RetryPlan
from proxai.protocols.names import WireApi
from proxai.protocols.responses.socket_frames import create_frame
from proxai.protocols.table import API_BY_WIRE
from proxai.protocols.tracking import AFTER_TERMINAL_GRACE, StreamLimits
from proxai.relay.exchange import Exchange, ProxiedRequest, UpstreamTarget
from proxai.relay.relay import Relay
from proxai.testing import (
    Binary,
    Close,
    CloseFrame,
    Ping,
    RecordedSocket,
    Refuse,
    Reset,
    ScriptedSocketUpstream,
    Send,
    SocketScript,
    Stall,
    socket_frame,
)
from proxai.testing.seed import TURN1_EVENTS, TURN1_REQUEST, TURN2_EVENTS, TURN2_REQUEST, turn_bytes
from proxai.testing.streams import data_frames, made_bytes
from proxai.upstream.client import EventTooLarge, UpstreamBroken
from proxai.upstream.websocket import SocketReply, UpstreamSocket
from proxai.wire.sse import SSEFramer
from tests.relay.test_relay_alone import FakeDownstream

TIMEOUTS = TimeoutsConfig(
    connect=5.0,
    first_byte=10.0,
    idle=30.0,
    tool_arguments=20.0,
    total=1000.0,
    client_write=50.0,
)
CLIENT_HEADERS = [
    (b"authorization", b"Bearer client-key"),
    (b"openai-beta", b"responses_websockets=2026-02-06"),
    (b"sec-websocket-key", b"dGhlIHNhbXBsZSBub25jZQ=="),
    (b"sec-websocket-extensions", b"permessage-deflate; client_max_window_bits"),
    (b"originator", b"codex_cli_rs"),
]
TURN1 = orjson.dumps({**TURN1_REQUEST, "stream": True})
TURN2 = orjson.dumps({**TURN2_REQUEST, "stream": True})


@pytest.fixture
def start(nursery: trio.Nursery) -> Callable[..., Any]:
    """``await start(scripts, **kwargs)``: a served ScriptedSocketUpstream."""

    async def start(responder: Any, **kwargs: Any) -> ScriptedSocketUpstream:
        upstream = ScriptedSocketUpstream(responder, **kwargs)
        await nursery.start(upstream.serve)
        return upstream

    return start


def socket_to(url: str, **kwargs: Any) -> UpstreamSocket:
    config = kwargs.pop("config", {})
    return UpstreamSocket(
        UpstreamConfig(base_url=url, api_key="sk-upstream", **config), TIMEOUTS, **kwargs
    )


async def chunks_of(reply: SocketReply) -> AsyncIterator[bytes]:
    """A streamed reply's events (made as frames: checked against their bytes), or a
    refusal's body."""
    events = reply.iter_events()
    if events is None:
        async for chunk in reply.iter_body():
            yield chunk
        return
    async for frame in events:
        yield made_bytes([frame])


async def body_of(reply: SocketReply) -> bytes:
    return b"".join([chunk async for chunk in chunks_of(reply)])


async def turn(
    socket: UpstreamSocket, body: bytes, path: bytes = b"/v1/responses", query: bytes = b""
) -> tuple[SocketReply, bytes]:
    async with socket.open("GET", path, query, CLIENT_HEADERS, body) as reply:
        return reply, await body_of(reply)


async def closed(recorded: RecordedSocket) -> float:
    """When the socket's connection ended; fails (never hangs) if it stays open."""
    with trio.fail_after(10.0):
        return await recorded.wait_closed()


def content_type(reply: SocketReply) -> bytes | None:
    return dict(reply.headers).get(b"content-type")


# -- one socket, many responses ---------------------------------------------------------


async def test_two_turns_go_over_one_socket_frames_unchanged_and_events_byte_for_byte(
    start: Callable[..., Any],
) -> None:
    upstream = await start([SocketScript.events(TURN1_EVENTS), SocketScript.events(TURN2_EVENTS)])
    socket = socket_to(upstream.base_url)
    first, body1 = await turn(socket, TURN1)
    second, body2 = await turn(socket, TURN2)
    assert (first.status, second.status) == (200, 200)
    assert content_type(first) == b"text/event-stream; charset=utf-8"
    # Each frame becomes one SSE event: `event: <type>` and the frame as its data.
    assert body1 == turn_bytes(TURN1_EVENTS) and body2 == turn_bytes(TURN2_EVENTS)
    assert len(upstream.sockets) == 1 and socket.connections_opened == 1 and socket.connected
    frames = upstream.sockets[0].frames
    assert [f.text for f in frames] == [create_frame(TURN1), create_frame(TURN2)]
    # The body's fields, unchanged and in order, after the frame's type.
    assert list(frames[0].json().items()) == [
        ("type", "response.create"),
        *{**TURN1_REQUEST, "stream": True}.items(),
    ]
    await socket.aclose()
    recorded = upstream.sockets[0]
    await closed(recorded)
    assert recorded.closed_by_client and recorded.close_code == 1000


async def test_the_handshake_carries_proxais_headers_the_clients_beta_and_no_extension(
    start: Callable[..., Any],
) -> None:
    upstream = await start([SocketScript.events(TURN2_EVENTS)])
    base = upstream.base_url.replace("/v1", "/gateway/v1")
    socket = socket_to(base, config={"headers": {"x-tenant": "t1"}})
    await turn(socket, TURN2, query=b"api-version=2")
    recorded = upstream.sockets[0]
    assert recorded.target == "/gateway/v1/responses?api-version=2"
    assert recorded.header("authorization") == "Bearer sk-upstream"  # never the client's
    assert recorded.header("openai-beta") == "responses_websockets=2026-02-06"
    assert recorded.header("originator") == "codex_cli_rs"
    assert recorded.header("x-tenant") == "t1"
    assert recorded.header("host") == f"127.0.0.1:{upstream.port}"
    # The client's socket's own headers stay with it; proxai offers no compression.
    assert recorded.extensions == [] and recorded.header("sec-websocket-extensions") is None
    assert recorded.header("sec-websocket-key") != "dGhlIHNhbXBsZSBub25jZQ=="


async def test_a_frame_with_line_breaks_is_one_event_of_several_data_lines(
    start: Callable[..., Any],
) -> None:
    events = [json.dumps(e, indent=1).encode() for e in TURN2_EVENTS]
    assert all(b"\n" in e for e in events)
    upstream = await start([SocketScript.events(events)])
    _, body = await turn(socket_to(upstream.base_url), TURN2)
    frames = SSEFramer().feed(body)
    assert [f.data for f in frames] == events  # the frame's text, byte for byte
    assert [f.event for f in frames] == [e["type"] for e in TURN2_EVENTS]


async def test_pings_are_answered_while_a_response_is_read(start: Callable[..., Any]) -> None:
    script = SocketScript((Ping(b"are you there"), *SocketScript.events(TURN2_EVENTS).steps))
    upstream = await start([script])
    _, body = await turn(socket_to(upstream.base_url), TURN2)
    assert body == turn_bytes(TURN2_EVENTS)
    assert upstream.sockets[0].pongs == [b"are you there"]


# -- failures before the first event ----------------------------------------------------


async def test_a_request_level_error_frame_is_its_status_with_its_headers(
    start: Callable[..., Any],
) -> None:
    error = {"type": "rate_limit_error", "code": "rate_limit_exceeded", "message": "slow down"}
    limited = SocketScript.error(429, error, {"retry-after": "7", "x-request-id": "req_1"})
    upstream = await start([limited, SocketScript.events(TURN2_EVENTS)])
    socket = socket_to(upstream.base_url)
    reply, body = await turn(socket, TURN1)
    assert reply.status == 429
    headers = dict(reply.headers)
    assert headers[b"retry-after"] == b"7" and headers[b"x-request-id"] == b"req_1"
    assert content_type(reply) == b"application/json"
    assert json.loads(body) == {"error": error}
    # The request never ran: the socket is kept for the next one.
    reply, body = await turn(socket, TURN2)
    assert reply.status == 200 and body == turn_bytes(TURN2_EVENTS)
    assert socket.connections_opened == 1


async def test_a_refused_handshake_is_its_status_and_body_and_the_next_turn_reconnects(
    start: Callable[..., Any],
) -> None:
    refusals = iter([Refuse(401, body=b'{"error":{"message":"bad key"}}'), None])
    upstream = await start(
        [SocketScript.events(TURN2_EVENTS)], refuse=lambda socket: next(refusals)
    )
    socket = socket_to(upstream.base_url)
    reply, body = await turn(socket, TURN1)
    assert reply.status == 401 and body == b'{"error":{"message":"bad key"}}'
    assert content_type(reply) == b"application/json" and not socket.connected
    reply, body = await turn(socket, TURN2)
    assert reply.status == 200 and len(upstream.sockets) == 2


async def test_no_listener_is_upstream_unreachable() -> None:
    listener = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    port = listener.socket.getsockname()[1]
    await listener.aclose()
    socket = socket_to(f"http://127.0.0.1:{port}/v1")
    with pytest.raises(ProxyError) as raised:
        await turn(socket, TURN1)
    assert raised.value.status == 502 and raised.value.code == "upstream_unreachable"
    assert raised.value.kind is OutcomeKind.UPSTREAM_UNREACHABLE


async def test_a_connection_that_never_comes_is_a_connect_timeout(
    autojump_clock: MockClock,
) -> None:
    async def never(host: str, port: int) -> trio.abc.Stream:
        await trio.sleep_forever()
        raise AssertionError

    socket = socket_to("http://upstream.test/v1", open_stream=never)
    with pytest.raises(ProxyError) as raised:
        await turn(socket, TURN1)
    assert raised.value.code == "upstream_connect_timeout"
    assert trio.current_time() == TIMEOUTS.connect


@pytest.mark.parametrize("ending", [Close(), Reset(), CloseFrame(1011, "overloaded")])
async def test_a_socket_ended_before_any_event_is_a_502(
    start: Callable[..., Any], ending: Close | Reset | CloseFrame
) -> None:
    upstream = await start([SocketScript((ending,))])
    with pytest.raises(ProxyError) as raised:
        await turn(socket_to(upstream.base_url), TURN1)
    assert raised.value.status == 502
    assert raised.value.code in {"upstream_closed", "upstream_reset"}


# -- failures mid-response --------------------------------------------------------------


@pytest.mark.parametrize("ending", [Close(), Reset(), CloseFrame(1011, "overloaded")])
async def test_a_socket_ended_mid_response_breaks_the_body_and_the_next_turn_reconnects(
    start: Callable[..., Any], ending: Close | Reset | CloseFrame
) -> None:
    upstream = await start(
        [SocketScript.events(TURN1_EVENTS[:3], then=[ending]), SocketScript.events(TURN2_EVENTS)]
    )
    socket = socket_to(upstream.base_url)
    received: list[bytes] = []
    with pytest.raises(UpstreamBroken):
        async with socket.open("GET", b"/v1/responses", b"", CLIENT_HEADERS, TURN1) as reply:
            async for chunk in chunks_of(reply):
                received.append(chunk)
    assert b"".join(received) == turn_bytes(TURN1_EVENTS[:3]) and not socket.connected
    reply, body = await turn(socket, TURN2)
    assert body == turn_bytes(TURN2_EVENTS) and socket.connections_opened == 2


async def test_leaving_before_the_terminal_event_closes_the_socket_and_the_next_turn_reconnects(
    start: Callable[..., Any],
) -> None:
    upstream = await start(
        [SocketScript.events(TURN1_EVENTS[:3], then=[Stall()]), SocketScript.events(TURN2_EVENTS)]
    )
    socket = socket_to(upstream.base_url)
    async with socket.open("GET", b"/v1/responses", b"", CLIENT_HEADERS, TURN1) as reply:
        chunks = chunks_of(reply)
        for _ in range(3):
            await anext(chunks)
    assert not socket.connected
    recorded = upstream.sockets[0]
    await closed(recorded)
    assert recorded.closed_by_client and recorded.close_code is None  # cut, not closed politely
    _, body = await turn(socket, TURN2)
    assert body == turn_bytes(TURN2_EVENTS) and len(upstream.sockets) == 2


async def test_a_kept_socket_the_upstream_closed_between_turns_is_replaced_once(
    start: Callable[..., Any],
) -> None:
    upstream = await start(
        [
            SocketScript.events(TURN1_EVENTS, then=[CloseFrame(1001, "going away")]),
            SocketScript.events(TURN2_EVENTS),
        ]
    )
    socket = socket_to(upstream.base_url)
    await turn(socket, TURN1)
    await closed(upstream.sockets[0])
    reply, body = await turn(socket, TURN2)
    assert reply.status == 200 and body == turn_bytes(TURN2_EVENTS)
    assert socket.connections_opened == 2 and len(upstream.frames) == 2


async def test_a_socket_past_its_time_limit_is_replaced_and_the_request_sent_again(
    start: Callable[..., Any],
) -> None:
    limit = {"code": "websocket_connection_limit_reached", "message": "60 minutes"}
    upstream = await start(
        [
            SocketScript.events(TURN1_EVENTS),
            SocketScript.error(400, limit),
            SocketScript.events(TURN2_EVENTS),
        ]
    )
    socket = socket_to(upstream.base_url)
    await turn(socket, TURN1)
    reply, body = await turn(socket, TURN2)
    assert reply.status == 200 and body == turn_bytes(TURN2_EVENTS)
    assert [f.socket.index for f in upstream.frames] == [0, 0, 1]


async def test_a_message_over_the_bound_ends_the_body(start: Callable[..., Any]) -> None:
    big = socket_frame({"type": "response.output_text.delta", "delta": "x" * 5000})
    upstream = await start([SocketScript((Send(socket_frame(TURN1_EVENTS[0])), Send(big)))])
    socket = socket_to(upstream.base_url, max_message_bytes=4096)
    received: list[bytes] = []
    with pytest.raises(EventTooLarge, match="over 4096 bytes"):
        async with socket.open("GET", b"/v1/responses", b"", CLIENT_HEADERS, TURN1) as reply:
            async for chunk in chunks_of(reply):
                received.append(chunk)
    assert received == [turn_bytes(TURN1_EVENTS[:1])]  # nothing of the one too large
    assert not socket.connected


async def test_a_binary_message_mid_response_breaks_the_body(start: Callable[..., Any]) -> None:
    upstream = await start([SocketScript.events(TURN1_EVENTS[:1], then=[Binary(b"\x00")])])
    socket = socket_to(upstream.base_url)
    with pytest.raises(UpstreamBroken, match="binary"):
        await turn(socket, TURN1)


# -- TLS --------------------------------------------------------------------------------


@pytest.fixture
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def ca_file(ca: trustme.CA, tmp_path: Path) -> str:
    path = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return str(path)


def server_context(ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    return context


async def test_an_https_upstream_is_a_wss_socket_verified_against_its_ca_bundle(
    start: Callable[..., Any], ca: trustme.CA, ca_file: str
) -> None:
    upstream = await start([SocketScript.events(TURN2_EVENTS)], ssl_context=server_context(ca))
    assert upstream.base_url.startswith("https://")
    socket = socket_to(upstream.base_url, config={"ca_bundle": ca_file})
    reply, body = await turn(socket, TURN2)
    assert reply.status == 200 and body == turn_bytes(TURN2_EVENTS)


async def test_an_untrusted_certificate_is_upstream_unreachable(
    start: Callable[..., Any], ca: trustme.CA
) -> None:
    upstream = await start([SocketScript.events(TURN2_EVENTS)], ssl_context=server_context(ca))
    with pytest.raises(ProxyError) as raised:
        await turn(socket_to(upstream.base_url), TURN2)
    assert raised.value.code == "upstream_unreachable"
    assert "CERTIFICATE_VERIFY_FAILED" in raised.value.message
    # verify = false skips it, as over HTTP.
    reply, _ = await turn(socket_to(upstream.base_url, config={"verify": False}), TURN2)
    assert reply.status == 200


# -- under the real relay, on the virtual clock -----------------------------------------


def relay_exchange(socket: UpstreamSocket, body: bytes) -> Exchange:
    """A Responses request whose one upstream is ``socket``, observed as over HTTP."""
    api = API_BY_WIRE[WireApi.RESPONSES]
    target = UpstreamTarget(
        socket,
        TIMEOUTS,
        body,
        observer_factory=lambda t: api.observer(t, None, StreamLimits()),
    )
    return Exchange(
        ProxiedRequest("GET", "/v1/responses", b"/v1/responses", b"", CLIENT_HEADERS),
        {"up": target},
        RetryPlan(["up"], RetriesConfig()),
        TIMEOUTS,
        max_event_bytes=4096,
    )


@pytest.fixture
async def in_memory(nursery: trio.Nursery) -> AsyncIterator[Callable[..., Any]]:
    """``in_memory(scripts)``: a scripted upstream and a socket to it, in memory."""

    async def make(scripts: Sequence[SocketScript]) -> tuple[ScriptedSocketUpstream, Any]:
        upstream = ScriptedSocketUpstream(scripts)
        await nursery.start(upstream.serve)
        socket = socket_to(
            "http://upstream.test/v1", open_stream=upstream.open_stream, max_message_bytes=4096
        )
        return upstream, socket

    yield make


async def test_turns_through_the_relay_complete_over_one_socket(
    autojump_clock: MockClock, in_memory: Callable[..., Any]
) -> None:
    upstream, socket = await in_memory(
        [SocketScript.events(TURN1_EVENTS, delay=0.5), SocketScript.events(TURN2_EVENTS)]
    )
    for body, events in ((TURN1, TURN1_EVENTS), (TURN2, TURN2_EVENTS)):
        downstream = FakeDownstream()
        outcome = await Relay(relay_exchange(socket, body), downstream).run()
        assert outcome.kind is OutcomeKind.COMPLETED and outcome.aggregates_match is True
        assert downstream.head is not None and downstream.head[0] == 200
        assert downstream.body == turn_bytes(events) and downstream.ended
    assert len(upstream.sockets) == 1 and socket.connected


async def test_a_stall_mid_arguments_through_the_relay_ends_with_the_protocols_error_and_lets_go(
    autojump_clock: MockClock, in_memory: Callable[..., Any]
) -> None:
    upstream, socket = await in_memory(
        [SocketScript.events(TURN1_EVENTS[:6], then=[Stall()]), SocketScript.events(TURN2_EVENTS)]
    )
    downstream = FakeDownstream()
    outcome = await Relay(relay_exchange(socket, TURN1), downstream).run()
    sent = turn_bytes(TURN1_EVENTS[:6])
    assert downstream.body.startswith(sent) and downstream.ended
    error, failed = (json.loads(f.data or b"") for f in data_frames(downstream.body[len(sent) :]))
    assert error["code"] == "upstream_timeout" and failed["type"] == "response.failed"
    assert outcome.kind is OutcomeKind.STALLED_TOOL_ARGUMENTS
    cut_at = TIMEOUTS.tool_arguments  # the call's last progress was at 0
    recorded = upstream.sockets[0]
    closed_at = await closed(recorded)
    assert recorded.closed_by_client and closed_at - cut_at < 0.1
    assert not socket.connected
    # The next response goes over a new socket.
    downstream = FakeDownstream()
    outcome = await Relay(relay_exchange(socket, TURN2), downstream).run()
    assert outcome.kind is OutcomeKind.COMPLETED and len(upstream.sockets) == 2


async def test_a_client_gone_mid_response_closes_the_upstream_socket_at_once(
    autojump_clock: MockClock, in_memory: Callable[..., Any]
) -> None:
    upstream, socket = await in_memory([SocketScript.events(TURN1_EVENTS[:3], then=[Stall()])])
    downstream = FakeDownstream()
    relay = Relay(relay_exchange(socket, TURN1), downstream)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(relay.run)
        await trio.sleep(3.0)
        downstream.hung_up.set()
    assert relay.outcome.kind is OutcomeKind.CLIENT_DISCONNECTED
    closed_at = await closed(upstream.sockets[0])
    assert closed_at - 3.0 < 0.1 and not socket.connected


async def test_an_error_frame_through_the_relay_is_the_http_error_the_client_gets(
    autojump_clock: MockClock, in_memory: Callable[..., Any]
) -> None:
    error = {"type": "invalid_request_error", "code": "previous_response_not_found"}
    _, socket = await in_memory([SocketScript.error(400, error)])
    downstream = FakeDownstream()
    outcome = await Relay(relay_exchange(socket, TURN2), downstream).run()
    assert downstream.head is not None and downstream.head[0] == 400
    assert json.loads(downstream.body) == {"error": error}
    assert outcome.kind is OutcomeKind.UPSTREAM_ERROR and socket.connected


async def test_a_message_over_max_event_bytes_through_the_relay_is_an_event_too_large(
    autojump_clock: MockClock, in_memory: Callable[..., Any]
) -> None:
    big = socket_frame({"type": "response.output_text.delta", "delta": "x" * 5000})
    upstream, socket = await in_memory(
        [SocketScript((Send(socket_frame(TURN1_EVENTS[0])), Send(big), Stall()))]
    )
    downstream = FakeDownstream()
    outcome = await Relay(relay_exchange(socket, TURN1), downstream).run()
    assert outcome.kind is OutcomeKind.UPSTREAM_EVENT_TOO_LARGE
    assert downstream.body.startswith(turn_bytes(TURN1_EVENTS[:1])) and downstream.ended
    await closed(upstream.sockets[0])
    assert not socket.connected


STREAM_ERROR = {"type": "error", "sequence_number": 3, "code": "server_error", "message": "boom"}


async def test_a_stream_error_is_an_event_and_its_response_failed_ends_the_response(
    start: Callable[..., Any],
) -> None:
    failed = {"type": "response.failed", "sequence_number": 4, "response": {"id": "resp_01"}}
    events = [*TURN1_EVENTS[:3], STREAM_ERROR, failed]
    upstream = await start([SocketScript.events(events), SocketScript.events(TURN2_EVENTS)])
    socket = socket_to(upstream.base_url)
    reply, body = await turn(socket, TURN1)
    # The API follows a stream's error with response.failed: both belong to this response.
    assert reply.status == 200 and body == turn_bytes(events) and socket.connected
    _, body = await turn(socket, TURN2)
    assert body == turn_bytes(TURN2_EVENTS) and socket.connections_opened == 1


async def test_a_stream_error_with_nothing_after_it_lets_go_of_the_socket_after_the_grace(
    autojump_clock: MockClock, in_memory: Callable[..., Any]
) -> None:
    upstream, socket = await in_memory(
        [SocketScript.events([*TURN1_EVENTS[:3], STREAM_ERROR], then=[Stall()])]
    )
    downstream = FakeDownstream()
    outcome = await Relay(relay_exchange(socket, TURN1), downstream).run()
    assert downstream.body == turn_bytes([*TURN1_EVENTS[:3], STREAM_ERROR])
    assert outcome.kind is OutcomeKind.FAILED
    # Whatever else the upstream says of it must not be read as the next response's.
    closed_at = await closed(upstream.sockets[0])
    assert closed_at == AFTER_TERMINAL_GRACE and not socket.connected


async def test_one_response_at_a_time_and_a_bad_body_leaves_the_socket_usable(
    start: Callable[..., Any],
) -> None:
    upstream = await start([SocketScript.events(TURN1_EVENTS[:3], then=[Stall()])])
    socket = socket_to(upstream.base_url)
    with pytest.raises(TypeError):
        await turn(socket, b"[]")
    async with socket.open("GET", b"/v1/responses", b"", CLIENT_HEADERS, TURN1):
        with pytest.raises(RuntimeError, match="one response at a time"):
            await turn(socket, TURN2)
    assert len(upstream.frames) == 1
