"""What crosses between client and upstream besides the body: request ids, cookies,
query credentials."""

from __future__ import annotations

from typing import Any

import httpx
from trio.testing import MockClock

from proxai.testing import Script
from proxai.testing.memory_proxy import MemoryProxy
from proxai.testing.seed import TURN1_EVENTS, TURN1_REQUEST, turn_bytes
from proxai.wire.query import query_for_upstream

TURN1 = turn_bytes(TURN1_EVENTS)


async def test_an_upstream_request_id_is_replaced_by_proxais(autojump_clock: MockClock) -> None:
    script = Script.sse(
        [TURN1],
        headers=(
            ("content-type", "text/event-stream"),
            ("x-proxai-request-id", "req_from_another_proxai"),
        ),
    )
    async with MemoryProxy([script]) as proxy:
        exchange = await proxy.request(TURN1_REQUEST)
    ids = [v for n, v in exchange.headers if n == b"x-proxai-request-id"]
    assert len(ids) == 1 and ids[0].decode() == exchange.outcome.request_id  # type: ignore[union-attr]


async def test_an_upstream_cookie_is_never_replayed_on_other_requests(
    start_upstream: Any, proxai_for: Any
) -> None:
    import httpx

    cookie = Script.sse(
        [TURN1],
        headers=(
            ("content-type", "text/event-stream"),
            ("set-cookie", "__cf_bm=abc123; path=/; HttpOnly"),
        ),
    )
    upstream = await start_upstream([cookie, Script.sse([TURN1])])
    async with proxai_for(upstream) as px, httpx.AsyncClient() as first:
        one = await first.post(px.base_url + "/responses", json=TURN1_REQUEST)
        async with httpx.AsyncClient() as second:
            await second.post(px.base_url + "/responses", json=TURN1_REQUEST)
    assert one.headers["set-cookie"].startswith("__cf_bm=abc123")  # relayed to its client
    assert upstream.requests[1].header("cookie") is None  # not kept by proxai


async def test_credentials_in_the_query_string_are_not_forwarded_upstream(
    start_upstream: Any, proxai_for: Any
) -> None:
    upstream = await start_upstream([Script.json({"data": []})])
    async with proxai_for(upstream) as px, httpx.AsyncClient() as client:
        response = await client.get(
            px.base_url + "/models?key=sk-client&limit=2&API_KEY=x&%6Bey=y&api-key=z&after=k"
        )
    assert response.status_code == 200
    (request,) = upstream.requests
    assert request.target == "/v1/models?limit=2&after=k"
    assert request.header("authorization") == "Bearer sk-upstream-test"


def test_only_credential_parameters_are_dropped_from_the_upstream_query() -> None:
    query = b"keyword=a&key&monkey=1&KEY=2&x=%6Bey&%6bey=3&api-version=2024-10-21"
    assert query_for_upstream(query) == b"keyword=a&monkey=1&x=%6Bey&api-version=2024-10-21"
    assert query_for_upstream(b"limit=2&after=a%26b") == b"limit=2&after=a%26b"
