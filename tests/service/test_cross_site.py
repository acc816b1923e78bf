"""No cross-site use of a local proxai: Origin, Sec-Fetch-Site, Host, CORS and methods.

A real proxai (hypercorn on a loopback port) in front of the scripted upstream,
with default settings unless a test says otherwise: every refusal happens before
the body is read, so the upstream must have seen nothing.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import httpx
import pytest
import trio

from proxai.config_file import load_config
from proxai.outcome import OutcomeKind
from proxai.service.server import serve
from proxai.testing import Script, ScriptedUpstream, sse_event
from proxai.testing.seed import TURN1_REQUEST

openai = pytest.importorskip("openai")

CHAT = "/chat/completions"
CHAT_REQUEST = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], "stream": True}
PAGE = "http://localhost:5173"  # a local dev server's page, allowed where a test says so
EVIL = "https://evil.example"
ALLOW = "GET, HEAD, POST, DELETE, OPTIONS"


def chat_stream(*extra_headers: tuple[str, str]) -> Script:
    chunk = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o"}
    events = [
        {**chunk, "choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": None}]},
        {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    ]
    return Script.sse(
        [*map(sse_event, events), b"data: [DONE]\n\n"],
        headers=(("content-type", "text/event-stream"), *extra_headers),
    )


# -- Origin and Sec-Fetch-Site -----------------------------------------------------------


async def test_a_cross_site_text_plain_post_is_refused_and_the_upstream_sees_nothing(
    start_upstream: Any, proxai_for: Any
) -> None:
    upstream = await start_upstream([chat_stream()])
    async with proxai_for(upstream) as px, httpx.AsyncClient() as client:
        # What a page's fetch(..., {mode: "no-cors", body: JSON.stringify(...)}) sends:
        # a "simple" request, so the browser sends it without asking first.
        response = await client.post(
            px.base_url + CHAT,
            content=b'{"model": "gpt-4o", "messages": [], "stream": true}',
            headers={
                "content-type": "text/plain;charset=UTF-8",
                "origin": EVIL,
                "sec-fetch-site": "cross-site",
                "sec-fetch-mode": "no-cors",
            },
        )
        (outcome,) = await px.wait_for_outcomes(1)
    assert response.status_code == 403
    error = response.json()["error"]
    assert error["code"] == "origin_not_allowed"
    assert "server.allowed_origins" in error["message"]
    assert "access-control-allow-origin" not in response.headers
    assert upstream.requests == []
    assert (outcome.kind, outcome.status) == (OutcomeKind.PROXY_ERROR, 403)


async def test_a_cross_site_post_to_messages_is_refused_in_anthropics_shape(
    start_upstream: Any, proxai_for: Any
) -> None:
    upstream = await start_upstream([Script.json({})])
    tables = {"upstream": {"protocol": "anthropic_messages"}}
    async with proxai_for(upstream, **tables) as px, httpx.AsyncClient() as client:
        response = await client.post(
            px.base_url + "/messages",
            content=b'{"model": "claude", "max_tokens": 9, "messages": []}',
            headers={"content-type": "text/plain", "origin": EVIL},
        )
    assert response.status_code == 403
    assert response.json()["type"] == "error"
    assert response.json()["error"]["type"] == "permission_error"
    assert upstream.requests == []


@pytest.mark.parametrize("site", ["cross-site", "same-site"])
async def test_a_request_from_another_sites_page_without_an_origin_is_refused(
    start_upstream: Any, proxai_for: Any, site: str
) -> None:
    upstream = await start_upstream([Script.json({"data": []})])
    async with proxai_for(upstream) as px, httpx.AsyncClient() as client:
        # <img src="http://127.0.0.1:8080/v1/models">: a GET carries no Origin.
        headers = {"sec-fetch-site": site, "sec-fetch-mode": "no-cors", "sec-fetch-dest": "image"}
        response = await client.get(px.base_url + "/models", headers=headers)
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "origin_not_allowed"
    assert f"Sec-Fetch-Site: {site}" in response.json()["error"]["message"]
    assert upstream.requests == []


async def test_a_link_followed_from_another_site_still_opens_the_live_view(
    start_upstream: Any, proxai_for: Any
) -> None:
    upstream = await start_upstream([Script.json({})])
    navigation = {"sec-fetch-site": "cross-site", "sec-fetch-mode": "navigate"}
    tables = {"live_view": {"enabled": True}}
    async with proxai_for(upstream, **tables) as px, httpx.AsyncClient() as client:
        page = await client.get(px.url + "/_proxai/", headers=navigation)
        # What the page then reads is fetched from its own origin: no Origin on a GET.
        streams = await client.get(
            px.url + "/_proxai/streams", headers={"sec-fetch-site": "same-origin"}
        )
        embedded = await client.get(
            px.url + "/_proxai/streams", headers={**navigation, "sec-fetch-mode": "cors"}
        )
    assert page.status_code == 200
    assert streams.status_code == 200
    assert embedded.status_code == 403


async def test_health_checks_answer_whatever_the_host_and_origin(
    start_upstream: Any, proxai_for: Any
) -> None:
    upstream = await start_upstream([Script.json({})])
    headers = {"host": "evil.example", "origin": EVIL, "sec-fetch-site": "cross-site"}
    async with proxai_for(upstream) as px, httpx.AsyncClient() as client:
        health = await client.get(px.url + "/healthz", headers=headers)
        ready = await client.head(px.url + "/readyz", headers=headers)
        metrics = await client.get(px.url + "/metrics", headers=headers)
    assert (health.status_code, ready.status_code) == (200, 200)
    assert metrics.status_code == 403  # metrics say which models are used: not exempt


# -- allowed origins and CORS ------------------------------------------------------------


async def test_an_allowed_origin_gets_cors_headers_and_a_working_stream(
    start_upstream: Any, proxai_for: Any
) -> None:
    # The upstream's own CORS answer must not reach the page: proxai's replaces it.
    script = chat_stream(("access-control-allow-origin", "*"), ("x-request-id", "req_up"))
    upstream = await start_upstream([script])
    server = {"allowed_origins": [PAGE + "/"]}  # a pasted trailing slash is fine
    async with proxai_for(upstream, server=server) as px, httpx.AsyncClient() as client:
        async with client.stream(
            "POST",
            px.base_url + CHAT,
            json=CHAT_REQUEST,
            headers={"origin": PAGE, "sec-fetch-site": "same-site", "sec-fetch-mode": "cors"},
        ) as response:
            body = b"".join([chunk async for chunk in response.aiter_raw()])
        refused = await client.post(
            px.base_url + CHAT, content=b"{", headers={"origin": PAGE}
        )  # proxai's own error, readable by the page too
    assert response.status_code == 200
    assert body == script.body
    assert response.headers.get_list("access-control-allow-origin") == [PAGE]
    assert "Origin" in response.headers.get_list("vary")
    exposed = response.headers["access-control-expose-headers"]
    assert {"x-request-id", "request-id", "retry-after", "x-proxai-request-id"} <= {
        name.strip() for name in exposed.split(",")
    }
    assert "access-control-allow-credentials" not in response.headers
    assert response.headers["x-request-id"] == "req_up"
    assert refused.status_code == 400
    assert refused.headers.get_list("access-control-allow-origin") == [PAGE]
    assert len(upstream.requests) == 1


async def test_a_preflight_is_answered_by_proxai_and_never_forwarded(
    start_upstream: Any, proxai_for: Any
) -> None:
    upstream = await start_upstream([Script.json({})])
    server = {"allowed_origins": [PAGE]}
    preflight = {
        "origin": PAGE,
        "access-control-request-method": "POST",
        "access-control-request-headers": "authorization,content-type,x-stainless-os",
        "access-control-request-private-network": "true",
    }
    async with proxai_for(upstream, server=server) as px, httpx.AsyncClient() as client:
        allowed = await client.options(px.base_url + CHAT, headers=preflight)
        refused = await client.options(px.base_url + CHAT, headers={**preflight, "origin": EVIL})
        plain = await client.options(px.base_url + "/models")
    assert allowed.status_code == 204
    assert allowed.content == b""
    assert allowed.headers["access-control-allow-origin"] == PAGE
    assert allowed.headers["access-control-allow-methods"] == "GET, HEAD, POST, DELETE"
    assert allowed.headers["access-control-allow-headers"] == (
        "authorization,content-type,x-stainless-os"
    )
    assert allowed.headers["access-control-max-age"] == "600"
    assert allowed.headers["access-control-allow-private-network"] == "true"
    assert refused.status_code == 403
    assert "access-control-allow-origin" not in refused.headers
    assert (plain.status_code, plain.headers["allow"]) == (204, ALLOW)
    assert upstream.requests == []


# -- Host (DNS rebinding) ----------------------------------------------------------------


async def test_a_request_for_another_host_is_refused(start_upstream: Any, proxai_for: Any) -> None:
    upstream = await start_upstream([Script.json({"data": []})])
    async with proxai_for(upstream) as px, httpx.AsyncClient() as client:
        port = px.url.rsplit(":", 1)[1]
        # A page at http://evil.example:PORT whose name now resolves to 127.0.0.1 is
        # same-origin with itself: only its Host gives it away.
        response = await client.post(
            px.base_url + "/responses",
            json=TURN1_REQUEST,
            headers={"host": f"evil.example:{port}", "origin": f"http://evil.example:{port}"},
        )
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "host_not_allowed"
    assert "server.allowed_hosts" in response.json()["error"]["message"]
    assert upstream.requests == []


@pytest.mark.parametrize(
    "host", ["localhost:{port}", "127.0.0.1:{port}", "[::1]:{port}", "LocalHost.", "a.localhost"]
)
async def test_local_hosts_are_answered(start_upstream: Any, proxai_for: Any, host: str) -> None:
    upstream = await start_upstream([Script.json({"data": []})])
    async with proxai_for(upstream) as px, httpx.AsyncClient() as client:
        port = px.url.rsplit(":", 1)[1]
        response = await client.get(
            px.base_url + "/models", headers={"host": host.format(port=port)}
        )
    assert response.status_code == 200
    assert len(upstream.requests) == 1


async def test_a_host_in_allowed_hosts_is_answered(start_upstream: Any, proxai_for: Any) -> None:
    upstream = await start_upstream([Script.json({"data": []})])
    server = {"allowed_hosts": ["proxai.internal"]}
    async with proxai_for(upstream, server=server) as px, httpx.AsyncClient() as client:
        named = await client.get(px.base_url + "/models", headers={"host": "proxai.internal:9"})
        other = await client.get(px.base_url + "/models", headers={"host": "other.internal"})
    assert (named.status_code, other.status_code) == (200, 403)
    assert len(upstream.requests) == 1


# -- browser-less clients ----------------------------------------------------------------


def sdk_chat(base_url: str) -> list[str]:
    client = openai.OpenAI(base_url=base_url, api_key="sk-client", max_retries=0, timeout=20)
    stream = client.chat.completions.create(**CHAT_REQUEST)
    return [chunk.choices[0].delta.content or "" for chunk in stream]


def sdk_models(base_url: str) -> list[str]:
    client = openai.OpenAI(base_url=base_url, api_key="sk-client", max_retries=0, timeout=20)
    return [model.id for model in client.models.list()]


async def test_the_openai_sdk_works_with_no_new_setting(
    start_upstream: Any, proxai_for: Any
) -> None:
    models = Script.json({"object": "list", "data": [{"id": "gpt-4o", "object": "model"}]})
    upstream = await start_upstream([chat_stream(), models])
    async with proxai_for(upstream) as px:
        with trio.fail_after(15):
            deltas = await trio.to_thread.run_sync(sdk_chat, px.base_url)
            listed = await trio.to_thread.run_sync(sdk_models, px.base_url)
    assert deltas == ["Hi", ""]
    assert listed == ["gpt-4o"]
    assert [r.method for r in upstream.requests] == ["POST", "GET"]


# -- methods -----------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["TRACE", "PUT", "PATCH", "PROPFIND", "TRACK"])
async def test_methods_outside_the_allow_list_get_405_without_the_upstream(
    start_upstream: Any, proxai_for: Any, method: str
) -> None:
    upstream = await start_upstream([Script.json({})])
    async with proxai_for(upstream) as px, httpx.AsyncClient() as client:
        response = await client.request(method, px.base_url + "/models")
        health = await client.request(method, px.url + "/healthz")
    assert response.status_code == 405
    assert response.headers["allow"] == ALLOW
    assert response.json()["error"]["code"] == "method_not_allowed"
    assert health.status_code == 405
    assert upstream.requests == []


async def read_response(stream: trio.SocketStream) -> tuple[bytes, bytes]:
    """One HTTP/1.1 response with a Content-Length: its head and its body."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = await stream.receive_some()
        assert chunk, data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        body += await stream.receive_some()
    return head, body


@pytest.mark.parametrize("target", [b"/v1/models", b"upstream.example:443"])
async def test_connect_gets_405_and_does_not_hold_up_shutdown(
    start_upstream: Any, target: bytes
) -> None:
    upstream: ScriptedUpstream = await start_upstream([Script.json({})])
    overrides = {
        "server": {"host": "127.0.0.1", "port": 0},
        "upstream": {"base_url": upstream.base_url, "api_key": "sk-upstream"},
    }
    config = load_config(None, overrides=overrides)
    stop = trio.Event()
    # A connection stuck in a tunnel would hold the shutdown for hypercorn's graceful
    # timeout (server.drain_timeout and more, 30 s and more by default).
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            (url,) = await nursery.start(partial(serve, config, shutdown_trigger=stop.wait))
            host, port = url.removeprefix("http://").rsplit(":", 1)
            stream = await trio.open_tcp_stream(host, int(port))
            await stream.send_all(
                b"CONNECT " + target + b" HTTP/1.1\r\nHost: " + target + b"\r\n\r\n"
            )
            head, body = await read_response(stream)
            stop.set()  # the client keeps its connection open
    await stream.aclose()
    assert head.startswith(b"HTTP/1.1 405 ")
    assert b"\r\nallow: GET, HEAD, POST, DELETE, OPTIONS\r\n" in head
    assert b"method_not_allowed" in body
    assert upstream.requests == []
