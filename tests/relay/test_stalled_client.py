"""Clients that stop reading but stay connected, on real loopback sockets (issue 13, item 2).

A client that requests a large stream and never reads fills its receive window; proxai's
write to it then blocks inside hypercorn's shielded send, which the app cannot cancel.
The kernel closes such a connection (``TCP_USER_TIMEOUT``, from ``timeouts.client_write``),
and with it go the request's slot, its tasks and its memory.
"""

from __future__ import annotations

import json
import math
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
import trio
from trio.testing import MockClock

from proxai.config_file import load_config
from proxai.outcome import OutcomeKind
from proxai.service.server import bind_sockets, hypercorn_config
from proxai.testing import RecordedRequest, Script, Send, Sleep, sse_event
from proxai.testing.memory_proxy import MEMORY_TIMEOUTS, MemoryProxy
from proxai.testing.seed import TURN1_REQUEST
from tests.helpers import metric

linux_only = pytest.mark.skipif(
    not hasattr(socket, "TCP_USER_TIMEOUT"), reason="TCP_USER_TIMEOUT is Linux-only"
)

CLIENT_WRITE = 1.0
#: The issue's bound is the slot free within client_write + 1 s of the client's last read.
#: The kernel's timer is real, and these tests count from the upstream's request (before
#: the client's window has filled) on a machine that may be loaded: they allow 4 s more.
#: What they show is that the kernel ends the connection at all (without TCP_USER_TIMEOUT
#: nothing would: hypercorn's write is shielded); the instants are on a virtual clock below.
BOUND = CLIENT_WRITE + 5.0
#: A stream far larger than every buffer between proxai and a client that does not read.
BIG_EVENT = sse_event({"choices": [{"index": 0, "delta": {"content": "x" * 2000}}]}, event="")
BIG_STREAM = Script.sse([BIG_EVENT] * 2500 + [b"data: [DONE]\n\n"])  # ~5 MB
SMALL_STREAM = Script.sse([sse_event({"choices": []}, event=""), b"data: [DONE]\n\n"])


def big_or_small(request: RecordedRequest) -> Script:
    return BIG_STREAM if request.json()["model"] == "big" else SMALL_STREAM


def chat_request(model: str) -> bytes:
    return json.dumps({"model": model, "stream": True, "messages": []}).encode()


@asynccontextmanager
async def client_that_never_reads(url: str) -> AsyncIterator[trio.socket.SocketType]:
    """A raw client with a tiny receive window: it sends a request for the big stream and
    reads nothing."""
    host, port = url.removeprefix("http://").split(":")
    sock = trio.socket.socket()
    with sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: the window
        await sock.connect((host, int(port)))
        body = chat_request("big")
        head = (
            f"POST /v1/chat/completions HTTP/1.1\r\nhost: {host}:{port}\r\n"
            f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
        )
        await sock.send(head.encode() + body)
        yield sock


async def read_until_closed(sock: trio.socket.SocketType) -> None:
    """Read what the client was sent until the connection ends (EOF or reset)."""
    try:
        while await sock.recv(65536):
            pass
    except ConnectionError:
        pass


@linux_only
async def test_a_client_that_stops_reading_loses_its_slot(
    start_upstream: Any, proxai_for: Any
) -> None:
    upstream = await start_upstream(big_or_small)
    tables: dict[str, Any] = {
        "server": {"max_concurrent_streams": 2},
        "timeouts": {"client_write": CLIENT_WRITE},
    }
    async with (
        proxai_for(upstream, **tables) as px,
        httpx.AsyncClient() as http,
        client_that_never_reads(px.url) as first,
        client_that_never_reads(px.url) as second,
    ):
        await upstream.wait_for_requests(2)
        started = trio.current_time()
        small = {"content": chat_request("small"), "headers": {"content-type": "application/json"}}
        busy = await http.post(px.base_url + "/chat/completions", **small)
        assert busy.status_code == 503  # both slots are held by the clients that do not read
        with trio.fail_at(started + BOUND):
            stalled = await px.wait_for_outcomes(3)
        metrics = (await http.get(px.url + "/metrics")).text
        after = await http.post(px.base_url + "/chat/completions", **small)
        assert after.status_code == 200  # a new request gets the slot
        # The clients' connections were closed: reading now ends, after what was buffered.
        with trio.fail_after(5):
            await read_until_closed(first)
            await read_until_closed(second)
    kinds = sorted(o.kind.value for o in stalled if o.kind is not OutcomeKind.OVERLOADED)
    assert kinds == ["client_stalled", "client_stalled"]
    assert metric(metrics, "proxai_in_flight_requests") == 0
    assert metric(metrics, "proxai_requests_total", outcome="client_stalled") == 2


# The kernel can close a stalled client before proxai's own client_write count ends: the
# kernel counts from the client's last acknowledgement, proxai from when a write began to
# wait, once the socket's send buffer was full. In memory, on a virtual clock: a client
# that takes one write, then none, and whose connection ends ``after`` seconds later.

TICKS = Script(steps=[step for _ in range(10_000) for step in (Send(b": tick\n\n"), Sleep(0.1))])


async def leaves_without_reading(after: float) -> tuple[OutcomeKind | None, str | None]:
    async with MemoryProxy([TICKS]) as proxy:
        exchange = await proxy.request(
            TURN1_REQUEST,
            read_delay=lambda n: math.inf if n >= 1 else 0.0,
            disconnect_after=after,
        )
    assert exchange.outcome is not None
    return exchange.outcome.kind, exchange.outcome.detail


async def test_a_connection_that_ends_after_a_write_waited_half_of_client_write_is_a_stall(
    autojump_clock: MockClock,
) -> None:
    kind, detail = await leaves_without_reading(MEMORY_TIMEOUTS["client_write"] * 0.6)
    assert kind is OutcomeKind.CLIENT_STALLED
    assert detail is not None and "a write to it had waited 299.9 s" in detail


async def test_a_client_that_hangs_up_soon_after_it_stopped_reading_is_a_disconnect(
    autojump_clock: MockClock,
) -> None:
    kind, _ = await leaves_without_reading(MEMORY_TIMEOUTS["client_write"] * 0.4)
    assert kind is OutcomeKind.CLIENT_DISCONNECTED


@linux_only
def test_proxais_listening_sockets_pass_client_write_to_the_sockets_they_accept() -> None:
    config = load_config(
        None,
        overrides={
            "upstream": {"base_url": "http://127.0.0.1:9/v1"},
            "server": {"host": "127.0.0.1", "port": 0},
            "timeouts": {"client_write": 2.5},
        },
    )
    sockets = bind_sockets(config, hypercorn_config(config))  # what serve and --workers use
    [listener] = sockets.insecure_sockets
    with listener, socket.create_connection(listener.getsockname()[:2]):
        accepted, _ = listener.accept()
        with accepted:
            option = accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT)
    assert option == 2500  # milliseconds
