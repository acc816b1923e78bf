"""The lean h11 transport on its own: reuse only after a whole exchange, httpx's errors."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import trio

from proxai.testing import Close, Script, Send, Stall
from proxai.upstream.h11_transport import H11Transport


def transport() -> H11Transport:
    return H11Transport(max_keepalive_connections=4, keepalive_expiry=30.0)


async def get(client: httpx.AsyncClient, url: str) -> httpx.Response:
    return await client.post(url + "/responses", content=b"{}")


async def test_a_connection_is_reused_after_a_whole_response(start_upstream: Any) -> None:
    upstream = await start_upstream([Script.json({"n": i}) for i in range(3)])
    async with httpx.AsyncClient(transport=transport()) as client:
        bodies = [(await get(client, upstream.base_url)).json() for _ in range(3)]
    assert bodies == [{"n": 0}, {"n": 1}, {"n": 2}]
    assert upstream.connections_opened == 1


async def test_a_response_left_unread_closes_its_connection(start_upstream: Any) -> None:
    upstream = await start_upstream(
        [Script.sse([b"data: 1\n\n"], then=[Stall()]), Script.json({"ok": True})]
    )
    async with httpx.AsyncClient(transport=transport()) as client:
        async with client.stream("POST", upstream.base_url + "/responses", content=b"{}") as r:
            async for chunk in r.aiter_raw():
                assert chunk == b"data: 1\n\n"
                break
        with trio.fail_after(5):
            await upstream.wait_open_connections(0)
        second = await get(client, upstream.base_url)
    assert second.json() == {"ok": True}
    assert upstream.connections_opened == 2


async def test_a_server_that_closes_before_answering_is_a_remote_protocol_error(
    start_upstream: Any,
) -> None:
    upstream = await start_upstream([Script(before_head=[Close()])])
    async with httpx.AsyncClient(transport=transport()) as client:
        with pytest.raises(httpx.RemoteProtocolError):
            await get(client, upstream.base_url)


async def test_a_body_cut_short_is_a_remote_protocol_error(start_upstream: Any) -> None:
    upstream = await start_upstream([Script.sse([b"data: 1\n\n"], then=[Close()])])
    url = upstream.base_url + "/responses"
    async with (
        httpx.AsyncClient(transport=transport()) as client,
        client.stream("POST", url, content=b"{}") as response,
    ):
        with pytest.raises(httpx.RemoteProtocolError):
            async for _ in response.aiter_raw():
                pass


async def test_nothing_listening_is_a_connect_error() -> None:
    with trio.socket.socket() as sock:
        await sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    async with httpx.AsyncClient(transport=transport()) as client:
        with pytest.raises(httpx.ConnectError):
            await client.get(f"http://127.0.0.1:{port}/v1/models")


async def test_https_is_not_its_job() -> None:
    async with httpx.AsyncClient(transport=transport()) as client:
        with pytest.raises(httpx.UnsupportedProtocol):
            await client.get("https://127.0.0.1:1/v1/models")


async def test_a_request_bodys_bytes_reach_the_upstream(start_upstream: Any) -> None:
    upstream = await start_upstream([Script(steps=[Send(b"ok")])])
    async with httpx.AsyncClient(transport=transport()) as client:
        response = await client.post(upstream.base_url + "/chat/completions", content=b"x" * 70000)
    assert response.content == b"ok"
    (request,) = upstream.requests
    assert request.body == b"x" * 70000
    assert request.target == "/v1/chat/completions"
