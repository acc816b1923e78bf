"""Request targets proxai refuses (a fragment, bytes beyond ASCII): a 400 in the client
API's shape, sent nowhere."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import trio
from trio.testing import MockClock

from proxai.testing import Script
from proxai.testing.memory_proxy import MemoryProxy


async def raw_exchange(url: str, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send ``request`` as is on a fresh connection; the status, headers and body of the
    answer (proxai's own answers carry a ``content-length``)."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    stream = await trio.open_tcp_stream(host, int(port))
    async with stream:
        await stream.send_all(request)
        data = b""
        with trio.fail_after(5):
            while b"\r\n\r\n" not in data or len(data.partition(b"\r\n\r\n")[2]) < int(
                dict(_head_lines(data)).get("content-length", "0")
            ):
                chunk = await stream.receive_some()
                if not chunk:
                    break
                data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), dict(_head_lines(data)), body


def _head_lines(data: bytes) -> Iterator[tuple[str, str]]:
    head = data.partition(b"\r\n\r\n")[0].decode("latin-1")
    for line in head.split("\r\n")[1:]:
        name, _, value = line.partition(":")
        yield name.strip().lower(), value.strip()


@pytest.mark.parametrize("target", [b"/v1/models#frag", b"/v1/models?limit=2#frag"])
async def test_a_target_with_a_fragment_is_a_400_in_openais_shape_and_goes_nowhere(
    start_upstream: Any, proxai_for: Any, target: bytes
) -> None:
    upstream = await start_upstream([Script.json({"data": []})])
    async with proxai_for(upstream) as px:
        status, headers, body = await raw_exchange(
            px.url, b"GET " + target + b" HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n"
        )
        (outcome,) = await px.wait_for_outcomes(1)
    assert status == 400
    error = json.loads(body)["error"]
    assert error["type"] == "invalid_request_error" and error["code"] == "invalid_request_target"
    assert "#" in error["message"]
    assert headers["x-proxai-request-id"] == outcome.request_id
    assert outcome.kind == "proxy_error" and outcome.status == 400
    assert upstream.requests == []


async def test_a_target_with_bytes_beyond_ascii_is_a_400_too(autojump_clock: MockClock) -> None:
    """HTTP/1.1 servers refuse them; an HTTP/2 ``:path`` can carry them to the app."""
    async with MemoryProxy([Script.json({"data": []})]) as proxy:
        exchange = await proxy.request(b"", method="GET", path="/v1/mod\u00e9ls")
    assert exchange.status == 400
    assert exchange.json()["error"]["code"] == "invalid_request_target"
    assert proxy.transport.requests == []


async def test_a_fragment_on_the_messages_api_is_refused_in_anthropics_shape(
    start_upstream: Any, proxai_for: Any
) -> None:
    upstream = await start_upstream([Script.json({"data": []})])
    body = b'{"model":"claude-x","max_tokens":5,"messages":[]}'
    async with proxai_for(upstream, upstream={"protocol": "anthropic_messages"}) as px:
        status, _, answer = await raw_exchange(
            px.url,
            b"POST /v1/messages#frag HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n"
            b"content-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(body) + body,
        )
    assert status == 400
    assert json.loads(answer)["type"] == "error"
    assert json.loads(answer)["error"]["type"] == "invalid_request_error"
    assert upstream.requests == []
