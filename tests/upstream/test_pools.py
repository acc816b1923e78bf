"""The upstream pools under churn, on both transports (plain http: the lean h11 one; https:
httpcore's): the idle sweep against connections leaving meanwhile, the lists back to
their bound, and a background task's failure that must not take the service down."""

from __future__ import annotations

import ssl
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import trustme

from proxai.config import TimeoutsConfig, UpstreamConfig
from proxai.config_file import load_config
from proxai.outcome import OutcomeKind
from proxai.service.background import LOG_EVERY, Failures
from proxai.service.server import serve
from proxai.testing import RecordedRequest, Script, ScriptedUpstream
from proxai.testing.memory_proxy import MemoryProxy
from proxai.testing.raw_upstream import RawUpstream, raw_response
from proxai.testing.seed import TURN1_EVENTS, TURN1_REQUEST, turn_bytes
from proxai.upstream.client import UpstreamClient
from proxai.upstream.h11_transport import H11Connection, H11Transport
from tests.helpers import burst

TURN1 = turn_bytes(TURN1_EVENTS)


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def ca_file(ca: trustme.CA, tmp_path: Path) -> str:
    path = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return str(path)


@pytest.fixture
def tls_upstream(nursery: trio.Nursery, ca: trustme.CA) -> Callable[..., Any]:
    """``await tls_upstream(scripts)``: a ScriptedUpstream serving https (trustme's CA)."""

    async def start(responder: Any) -> ScriptedUpstream:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ca.issue_cert("127.0.0.1").configure_cert(context)
        upstream = ScriptedUpstream(responder, ssl_context=context)
        await nursery.start(upstream.serve)
        return upstream

    return start


def listed(client: UpstreamClient) -> int:
    """Connection objects in the client's pools, closed or not."""
    return client.pool_statistics().listed


# -- the idle sweep ------------------------------------------------------------------------


async def test_the_sweep_survives_connections_leaving_the_pool_while_it_closes_others(
    start_upstream: Any,
) -> None:
    """Requests end (and drop their connections) while the sweep awaits a close: it
    must close what it chose, whatever became of the pool's list meanwhile."""
    upstream = await start_upstream([Script.json({})])
    transport = H11Transport(max_keepalive_connections=10, keepalive_expiry=30.0)
    pool = transport.pool
    config = UpstreamConfig(base_url=upstream.base_url, max_idle_connections=0)
    client = UpstreamClient(config, TimeoutsConfig(), transport=transport)
    busy = [await pool.acquire("127.0.0.1", upstream.port, None) for _ in range(2)]
    idle = [await pool.acquire("127.0.0.1", upstream.port, None) for _ in range(3)]
    for connection in idle:
        await pool.release(connection, reuse=True)
    shrunk = False

    def shrink_first(connection: H11Connection) -> None:
        close = connection.aclose

        async def aclose() -> None:
            nonlocal shrunk
            if not shrunk:
                shrunk = True
                for other in busy:  # two requests fail meanwhile: their connections go
                    await pool.release(other, reuse=False)
            await close()

        connection.aclose = aclose  # type: ignore[method-assign]

    for connection in idle:
        shrink_first(connection)
    assert await client.close_idle() == 3
    assert shrunk
    assert (client.pool_statistics().open, listed(client)) == (0, 0)
    with trio.fail_after(10):  # a hang guard
        await upstream.wait_open_connections(0)


async def test_concurrent_acquires_close_every_expired_connection_and_share_none(
    start_upstream: Any,
) -> None:
    upstream = await start_upstream([Script.json({})])
    pool = H11Transport(max_keepalive_connections=10, keepalive_expiry=0.01).pool
    stale = [await pool.acquire("127.0.0.1", upstream.port, None) for _ in range(4)]
    for connection in stale:
        await pool.release(connection, reuse=True)
    await trio.sleep(0.05)  # all four expire
    taken: list[H11Connection] = []

    async def take() -> None:
        taken.append(await pool.acquire("127.0.0.1", upstream.port, None))

    async with trio.open_nursery() as nursery:
        for _ in range(3):
            nursery.start_soon(take)
    assert len(set(taken)) == 3 and not set(taken) & set(stale)
    assert all(c.is_closed() for c in stale)
    assert set(pool.connections) == set(taken)  # nothing expired left behind
    for connection in taken:
        await pool.release(connection, reuse=False)
    assert pool.connections == []


@pytest.mark.parametrize("scheme", ["http", "https"])
async def test_swept_connections_leave_the_pools_lists(
    scheme: str, start_upstream: Any, tls_upstream: Any, ca_file: str
) -> None:
    script = [Script.sse(TURN1_EVENTS[:4], delay=0.05)]
    upstream = await (tls_upstream(script) if scheme == "https" else start_upstream(script))
    config = UpstreamConfig(
        base_url=upstream.base_url,
        max_idle_connections=3,
        ca_bundle=ca_file if scheme == "https" else None,
    )
    client = UpstreamClient(config, TimeoutsConfig())
    for _ in range(3):  # bursts spread over several pools, then the sweep
        await burst(client, 24)
        await client.close_idle()
        # the closed ones are gone from the lists, not only closed
        assert listed(client) == client.pool_statistics().idle == 3
    with trio.fail_after(10):
        await upstream.wait_open_connections(3)
    await client.aclose()


# -- background tasks and health -----------------------------------------------------------


async def test_a_failing_sweep_does_not_stop_the_service(
    start_upstream: Any, proxai_for: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    failures = 0
    failed_thrice = trio.Event()

    async def broken(self: UpstreamClient) -> int:
        nonlocal failures
        failures += 1
        if failures == 3:
            failed_thrice.set()
        raise IndexError("list index out of range")

    monkeypatch.setattr(UpstreamClient, "close_idle", broken)
    upstream = await start_upstream([Script.sse([TURN1])])
    async with (
        proxai_for(upstream, upstream={"keepalive_expiry": 0.1}) as px,
        httpx.AsyncClient() as client,
    ):
        with trio.fail_after(10):
            await failed_thrice.wait()  # the sweep fails, and goes on
        response = await client.post(px.base_url + "/responses", json=TURN1_REQUEST)
        health = await client.get(px.url + "/healthz")
        ready = await client.get(px.url + "/readyz")
        metrics = (await client.get(px.url + "/metrics")).text
    assert (response.status_code, response.content) == (200, TURN1)
    assert (health.status_code, ready.status_code) == (200, 200)
    (line,) = [m for m in metrics.splitlines() if m.startswith("proxai_background_failures_total")]
    assert 'task="idle_sweep"' in line
    assert float(line.rsplit(" ", 1)[1]) >= 3


async def test_healthz_fails_once_the_service_cannot_serve(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with MemoryProxy([Script.sse([TURN1])]) as proxy:
        ok = await proxy.request(b"", path="/healthz", method="GET")
        # the lifespan ended (its upstream clients closed) while the server still answers
        await proxy.app.shutdown()
        health = await proxy.request(b"", path="/healthz", method="GET")
        ready = await proxy.request(b"", path="/readyz", method="GET")
        refused = await proxy.request({"model": "m", "input": "hi"})
    assert ok.status == 200
    assert (health.status, health.json()) == (503, {"status": "stopped"})
    assert (ready.status, ready.json()) == (503, {"status": "stopped"})
    assert refused.status == 503
    assert refused.outcome is not None and refused.outcome.kind is OutcomeKind.PROXY_ERROR


async def test_a_failing_shutdown_trigger_does_not_stop_the_server(
    start_upstream: Any, nursery: trio.Nursery
) -> None:
    async def broken_trigger() -> None:
        raise OSError("bad file descriptor")

    upstream = await start_upstream([Script.sse([TURN1])])
    overrides = {
        "server": {"host": "127.0.0.1", "port": 0},
        "upstream": {"base_url": upstream.base_url},
    }
    config = load_config(None, overrides=overrides)
    (url,) = await nursery.start(partial(serve, config, shutdown_trigger=broken_trigger))
    async with httpx.AsyncClient() as client:
        response = await client.post(url + "/v1/responses", json=TURN1_REQUEST)
        health = await client.get(url + "/healthz")
    assert (response.status_code, response.content) == (200, TURN1)
    assert health.status_code == 200
    nursery.cancel_scope.cancel()


async def test_failures_are_logged_first_in_full_then_at_most_once_a_minute(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    counted: list[str] = []
    failures = Failures("idle_sweep", counted.append)
    for _ in range(100):  # one failure every 0.05 s for 5 s
        with failures.contain():
            raise IndexError("list index out of range")
        await trio.sleep(0.05)
    await trio.sleep(LOG_EVERY)
    with failures.contain():
        raise IndexError("list index out of range")
    assert failures.count == 101 and counted == ["idle_sweep"] * 101
    first, summary = (r for r in caplog.records if r.name == "proxai")
    assert first.exc_info is not None and "idle_sweep failed; it goes on" in first.getMessage()
    assert "failed 100 more time(s)" in summary.getMessage()


# -- framing faults: nothing crosses between clients ---------------------------------------

FORGED = raw_response(b'{"answer_for":"forged"}')


def _client(request: RecordedRequest) -> str:
    return "A" if request.method == "HEAD" else str(request.json()["metadata"]["client"])


def _surplus_responder(variant: str) -> Callable[[RecordedRequest], bytes]:
    """Answers each client with its own answer; A's comes with a whole forged response
    after its end, which a connection reused for B would answer B with."""

    def respond(request: RecordedRequest) -> bytes:
        client = _client(request)
        body = b'{"answer_for":"%s"}' % client.encode()
        if client != "A":
            return raw_response(body)
        if variant == "content-length":  # a body longer than its Content-Length
            return raw_response(body) + FORGED
        if variant == "chunked":  # data after the last chunk
            headers = (("content-type", "application/json"), ("transfer-encoding", "chunked"))
            chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
            return raw_response(chunked, headers=headers, content_length=-1) + FORGED
        return raw_response(FORGED)  # a body on a HEAD response

    return respond


async def _raw_upstream(
    nursery: trio.Nursery, responder: Callable[[RecordedRequest], bytes], scheme: str, ca: Any
) -> RawUpstream:
    context = None
    if scheme == "https":
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ca.issue_cert("127.0.0.1").configure_cert(context)
    upstream = RawUpstream(responder, ssl_context=context)
    await nursery.start(upstream.serve)
    return upstream


def _upstream_table(scheme: str, ca_file: str) -> dict[str, Any]:
    return {"ca_bundle": ca_file} if scheme == "https" else {}


def _ask(client: str) -> dict[str, Any]:
    return {"model": "m", "input": "hi", "metadata": {"client": client}}


@pytest.mark.parametrize("scheme", ["http", "https"])
@pytest.mark.parametrize("variant", ["content-length", "chunked", "head"])
async def test_surplus_bytes_never_answer_another_client(
    variant: str, scheme: str, nursery: trio.Nursery, ca: Any, ca_file: str, proxai_for: Any
) -> None:
    upstream = await _raw_upstream(nursery, _surplus_responder(variant), scheme, ca)
    async with (
        proxai_for(upstream.base_url, upstream=_upstream_table(scheme, ca_file)) as px,
        httpx.AsyncClient() as client,
    ):
        if variant == "head":
            first = await client.head(px.base_url + "/responses")
            assert (first.status_code, first.content) == (200, b"")
        else:
            first = await client.post(px.base_url + "/responses", json=_ask("A"))
            assert (first.status_code, first.json()) == (200, {"answer_for": "A"})
        answers = [
            (await client.post(px.base_url + "/responses", json=_ask(name))).json()
            for name in ("B", "C")
        ]
        outcomes = await px.wait_for_outcomes(3)
    assert answers == [{"answer_for": "B"}, {"answer_for": "C"}]
    (anomaly,) = outcomes[0].anomalies
    assert anomaly.startswith("upstream sent more data than its response's framing allows")
    assert f"{len(FORGED)} bytes" in anomaly
    assert outcomes[0].kind is OutcomeKind.COMPLETED
    assert outcomes[1].anomalies == outcomes[2].anomalies == []
    # A's connection was closed, not pooled: B and C came on a second one
    assert upstream.connections_opened == 2


def _both_lengths(request: RecordedRequest) -> bytes:
    """A's answer has a Content-Length and a Transfer-Encoding (RFC 9112 section 6.3
    forbids it): which frames the body? Others get a plain answer."""
    client = _client(request)
    body = b'{"answer_for":"%s"}' % client.encode()
    if client != "A":
        return raw_response(body)
    headers = (("content-type", "application/json"), ("transfer-encoding", "chunked"))
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    return raw_response(chunked, headers=headers, content_length=5)


@pytest.mark.parametrize("scheme", ["http", "https"])
async def test_content_length_and_transfer_encoding_together_are_a_502(
    scheme: str, nursery: trio.Nursery, ca: Any, ca_file: str, proxai_for: Any
) -> None:
    upstream = await _raw_upstream(nursery, _both_lengths, scheme, ca)
    async with (
        proxai_for(upstream.base_url, upstream=_upstream_table(scheme, ca_file)) as px,
        httpx.AsyncClient() as client,
    ):
        refused = await client.post(px.base_url + "/responses", json=_ask("A"))
        after = await client.post(px.base_url + "/responses", json=_ask("B"))
        first, second = await px.wait_for_outcomes(2)
    assert refused.status_code == 502
    error = refused.json()["error"]
    assert error["code"] == "upstream_invalid_response"
    assert "both Content-Length and Transfer-Encoding" in error["message"]
    assert (first.kind, first.status) == (OutcomeKind.PROXY_ERROR, 502)
    assert (after.status_code, after.json()) == (200, {"answer_for": "B"})
    assert second.kind is OutcomeKind.COMPLETED
    assert upstream.connections_opened == 2  # that connection was not reused
