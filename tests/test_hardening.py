"""Defects found in review of the service and observability work, each pinned down."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio
from trio.testing import MockClock

from proxai.config import CaptureConfig, ConfigError
from proxai.config_file import load_config
from proxai.ops.capture import Captures
from proxai.ops.request_log import _human, log_fields
from proxai.outcome import Outcome
from proxai.testing import Script
from proxai.testing.memory_proxy import MemoryProxy
from proxai.testing.seed import TURN1_EVENTS, TURN1_REQUEST, turn_bytes

TURN1 = turn_bytes(TURN1_EVENTS)


def test_a_key_read_from_a_file_loses_its_newline() -> None:
    config = load_config(
        None,
        overrides={"upstream": {"base_url": "http://u/v1", "api_key_env": "PROXAI_K"}},
        environ={"PROXAI_K": "sk-from-a-secret-file\n"},
    )
    assert config.upstream.resolved_api_key({"PROXAI_K": "sk-from-a-secret-file\n"}) == (
        "sk-from-a-secret-file"
    )


@pytest.mark.parametrize(
    ("upstream", "message"),
    [
        ({"headers": {"X-Team": "a\r\nX-Evil: 1"}}, "upstream.headers.X-Team: the value contains"),
        ({"headers": {"Bad Name": "x"}}, "upstream.headers: 'Bad Name' is not a valid header name"),
        ({"headers": {"X-Org": "组织"}}, "upstream.headers.X-Org: the value has characters"),
        ({"api_key": "sk-secret\nmore"}, "upstream.api_key: the key contains a line break"),
    ],
)
def test_header_values_that_http_cannot_carry_stop_start_up(
    upstream: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(None, overrides={"upstream": {"base_url": "http://u/v1", **upstream}})
    assert message in str(info.value)
    assert "sk-secret" not in str(info.value)  # the message never quotes a key


async def test_junk_and_huge_model_names_do_not_grow_the_metrics(
    autojump_clock: MockClock,
) -> None:
    routes = [{"model": "gpt-*", "upstreams": ["default"]}]
    async with MemoryProxy(lambda r: Script.json({"ok": True}), routes=routes) as proxy:
        for i in range(150):
            await proxy.request({"model": f"junk-{i}", "input": "hi"})  # 404: no route
        await proxy.request({"model": "gpt-" + "x" * 5000, "input": "hi"})
        await proxy.request({"model": "gpt-5", "input": "hi"})
        metrics = proxy.app._metrics
        assert metrics is not None
        text = metrics.exposition().decode()
    assert 'model="gpt-5"' in text
    assert "junk-" not in text and "xxxxx" not in text
    assert len(text) < 50_000


def test_pruning_never_touches_folders_proxai_did_not_write(tmp_path: Path) -> None:
    (tmp_path / "my-notes").mkdir()
    (tmp_path / "20250101T000000.000000-not-a-request").mkdir()
    captures = Captures(CaptureConfig(enabled=True, dir=str(tmp_path), keep=1))
    for n in range(3):
        outcome = Outcome("POST", "/v1/responses", request_id=f"req_{n:024x}")
        captures._write(captures.start(), outcome)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert "my-notes" in names and "20250101T000000.000000-not-a-request" in names
    assert len([n for n in names if "req_" in n]) == 1


def test_a_path_or_model_cannot_forge_a_log_line() -> None:
    outcome = Outcome(
        "POST",
        "/v1/x\nPOST /v1/responses 200 completed request_id=req_forged",
        request_id="req_" + "0" * 24,
        model='gpt "5"\r\nfake',
    )
    line = _human(log_fields(outcome))
    assert "\n" not in line and "\r" not in line
    assert '"/v1/x\\nPOST /v1/responses 200 completed request_id=req_forged"' in line


async def test_a_request_admitted_before_the_drain_is_served_after_its_body(
    autojump_clock: MockClock,
) -> None:
    async with MemoryProxy([Script.sse([TURN1])], server={"drain_timeout": 10.0}) as proxy:
        body = json.dumps(TURN1_REQUEST).encode()
        parts = [body[:5], body[5:]]
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            if parts:
                await trio.sleep(0.5)
                part = parts.pop(0)
                return {"type": "http.request", "body": part, "more_body": bool(parts)}
            await trio.sleep_forever()
            raise AssertionError

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        scope = {
            "type": "http",
            "method": "POST",
            "path": "/v1/responses",
            "query_string": b"",
            "headers": [(b"content-type", b"application/json")],
        }
        async with trio.open_nursery() as nursery:
            nursery.start_soon(proxy.app, scope, receive, send)
            await trio.sleep(0.1)
            assert proxy.app.in_flight == 1
            nursery.start_soon(proxy.app.drain)
    assert sent[0]["status"] == 200
    assert b"".join(m.get("body", b"") for m in sent[1:]) == TURN1


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
