"""Upstream connections: reused one after another, spread over the pools when concurrent."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from proxai.testing import Script
from proxai.testing.seed import TURN1_EVENTS, TURN1_REQUEST, turn_bytes

TURN1 = turn_bytes(TURN1_EVENTS)


async def test_sequential_requests_reuse_one_upstream_connection(
    start_upstream: Any, proxai_for: Any
) -> None:
    """Spreading busy traffic over several pools must not cost a light load its warm
    connection (a new TLS handshake per request, upstream)."""
    import httpx

    upstream = await start_upstream([Script.sse([TURN1])])
    async with proxai_for(upstream) as px, httpx.AsyncClient() as client:
        for _ in range(10):
            response = await client.post(px.base_url + "/responses", json=TURN1_REQUEST)
            assert response.content == TURN1
    assert upstream.connections_opened == 1


async def test_concurrent_requests_spread_over_pools() -> None:
    from proxai.config import TimeoutsConfig, UpstreamConfig
    from proxai.errors import ProxyError
    from proxai.upstream.client import SHARD_REQUESTS, UpstreamClient

    client = UpstreamClient(UpstreamConfig(base_url="http://127.0.0.1:9/v1"), TimeoutsConfig())
    seen: list[list[int]] = []

    async def hold() -> None:
        with pytest.raises(ProxyError):  # nothing listens on port 9: the attempt fails
            async with client.open("GET", b"/v1/models", b"", [], b""):
                pass

    original = client._send

    def spy(*args: Any) -> Any:
        seen.append(list(client._busy))
        return original(*args)

    client._send = spy  # type: ignore[method-assign]
    async with trio.open_nursery() as nursery:
        for _ in range(SHARD_REQUESTS * 2 + 1):
            nursery.start_soon(hold)
    await client.aclose()
    last = seen[-1]
    assert last[0] == SHARD_REQUESTS and last[1] == SHARD_REQUESTS and last[2] == 1
    assert client._busy == [0] * len(client._busy)  # every request gave its slot back
