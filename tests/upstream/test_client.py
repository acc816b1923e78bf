"""The upstream client: its URL cache, encoded event streams, and its idle connections."""

from __future__ import annotations

import gzip
import zlib
from functools import partial
from typing import Any

import httpx
import pytest
import trio

from proxai.config import ConfigError, TimeoutsConfig, UpstreamConfig
from proxai.config_file import load_config
from proxai.outcome import OutcomeKind
from proxai.relay.reader import Reading, reading_for
from proxai.testing import Script, ScriptedUpstream
from proxai.testing.seed import TURN1_EVENTS, TURN1_REQUEST, turn_bytes
from proxai.testing.upstream import SSE_HEADERS
from proxai.upstream.client import (
    URL_CACHE_ENTRIES,
    URL_CACHE_TARGET_BYTES,
    ConnectionState,
    UpstreamClient,
    connections_to_close,
)
from proxai.wire.coding import PIECE_BYTES, CorruptCoding, Decoder
from tests.helpers import burst

TURN1 = turn_bytes(TURN1_EVENTS)


# -- the URL cache -----------------------------------------------------------------------


async def test_long_query_strings_do_not_fill_the_url_cache() -> None:
    client = UpstreamClient(UpstreamConfig(base_url="http://up.test/v1"), TimeoutsConfig())
    long_query = b"x=" + b"a" * 60_000
    for i in range(64):
        url = client.url_for(b"/v1/responses", long_query + str(i).encode())
        assert url.raw_path.endswith(b"a" + str(i).encode())
    assert len(client.url_cache) == 0
    assert client.url_cache.target_bytes == 0
    await client.aclose()


async def test_the_url_cache_is_bounded_in_entries_and_bytes() -> None:
    client = UpstreamClient(UpstreamConfig(base_url="http://up.test/v1"), TimeoutsConfig())
    for i in range(3 * URL_CACHE_ENTRIES):
        client.url_for(b"/v1/responses", b"q=%d&" % i + b"b" * (URL_CACHE_TARGET_BYTES - 30))
    assert len(client.url_cache) == URL_CACHE_ENTRIES
    assert client.url_cache.target_bytes <= URL_CACHE_ENTRIES * URL_CACHE_TARGET_BYTES
    # the paths a proxy sees again and again stay ready
    first = client.url_for(b"/v1/responses", b"")
    assert client.url_for(b"/v1/responses", b"") is first
    assert str(first) == "http://up.test/v1/responses"
    await client.aclose()


# -- encoded event streams ---------------------------------------------------------------


def _gzip_sse(coding: str = "gzip", *, chunk_size: int = 97) -> Script:
    """TURN1 as an event stream the upstream compressed although asked not to."""
    if coding == "deflate":
        packed = zlib.compress(TURN1)
    elif coding == "gzip":
        packed = gzip.compress(TURN1)
    else:
        packed = TURN1[::-1]  # any bytes: proxai cannot read them either way
    return Script.sse(
        [packed], chunk_size=chunk_size, headers=(*SSE_HEADERS, ("content-encoding", coding))
    )


def test_only_an_event_stream_in_a_coding_zlib_undoes_is_decoded() -> None:
    sse = [(b"content-type", b"text/event-stream")]
    gzipped = reading_for(200, [*sse, (b"Content-Encoding", b"GZIP")])
    assert (gzipped.sse, gzipped.decode, gzipped.headers) == (True, b"gzip", sse)
    assert reading_for(200, [*sse, (b"content-encoding", b"identity")]).decode is None
    for unreadable in (b"br", b"zstd", b"gzip, gzip"):
        reading = reading_for(200, [*sse, (b"content-encoding", unreadable)])
        assert (reading.sse, reading.decode) == (False, None)
        assert reading.unreadable is not None
    # a JSON body or an error passes as it came: the client decodes it
    json_body = [(b"content-type", b"application/json"), (b"content-encoding", b"gzip")]
    assert reading_for(200, json_body) == Reading(False, json_body)
    assert not reading_for(500, [*sse, (b"content-encoding", b"gzip")]).sse


def test_a_decoder_hands_out_a_thousandfold_read_in_bounded_pieces() -> None:
    plain = b"data: " + b"0" * 5_000_000 + b"\n\n"
    packed = gzip.compress(plain)
    decoder = Decoder(b"gzip")
    pieces = [p for i in range(0, len(packed), 4096) for p in decoder.feed(packed[i : i + 4096])]
    assert max(len(p) for p in pieces) <= PIECE_BYTES
    assert b"".join(pieces) + decoder.close() == plain


def test_a_deflate_stream_without_its_zlib_header_is_decoded_too() -> None:
    squeeze = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    raw = squeeze.compress(TURN1) + squeeze.flush()
    decoder = Decoder(b"deflate")
    assert b"".join(decoder.feed(raw)) + decoder.close() == TURN1
    with pytest.raises(CorruptCoding):
        list(Decoder(b"gzip").feed(b"not gzip at all"))


@pytest.mark.parametrize("coding", ["gzip", "deflate"])
async def test_a_gzipped_event_stream_is_decoded_observed_and_forwarded_plain(
    start_upstream: Any, proxai_for: Any, coding: str
) -> None:
    upstream = await start_upstream([_gzip_sse(coding)])
    async with proxai_for(upstream) as px, httpx.AsyncClient() as client:
        # httpx accepts gzip: proxai still sends the stream decoded (see reliability.md)
        response = await client.post(px.base_url + "/responses", json=TURN1_REQUEST)
        [outcome] = await px.wait_for_outcomes(1)
    assert upstream.requests[0].header("accept-encoding") == "identity"
    assert response.status_code == 200
    assert "content-encoding" not in response.headers
    assert response.content == TURN1
    assert outcome.kind is OutcomeKind.COMPLETED
    assert outcome.events == len(TURN1_EVENTS)
    assert outcome.bytes_out == len(TURN1)
    assert any(coding in a for a in outcome.anomalies)


async def test_the_openai_sdk_reads_a_stream_the_upstream_gzipped(
    start_upstream: Any, proxai_for: Any
) -> None:
    openai = pytest.importorskip("openai")
    upstream = await start_upstream([_gzip_sse()])
    async with proxai_for(upstream) as px:

        def drive() -> list[str]:
            client = openai.OpenAI(base_url=px.base_url, api_key="sk-client", max_retries=0)
            return [event.type for event in client.responses.create(**TURN1_REQUEST)]

        types = await trio.to_thread.run_sync(drive)
        [outcome] = await px.wait_for_outcomes(1)
    assert types == [e["type"] for e in TURN1_EVENTS]
    assert outcome.kind is OutcomeKind.COMPLETED


async def test_an_event_stream_in_a_coding_proxai_cannot_read_is_relayed_unobserved(
    start_upstream: Any, proxai_for: Any, caplog: pytest.LogCaptureFixture
) -> None:
    script = _gzip_sse("x-unknown")
    upstream = await start_upstream([script])
    async with proxai_for(upstream) as px, httpx.AsyncClient() as client:
        response = await client.post(
            px.base_url + "/responses",
            json=TURN1_REQUEST,
            headers={"accept-encoding": "identity"},
        )
        [outcome] = await px.wait_for_outcomes(1)
    # its bytes and its coding pass unchanged: the client is the one to decode them
    assert response.status_code == 200
    assert response.headers["content-encoding"] == "x-unknown"
    assert response.content == script.body
    assert outcome.kind is OutcomeKind.COMPLETED
    assert outcome.events == 0
    assert any("x-unknown" in a and "unobserved" in a for a in outcome.anomalies)
    assert any("x-unknown" in r.getMessage() for r in caplog.records if r.levelname == "WARNING")


async def test_a_corrupt_gzipped_stream_is_broken_like_a_reset_one(
    start_upstream: Any, proxai_for: Any
) -> None:
    packed = gzip.compress(TURN1)
    corrupt = packed[:200] + bytes(b ^ 0xFF for b in packed[200:260]) + packed[260:]
    upstream = await start_upstream(
        [Script.sse([corrupt], chunk_size=50, headers=(*SSE_HEADERS, ("content-encoding", "gzip")))]
    )
    async with proxai_for(upstream) as px, httpx.AsyncClient() as client:
        response = await client.post(px.base_url + "/responses", json=TURN1_REQUEST)
        [outcome] = await px.wait_for_outcomes(1)
    assert outcome.kind is OutcomeKind.UPSTREAM_RESET
    assert "gzip" in (outcome.detail or "")
    # what was decoded before the fault went out, then proxai's own terminal event
    assert response.content.startswith(TURN1[:40])
    assert b"response.failed" in response.content


# -- idle connections ----------------------------------------------------------------------


async def _wait_until_open_at_most(upstream: ScriptedUpstream, count: int) -> None:
    with trio.fail_after(10):  # a hang guard, not a measure
        await upstream.wait_open_connections(count)


def test_the_sweep_closes_expired_idle_connections_and_those_over_the_bound() -> None:
    busy, idle = ConnectionState(False, False), ConnectionState(True, False)
    expired = ConnectionState(True, True)
    pools = [[busy, idle, expired, idle], [idle, busy, idle]]
    assert connections_to_close(pools, max_idle=2) == [(0, 2), (1, 0), (1, 2)]
    assert connections_to_close(pools, max_idle=10) == [(0, 2)]
    assert connections_to_close(pools, max_idle=0) == [(0, 1), (0, 2), (0, 3), (1, 0), (1, 2)]
    assert connections_to_close([[busy, ConnectionState(False, True)]], max_idle=0) == []


async def test_a_burst_leaves_at_most_max_idle_connections_open(start_upstream: Any) -> None:
    upstream = await start_upstream([Script.sse(TURN1_EVENTS[:4], delay=0.05)])
    config = UpstreamConfig(base_url=upstream.base_url, max_idle_connections=3)
    client = UpstreamClient(config, TimeoutsConfig())
    await burst(client, 24)
    assert upstream.connections_opened == 24
    await client.close_idle()
    await _wait_until_open_at_most(upstream, 3)
    assert client.pool_statistics().idle == upstream.open_connections == 3
    # a kept one is reused
    await burst(client, 1)
    assert upstream.connections_opened == 24
    await client.aclose()


async def test_idle_connections_close_after_keepalive_expiry_without_new_traffic(
    start_upstream: Any, proxai_for: Any
) -> None:
    upstream = await start_upstream([Script.sse(TURN1_EVENTS, delay=0.02)])
    streams = 20
    async with (
        # Real connections: they must still be open when the last stream ends, however
        # loaded the machine (pauses of over half a second happen), then swept.
        proxai_for(upstream, upstream={"keepalive_expiry": 2.0}) as px,
        httpx.AsyncClient(limits=httpx.Limits(max_connections=streams)) as client,
    ):
        async with trio.open_nursery() as nursery:
            for _ in range(streams):
                nursery.start_soon(
                    partial(client.post, json=TURN1_REQUEST), px.base_url + "/responses"
                )
        await px.wait_for_outcomes(streams)
        assert upstream.connections_opened == streams
        assert upstream.open_connections > 0  # kept for reuse, for a while
        # no request comes: the app's sweep closes them all once they expire
        await _wait_until_open_at_most(upstream, 0)


@pytest.mark.parametrize(("key", "value"), [("keepalive_expiry", 0), ("max_idle_connections", -1)])
def test_the_pool_settings_are_checked_at_start_up(key: str, value: int) -> None:
    upstream = {"base_url": "http://up.test/v1", key: value}
    with pytest.raises(ConfigError, match=rf"upstream\.{key}: must be"):
        load_config(None, overrides={"upstream": upstream})
