"""The Responses WebSocket mode on real sockets: hypercorn serving proxai on loopback,
the official openai SDK's ``client.responses.connect()`` as the client, a scripted HTTP
upstream (Responses, or Chat-only), and permessage-deflate bounded after inflation."""

from __future__ import annotations

import json
import socket
import threading
from typing import Any

import httpx
import trio
import wsproto
import wsproto.events as ws_events
from wsproto.extensions import PerMessageDeflate
from wsproto.frame_protocol import CloseReason

from proxai.outcome import OutcomeKind
from proxai.service.ws_deflate import BoundedDeflate
from proxai.testing.seed import (
    TURN1_EVENTS,
    TURN1_REQUEST,
    TURN2_EVENTS,
    TURN2_REQUEST,
    seed_responder,
)

from ..helpers import CHAT_UPSTREAM, metric, openai_client
from ..relay.test_stalled_client import (
    BOUND,
    CLIENT_WRITE,
    big_or_small,
    linux_only,
    read_until_closed,
)
from .test_websocket import chat_turns


def body(request: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in request.items() if k != "stream"}


def sdk_two_turns(url: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The seed's two turns over one socket, as an app writes them with the SDK: the
    second chains from the first's id with only the tool's output."""
    client = openai_client(url)
    turns: list[list[dict[str, Any]]] = []
    with client.responses.connect() as connection:
        previous: str | None = None
        for request in (TURN1_REQUEST, TURN2_REQUEST):
            fields = body(request)
            if previous is not None:
                fields["previous_response_id"] = previous
            connection.send({"type": "response.create", **fields})
            events: list[dict[str, Any]] = []
            for event in connection:
                events.append(event.to_dict())
                if event.type in ("response.completed", "response.failed", "error"):
                    break
            turns.append(events)
            previous = events[-1].get("response", {}).get("id")
    return turns[0], turns[1]


async def test_openai_sdk_connect_runs_the_seed_against_a_responses_upstream(
    start_upstream: Any, proxai_for: Any
) -> None:
    upstream = await start_upstream(seed_responder)
    async with proxai_for(upstream) as px:
        with trio.fail_after(30):
            first, second = await trio.to_thread.run_sync(sdk_two_turns, px.url)
            outcomes = await px.wait_for_outcomes(2)
    assert [e["type"] for e in first] == [e["type"] for e in TURN1_EVENTS]
    assert first[-1] == TURN1_EVENTS[-1]
    assert [e["type"] for e in second] == [e["type"] for e in TURN2_EVENTS]
    assert second[-1]["response"]["status"] == "completed"
    sent = [r.json() for r in upstream.requests]
    assert sent[1]["previous_response_id"] == "resp_01"  # the upstream keeps state
    turns = [o for o in outcomes if o.method == "response.create"]
    assert {o.transport for o in turns} == {"websocket"} and len(turns) == 2


async def test_openai_sdk_connect_runs_the_seed_against_a_chat_only_upstream(
    start_upstream: Any, proxai_for: Any
) -> None:
    """proxai holds the socket's conversation: the second turn goes to the Chat upstream
    with the whole context (the user's message, the call and its output)."""
    upstream = await start_upstream(chat_turns)
    async with proxai_for(upstream, upstream=CHAT_UPSTREAM) as px:
        with trio.fail_after(30):
            first, second = await trio.to_thread.run_sync(sdk_two_turns, px.url)
    assert first[-1]["type"] == "response.completed"
    calls = [i for i in first[-1]["response"]["output"] if i["type"] == "function_call"]
    assert calls and calls[0]["name"] == "get_weather"
    assert second[-1]["type"] == "response.completed"
    text = "".join(e["delta"] for e in second if e["type"] == "response.output_text.delta")
    assert text == "适合慢跑。"
    messages = upstream.requests[1].json()["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool"]


# -- permessage-deflate, bounded after inflation ------------------------------------------


async def _bomb(url: str, size: int) -> tuple[bool, int | None]:
    """Offer permessage-deflate, send one text message of ``size`` spaces (a few KB
    compressed); whether the server accepted the extension, and its close code."""
    host, port = url.removeprefix("http://").split(":")
    stream = await trio.open_tcp_stream(host, int(port))
    ws = wsproto.WSConnection(wsproto.ConnectionType.CLIENT)
    request = ws_events.Request(
        host=f"{host}:{port}",
        target="/v1/responses",
        extensions=[PerMessageDeflate()],
    )
    await stream.send_all(ws.send(request))
    deflate = False
    async with stream:
        while True:
            data = await stream.receive_some(65536)
            if not data:
                return deflate, None
            ws.receive_data(data)
            for event in ws.events():
                if isinstance(event, ws_events.AcceptConnection):
                    deflate = bool(event.extensions)
                    await stream.send_all(ws.send(ws_events.TextMessage(" " * size)))
                elif isinstance(event, ws_events.CloseConnection):
                    return deflate, event.code


async def test_a_compressed_message_past_the_limit_ends_the_connection(
    start_upstream: Any, proxai_for: Any
) -> None:
    """A deflate bomb (50 MB of spaces in ~50 KB) against a 1 MB limit: wsproto refuses
    it once inflated past the limit (1009, as the sans-io tests below show) and
    hypercorn drops the connection; nothing goes upstream and proxai serves on."""
    upstream = await start_upstream(seed_responder)
    server = {"max_request_body_bytes": 1_000_000}
    async with proxai_for(upstream, server=server) as px:
        with trio.fail_after(30):
            deflate, code = await _bomb(px.url, 50_000_000)
            # A message within the limit on a new socket: answered as usual.
            first, _ = await trio.to_thread.run_sync(sdk_two_turns, px.url)
    assert deflate, "the server took the client's permessage-deflate offer"
    # hypercorn sends no close frame for a message wsproto refuses: the TCP connection ends.
    assert code is None
    assert first[-1]["type"] == "response.completed"
    assert len(upstream.requests) == 2  # the second socket's turns only


def _deflate_pair(limit: int) -> tuple[wsproto.WSConnection, wsproto.WSConnection, BoundedDeflate]:
    """A client and a server that agreed on permessage-deflate in a real handshake, the
    server's side bounded."""
    client = wsproto.WSConnection(wsproto.ConnectionType.CLIENT)
    server = wsproto.WSConnection(wsproto.ConnectionType.SERVER)
    bounded = BoundedDeflate(limit)
    offer = ws_events.Request(host="x", target="/v1/responses", extensions=[PerMessageDeflate()])
    server.receive_data(client.send(offer))
    assert isinstance(next(server.events()), ws_events.Request)
    client.receive_data(server.send(ws_events.AcceptConnection(extensions=[bounded])))
    accepted = next(client.events())
    assert isinstance(accepted, ws_events.AcceptConnection) and accepted.extensions
    return client, server, bounded


def test_bounded_deflate_never_inflates_past_the_limit() -> None:
    """Sans-io: a 50 MB message compressed to ~50 KB, fed to the server side at once,
    is refused with 1009 having inflated at most the limit and one byte."""
    limit = 100_000
    client, server, bounded = _deflate_pair(limit)
    wire = client.send(ws_events.TextMessage("a" * 50_000_000))
    assert len(wire) < 100_000
    server.receive_data(wire)
    events = list(server.events())
    assert isinstance(events[-1], ws_events.CloseConnection)
    assert events[-1].code == CloseReason.MESSAGE_TOO_BIG
    assert bounded.largest_output <= limit + 1


def test_bounded_deflate_passes_messages_within_the_limit() -> None:
    limit = 100_000
    client, server, _ = _deflate_pair(limit)
    texts = ["x" * limit, '{"type": "response.create"}', "y" * 10]
    for text in texts:
        server.receive_data(client.send(ws_events.TextMessage(text)))
    got = [e.data for e in server.events() if isinstance(e, ws_events.TextMessage)]
    assert "".join(got) == "".join(texts)


def sdk_hold(url: str, opened: Any, release: Any) -> list[str]:
    """One turn over a socket, then the socket held open until ``release`` is set."""
    client = openai_client(url)
    with client.responses.connect() as connection:
        connection.send({"type": "response.create", **body(TURN1_REQUEST)})
        types = []
        for event in connection:
            types.append(event.type)
            if event.type == "response.completed":
                break
        opened.set()
        release.wait(20)
    return types


async def test_metrics_and_the_live_view_show_sockets(start_upstream: Any, proxai_for: Any) -> None:
    upstream = await start_upstream(seed_responder)
    opened, release = threading.Event(), threading.Event()
    async with (
        proxai_for(upstream, live_view={"enabled": True}) as px,
        httpx.AsyncClient() as http,
        trio.open_nursery() as nursery,
    ):
        with trio.fail_after(30):
            nursery.start_soon(trio.to_thread.run_sync, sdk_hold, px.url, opened, release)
            await trio.to_thread.run_sync(opened.wait, 20)
            # The SDK has read response.completed; proxai's end of the turn follows (no
            # fixed wait: until the live view shows it, or the fail_after above).
            while True:
                live = (await http.get(px.url + "/_proxai/streams")).json()
                if [s["in_response"] for s in live["sockets"]] == [False]:
                    break
                await trio.sleep(0.05)
            during = (await http.get(px.url + "/metrics")).text
            release.set()
            await px.wait_for_outcomes(2)  # the response and the upgrade's record
            after = (await http.get(px.url + "/metrics")).text
    (socket,) = live["sockets"]
    assert socket["socket_id"].startswith("ws_") and socket["responses"] == 1
    assert socket["in_response"] is False
    assert "proxai_websockets_open 1.0" in during
    assert "proxai_websockets_open 0.0" in after
    assert 'proxai_websocket_connections_total{result="accepted"} 1.0' in after
    requests = [line for line in after.splitlines() if line.startswith("proxai_requests_total{")]
    assert any('transport="websocket"' in line and line.endswith(" 1.0") for line in requests)


async def _socket_that_never_reads(url: str, model: str) -> trio.socket.SocketType:
    """A raw WebSocket client with a tiny receive window: it upgrades, sends one
    ``response.create`` and reads nothing more."""
    host, port = url.removeprefix("http://").split(":")
    sock = trio.socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: the window
    await sock.connect((host, int(port)))
    ws = wsproto.WSConnection(wsproto.ConnectionType.CLIENT)
    await sock.send(ws.send(ws_events.Request(host=f"{host}:{port}", target="/v1/responses")))
    accepted = False
    while not accepted:
        data = await sock.recv(65536)
        assert data, "the upgrade was refused"
        ws.receive_data(data)
        accepted = any(isinstance(e, ws_events.AcceptConnection) for e in ws.events())
    create = {"type": "response.create", "model": model, "input": "go"}
    await sock.send(ws.send(ws_events.TextMessage(json.dumps(create))))
    return sock


@linux_only
async def test_a_socket_client_that_stops_reading_is_cut_and_frees_its_slot(
    start_upstream: Any, proxai_for: Any
) -> None:
    """hypercorn shields its socket writes, so only the kernel can end a socket whose
    client stopped reading (``TCP_USER_TIMEOUT`` from ``client_write``, as over HTTP):
    the turn ends ``client_stalled``, the socket and the slot are freed, and the
    upstream is let go of, within ``client_write`` + 1 s."""
    upstream = await start_upstream(big_or_small)
    tables: dict[str, Any] = {
        "server": {"max_concurrent_streams": 1},
        "timeouts": {"client_write": CLIENT_WRITE},
    }
    async with proxai_for(upstream, upstream=CHAT_UPSTREAM, **tables) as px:
        sock = await _socket_that_never_reads(px.url, "big")
        with sock:
            await upstream.wait_for_requests(1)
            started = trio.current_time()
            with trio.fail_at(started + BOUND):
                outcomes = await px.wait_for_outcomes(2)  # the turn and the upgrade's record
            async with httpx.AsyncClient() as http:
                metrics = (await http.get(px.url + "/metrics")).text
            with trio.fail_after(5):
                await read_until_closed(sock)
        # The slot is free again: a new socket's turn is served.
        with trio.fail_after(30):
            first, _ = await trio.to_thread.run_sync(sdk_small_turn, px.url)
    (turn,) = [o for o in outcomes if o.method == "response.create"]
    assert turn.kind is OutcomeKind.CLIENT_STALLED
    assert metric(metrics, "proxai_websockets_open") == 0
    assert metric(metrics, "proxai_in_flight_requests") == 0
    assert first[-1] == "response.completed"


def sdk_small_turn(url: str) -> tuple[list[str], None]:
    client = openai_client(url)
    with client.responses.connect() as connection:
        connection.send({"type": "response.create", "model": "small", "input": "go"})
        types = []
        for event in connection:
            types.append(event.type)
            if event.type in ("response.completed", "response.failed", "error"):
                break
    return types, None
