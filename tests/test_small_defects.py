"""Small defects from issue 13's review (a `#` target, deep usage, log line breaks, the
metrics model label, capture redaction and permissions), each pinned down."""

from __future__ import annotations

import json
import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from trio.testing import MockClock

from proxai.config import CaptureConfig
from proxai.ops.capture import Captures
from proxai.ops.request_log import JsonFormatter, _human, log_fields
from proxai.outcome import Outcome
from proxai.testing import Script
from proxai.testing.memory_proxy import MemoryProxy
from proxai.testing.seed import TURN1_EVENTS, TURN1_REQUEST, turn_bytes
from proxai.wire.query import query_for_upstream
from tests.helpers import metric

TURN1 = turn_bytes(TURN1_EVENTS)


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


# -- a request target with a fragment ----------------------------------------------------


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


# -- usage nested deep -------------------------------------------------------------------


async def test_a_usage_object_nested_a_thousand_deep_is_cut_and_noted_not_fatal(
    start_upstream: Any, proxai_for: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """orjson parses up to 1,024 levels; walking that many recursively blew the stack,
    and the request then had no log line, no metrics and no capture."""
    last = TURN1_EVENTS[-1]
    usage = {"output_tokens": 5, "nested": "HERE"}
    events = [*TURN1_EVENTS[:-1], {**last, "response": {**last["response"], "usage": usage}}]
    deep = b'{"x":' * 1000 + b'{"input_tokens":7}' + b"}" * 1000
    stream = turn_bytes(events).replace(b'"HERE"', deep)
    upstream = await start_upstream([Script.sse([stream])])
    caplog.set_level("INFO", logger="proxai.request")
    captures = tmp_path / "captures"
    async with (
        proxai_for(upstream, capture={"enabled": True, "dir": str(captures)}) as px,
        httpx.AsyncClient() as client,
    ):
        response = await client.post(px.base_url + "/responses", json=TURN1_REQUEST)
        with trio.fail_after(5):
            (outcome,) = await px.wait_for_outcomes(1)
            (folder,) = await px.wait_for_captures(1)  # written by a thread after the outcome
        text = (await client.get(px.url + "/metrics")).text
        kept = json.loads((folder / "outcome.json").read_text())["usage"]
        assert list(captures.glob("*/outcome.json")) == [folder / "outcome.json"]
    assert response.content == stream  # relayed untouched
    assert outcome.kind == "completed"
    assert any("usage nested deeper than" in a for a in outcome.anomalies)
    (record,) = [r for r in caplog.records if r.name == "proxai.request"]
    assert "usage=output_tokens=5 " in record.getMessage()
    assert metric(text, "proxai_usage_tokens_total", kind="output_tokens") == 5
    assert metric(text, "proxai_requests_total", outcome="completed") == 1
    assert kept["output_tokens"] == 5 and "x" in kept["nested"]


# -- line breaks in the human log ----------------------------------------------------------


@pytest.mark.parametrize("brk", ["\u2028", "\u2029", "\x85", "\x0b", "\x0c", "\x1c", "\x1e"])
def test_no_line_break_in_a_model_name_starts_a_forged_log_line(brk: str) -> None:
    forged = f"gpt-5{brk}POST /v1/responses 200 completed request_id=req_forged"
    outcome = Outcome("POST", "/v1/responses", request_id="req_" + "0" * 24, model=forged)
    line = _human(log_fields(outcome))
    assert len(line.splitlines()) == 1
    assert "model=" + json.dumps(forged) in line  # escaped as JSON does, readable back
    record = logging.LogRecord("proxai.request", logging.INFO, "", 0, "%s", (line,), None)
    record.proxai_fields = log_fields(outcome)
    assert len(JsonFormatter().format(record).splitlines()) == 1


def test_invisible_format_characters_in_a_model_name_are_escaped() -> None:
    outcome = Outcome("POST", "/v1/responses", model="gpt\u202e5-\U000e0001x")
    line = _human(log_fields(outcome))
    assert 'model="gpt\\u202e5-\\udb40\\udc01x"' in line
    assert json.loads(line.split("model=", 1)[1].split(" ")[0]) == "gpt\u202e5-\U000e0001x"


# -- the metrics model label ---------------------------------------------------------------


async def test_models_a_route_names_exactly_keep_their_label_after_a_flood_of_junk(
    autojump_clock: MockClock,
) -> None:
    routes = [
        {"model": "gpt-5.4", "upstreams": ["default"]},
        {"model": "claude-?", "upstreams": ["default"]},
        {"model": "*", "upstreams": ["default"]},
    ]
    async with MemoryProxy(lambda r: Script.json({"ok": True}), routes=routes) as proxy:
        for i in range(150):  # an accepting upstream serves every junk name
            await proxy.request({"model": f"junk-{i}", "input": "hi"})
        await proxy.request({"model": "gpt-5.4", "input": "hi"})
        await proxy.request({"model": "claude-9", "input": "hi"})
        metrics = proxy.app._metrics
        assert metrics is not None
        text = metrics.exposition().decode()
    assert metric(text, "proxai_requests_total", model="gpt-5.4") == 1
    assert metric(text, "proxai_requests_total", model="junk-99") == 1  # the 100th slot
    assert "junk-100" not in text
    # A glob names no model: its models share the capped slots, full by now.
    assert 'model="claude-9"' not in text
    assert metric(text, "proxai_requests_total", route="routes[1] model='claude-?'") == 1
    assert metric(text, "proxai_requests_total", route="routes[1] model='claude-?'", model="other")
    assert metric(text, "proxai_requests_total", route="routes[2] model='*'", model="other") == 50


# -- captures: redaction, permissions; query credentials upstream --------------------------


async def test_captures_redact_every_credential_looking_header_and_query_parameter(
    start_upstream: Any, proxai_for: Any, tmp_path: Path
) -> None:
    answer = Script.json(
        {"data": []},
        headers=(("x-ratelimit-remaining-tokens", "999"), ("x-upstream-token", "tok-up")),
    )
    upstream = await start_upstream([answer])
    captures = tmp_path / "captures"
    secrets = {
        "x-goog-api-key": "goog-secret",
        "ocp-apim-subscription-key": "apim-secret",
        "x-auth-token": "auth-token-secret",
        "x-client-secret": "cs-value-1",
        "x-amz-signature": "sig-secret",
        "cookie": "session=cookie-secret",
    }
    query = "limit=2&key=q-key-secret&api_key=q-apikey-secret&access_token=q-at-secret&Sig=q-sig"
    async with (
        proxai_for(upstream, capture={"enabled": True, "dir": str(captures)}) as px,
        httpx.AsyncClient() as client,
    ):
        await client.get(px.base_url + "/models?" + query, headers={**secrets, "x-trace": "t-1"})
        with trio.fail_after(5):
            (folder,) = await px.wait_for_captures(1)  # written by a thread after the request
        assert list(captures.iterdir()) == [folder]
        request = (folder / "request.http").read_bytes()
        upstream_head = (folder / "upstream.bin").read_bytes()
        everything = b"".join(p.read_bytes() for p in folder.iterdir())
    assert request.startswith(
        b"GET /v1/models?limit=2&key=[redacted]&api_key=[redacted]"
        b"&access_token=[redacted]&Sig=[redacted] HTTP/1.1\r\n"
    )
    for name in secrets:
        assert name.encode() + b": [redacted]\r\n" in request
    assert b"x-trace: t-1\r\n" in request
    assert b"x-upstream-token: [redacted]\r\n" in upstream_head
    assert b"x-ratelimit-remaining-tokens: 999\r\n" in upstream_head  # a count, not a key
    for secret in [*secrets.values(), "q-key-secret", "q-apikey-secret", "q-at-secret", "tok-up"]:
        assert secret.encode() not in everything, secret


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


@pytest.fixture
def permissive_umask() -> Iterator[None]:
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


@pytest.mark.usefixtures("permissive_umask")
def test_capture_folders_and_files_are_for_proxais_user_only(tmp_path: Path) -> None:
    root = tmp_path / "captures"
    captures = Captures(CaptureConfig(enabled=True, dir=str(root)))
    captures._write(captures.start(), Outcome("GET", "/v1/models", request_id="req_" + "1" * 24))
    (folder,) = root.iterdir()
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    files = sorted(folder.iterdir())
    assert [f.name for f in files] == ["client.bin", "outcome.json", "request.http", "upstream.bin"]
    for file in files:
        assert stat.S_IMODE(file.stat().st_mode) == 0o600, file.name


def test_only_credential_parameters_are_dropped_from_the_upstream_query() -> None:
    query = b"keyword=a&key&monkey=1&KEY=2&x=%6Bey&%6bey=3&api-version=2024-10-21"
    assert query_for_upstream(query) == b"keyword=a&monkey=1&x=%6Bey&api-version=2024-10-21"
    assert query_for_upstream(b"limit=2&after=a%26b") == b"limit=2&after=a%26b"
