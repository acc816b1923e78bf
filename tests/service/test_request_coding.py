"""Compressed request bodies through the whole app: decoded before routing, forwarded
plain, refused with 413/415/400 before anything goes upstream."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from trio.testing import MockClock

from proxai.outcome import OutcomeKind
from proxai.testing import Script
from proxai.testing.compressed import MIB, compress, zeros_bomb
from proxai.testing.memory_proxy import MemoryExchange, MemoryProxy
from proxai.testing.seed import TURN1_EVENTS, TURN1_REQUEST, turn_bytes
from tests.helpers import ANTHROPIC_UPSTREAM, MESSAGES, REQUEST, WHOLE

TURN1 = turn_bytes(TURN1_EVENTS)
RAW = json.dumps(TURN1_REQUEST, ensure_ascii=False).encode()


def coded(encoding: bytes) -> list[tuple[bytes, bytes]]:
    return [(b"content-encoding", encoding)]


@pytest.mark.parametrize(
    "codings", [("zstd",), ("gzip",), ("deflate",), ("deflate-raw",), ("br",), ("gzip", "br")]
)
async def test_the_upstream_gets_the_decoded_body_without_its_coding(
    autojump_clock: MockClock, codings: tuple[str, ...]
) -> None:
    body, header = compress(RAW, *codings)
    async with MemoryProxy([Script.sse([TURN1])]) as proxy:
        exchange = await proxy.request(body, headers=coded(header))
    assert (exchange.status, exchange.body) == (200, TURN1)
    (sent,) = proxy.transport.requests
    assert sent.body == RAW
    assert sent.header("content-encoding") is None
    assert sent.header("content-length") == str(len(RAW))
    assert exchange.outcome is not None
    assert exchange.outcome.kind is OutcomeKind.COMPLETED
    assert exchange.outcome.model == TURN1_REQUEST["model"]  # read from the decoded JSON


async def test_an_anthropic_client_compressed_body_is_decoded_too(
    autojump_clock: MockClock,
) -> None:
    raw = json.dumps(REQUEST, ensure_ascii=False).encode()
    body, header = compress(raw, "zstd")
    stream = b"".join(WHOLE)
    async with MemoryProxy([Script.sse([stream])], upstreams=ANTHROPIC_UPSTREAM) as proxy:
        exchange = await proxy.request(body, path=MESSAGES, headers=coded(header))
    assert (exchange.status, exchange.body) == (200, stream)
    (sent,) = proxy.transport.requests
    assert (sent.body, sent.header("content-encoding")) == (raw, None)


def assert_refused(proxy: MemoryProxy, exchange: MemoryExchange, status: int) -> dict[str, Any]:
    assert exchange.status == status
    assert proxy.transport.requests == []  # nothing went upstream
    assert exchange.outcome is not None
    assert (exchange.outcome.kind, exchange.outcome.status) == (OutcomeKind.PROXY_ERROR, status)
    error: dict[str, Any] = exchange.json()["error"]
    return error


@pytest.mark.parametrize("coding", ["gzip", "deflate", "zstd", "br"])
async def test_a_bomb_gets_413(autojump_clock: MockClock, coding: str) -> None:
    bomb = zeros_bomb(coding, 64)  # 64 MiB of zeros, far less on the wire
    assert len(bomb) < MIB
    async with MemoryProxy([Script.sse([TURN1])], server={"max_request_body_bytes": MIB}) as proxy:
        exchange = await proxy.request(bomb, headers=coded(coding.encode()))
    error = assert_refused(proxy, exchange, 413)
    assert (error["type"], error["code"]) == ("invalid_request_error", "request_too_large")
    assert error["message"] == (
        f"request body is larger than the limit of {MIB} bytes once decoded "
        "(server.max_request_body_bytes)"
    )


async def test_an_unknown_coding_gets_415_with_accept_encoding(autojump_clock: MockClock) -> None:
    async with MemoryProxy([Script.sse([TURN1])]) as proxy:
        exchange = await proxy.request(RAW, headers=coded(b"compress"))
    error = assert_refused(proxy, exchange, 415)
    assert error["code"] == "unsupported_content_encoding"
    assert (b"accept-encoding", b"gzip, deflate, zstd, br") in exchange.headers


async def test_an_unknown_coding_on_an_anthropic_route_answers_in_its_shape(
    autojump_clock: MockClock,
) -> None:
    async with MemoryProxy([Script.sse([b""])], upstreams=ANTHROPIC_UPSTREAM) as proxy:
        exchange = await proxy.request(REQUEST, path=MESSAGES, headers=coded(b"lzma"))
    assert exchange.status == 415
    assert exchange.json()["type"] == "error"
    assert exchange.json()["error"]["type"] == "invalid_request_error"
    assert (b"accept-encoding", b"gzip, deflate, zstd, br") in exchange.headers
    assert proxy.transport.requests == []


async def test_a_corrupt_body_gets_400_naming_its_coding(autojump_clock: MockClock) -> None:
    body, _ = compress(RAW, "zstd")
    async with MemoryProxy([Script.sse([TURN1])]) as proxy:
        exchange = await proxy.request(body[:-20], headers=coded(b"zstd"))
    error = assert_refused(proxy, exchange, 400)
    assert (error["type"], error["code"]) == ("invalid_request_error", "invalid_content_encoding")
    assert error["message"].startswith("request body is not valid zstd data")


async def test_a_real_client_posting_zstd_through_hypercorn(
    start_upstream: Any, proxai_for: Any, tmp_path: Path
) -> None:
    """Codex's way: a zstd body over a real socket; the upstream and the capture get the
    JSON, the client the stream."""
    body, header = compress(RAW, "zstd")
    upstream = await start_upstream([Script.sse([TURN1])])
    captures = tmp_path / "captures"
    async with (
        proxai_for(upstream, capture={"enabled": True, "dir": str(captures)}) as px,
        httpx.AsyncClient(base_url=px.base_url) as client,
    ):
        response = await client.post(
            "/responses",
            content=body,
            headers={"content-type": "application/json", "content-encoding": header.decode()},
        )
        with trio.fail_after(5):
            (folder,) = await px.wait_for_captures(1)
    assert (response.status_code, response.content) == (200, TURN1)
    (sent,) = upstream.requests
    assert sent.body == RAW
    assert sent.header("content-encoding") is None
    assert sent.header("content-length") == str(len(RAW))
    request = (folder / "request.http").read_bytes()
    assert b"\r\ncontent-encoding: zstd\r\n" in request  # the head as the client sent it
    assert request.endswith(b"\r\n\r\n" + RAW)  # the body decoded
