"""proxai as a deployed service: a real process, real signals, real sockets.

Drain on SIGTERM, several worker processes on one port, a flood over the
concurrency limit, and oversized headers.
"""

from __future__ import annotations

import re
import signal
from pathlib import Path
from typing import Any

import httpx
import trio

from proxai.testing import RecordedRequest, Script, open_proxai
from proxai.testing.seed import TURN1_EVENTS, TURN1_REQUEST, turn_bytes
from tests.process import serve_process

TURN1 = turn_bytes(TURN1_EVENTS)
CUT = len(turn_bytes(TURN1_EVENTS[:3]))


def paced(seconds: float) -> Script:
    """Three events, then the rest after ``seconds``."""
    return Script.sse([TURN1[:CUT], TURN1[CUT:]], delay=seconds)


async def stream(client: httpx.AsyncClient, url: str, model: str, into: dict[str, Any]) -> None:
    """Stream one response into ``into``; ``into["started"]`` is set at its first chunk."""
    body = b""
    started = into.setdefault("started", trio.Event())
    async with client.stream("POST", url, json={**TURN1_REQUEST, "model": model}) as response:
        into["status"] = response.status_code
        async for chunk in response.aiter_raw():
            body += chunk
            started.set()
    into["body"], into["ended_at"] = body, trio.current_time()


async def test_sigterm_drains_streams_then_ends_the_rest(
    start_upstream: Any, tmp_path: Path
) -> None:
    def respond(request: RecordedRequest) -> Script:
        return paced(0.3) if request.json()["model"] == "short" else paced(60.0)

    # Real signals and a real drain: the short stream ends 0.3 s after the signal, far
    # inside drain_timeout (3 s) however loaded the machine; the long one is cut at it.
    upstream = await start_upstream(respond)
    config = tmp_path / "proxai.toml"
    config.write_text(
        f'[server]\nport = 0\ndrain_timeout = 3.0\n[upstream]\nbase_url = "{upstream.base_url}"\n'
    )
    async with serve_process(config) as px, httpx.AsyncClient(timeout=30) as client:
        results: dict[str, dict[str, Any]] = {"short": {}, "long": {}}
        async with trio.open_nursery() as nursery:
            for model, into in results.items():
                into["started"] = trio.Event()
                nursery.start_soon(stream, client, px.url + "/v1/responses", model, into)
            with trio.fail_after(10):
                for into in results.values():
                    await into["started"].wait()
            px.process.send_signal(signal.SIGTERM)
            signalled = trio.current_time()
            refused = False
            with trio.move_on_after(5):  # soon no longer accepting connections
                while not refused:
                    await trio.sleep(0.1)
                    try:
                        async with httpx.AsyncClient() as fresh:
                            await fresh.get(px.url + "/healthz")
                    except httpx.ConnectError:
                        refused = True
        with trio.fail_after(15):
            code = await px.stop(signal.SIGTERM)  # a second signal changes nothing
    assert refused
    assert code == 0
    short, long = results["short"], results["long"]
    assert short["body"] == TURN1  # finished within drain_timeout, untouched
    assert long["body"].startswith(TURN1[:CUT])
    tail = long["body"][CUT:].decode()
    assert tail.startswith("event: error\n") and "proxai is shutting down" in tail
    assert "event: response.failed\n" in tail
    assert 2.8 <= long["ended_at"] - signalled <= 10.0  # drain_timeout is 3 s
    assert b"drain_timeout passed: ending 1 open stream(s)" in px.log
    assert all(r.closed_at is not None for r in upstream.requests)


async def test_workers_share_one_port(start_upstream: Any, tmp_path: Path) -> None:
    upstream = await start_upstream([paced(0.3)])
    config = tmp_path / "proxai.toml"
    config.write_text(f'[server]\nport = 0\n[upstream]\nbase_url = "{upstream.base_url}"\n')
    async with serve_process(config, "--workers", "2") as px:
        await px.read_log_until_count(rb"Running on ", 2)  # both workers ready
        pids: set[bytes] = set()
        for wave in range(1, 11):  # waves of concurrent streams until both workers served
            # A new client each wave: new connections, which either worker may accept (a
            # kept-alive pool would carry every later wave to the first wave's worker).
            async with httpx.AsyncClient(timeout=30) as client:
                streams: list[dict[str, Any]] = [{} for _ in range(20)]
                async with trio.open_nursery() as nursery:
                    for into in streams:
                        nursery.start_soon(stream, client, px.url + "/v1/responses", "m", into)
            assert [s["body"] for s in streams] == [TURN1] * 20
            await px.read_log_until_count(rb"proxai\.request\[\d+\]: POST", 20 * wave)
            pids = set(re.findall(rb"proxai\.request\[(\d+)\]: POST", px.log))
            if len(pids) > 1:
                break
        code = await px.stop()
    assert len(pids) == 2, px.log.decode()
    assert code == 0


async def test_a_real_flood_keeps_accepted_streams_exact(start_upstream: Any) -> None:
    upstream = await start_upstream([paced(0.5)])
    server = {"max_concurrent_streams": 3}
    async with open_proxai(upstream.base_url, server=server) as px:
        limits = httpx.Limits(max_connections=40)
        async with httpx.AsyncClient(timeout=30, limits=limits) as client:
            results: list[httpx.Response] = []

            async def one() -> None:
                response = await client.post(px.base_url + "/responses", json=TURN1_REQUEST)
                results.append(response)

            async with trio.open_nursery() as nursery:
                for _ in range(30):
                    nursery.start_soon(one)
    accepted = [r for r in results if r.status_code == 200]
    refused = [r for r in results if r.status_code == 503]
    assert len(accepted) + len(refused) == 30
    assert 3 <= len(accepted) < 30
    assert all(r.content == TURN1 for r in accepted)
    for r in refused:
        assert r.json()["error"]["code"] == "proxy_overloaded"
        assert r.headers["retry-after"] == "1"
    assert len(upstream.requests) == len(accepted)


async def test_oversized_headers_are_refused_and_the_server_goes_on(start_upstream: Any) -> None:
    upstream = await start_upstream([Script.sse([TURN1])])
    server = {"max_header_bytes": 8192}
    async with open_proxai(upstream.base_url, server=server) as px, httpx.AsyncClient() as client:
        big = await client.post(
            px.base_url + "/responses", json=TURN1_REQUEST, headers={"x-big": "a" * 20000}
        )
        ok = await client.post(px.base_url + "/responses", json=TURN1_REQUEST)
    assert big.status_code == 431
    assert big.json()["error"]["code"] == "request_headers_too_large"
    assert len(upstream.requests) == 1 and upstream.requests[0].header("x-big") is None
    assert (ok.status_code, ok.content) == (200, TURN1)


async def test_a_second_signal_ends_the_drain_at_once(start_upstream: Any, tmp_path: Path) -> None:
    upstream = await start_upstream([paced(60.0)])
    config = tmp_path / "proxai.toml"
    config.write_text(
        f'[server]\nport = 0\ndrain_timeout = 60.0\n[upstream]\nbase_url = "{upstream.base_url}"\n'
    )
    async with serve_process(config) as px, httpx.AsyncClient(timeout=30) as client:
        result: dict[str, Any] = {"started": trio.Event()}
        async with trio.open_nursery() as nursery:
            nursery.start_soon(stream, client, px.url + "/v1/responses", "m", result)
            with trio.fail_after(10):
                await result["started"].wait()
            px.process.send_signal(signal.SIGINT)
            await px.read_log_until(rb"SIGINT: draining")
            px.process.send_signal(signal.SIGINT)
            hurried = trio.current_time()
        code = await px.stop(signal.SIGTERM)
    assert code == 0
    assert result["ended_at"] - hurried < 10.0  # not the 60 s drain_timeout
    assert b"event: response.failed" in result["body"]
    assert b"SIGINT again: ending open streams now" in px.log


async def test_create_app_runs_under_the_hypercorn_command(
    start_upstream: Any, tmp_path: Path
) -> None:
    import os
    import subprocess
    import sys

    from tests.process import ServeProcess

    upstream = await start_upstream([Script.sse([TURN1])])
    config = tmp_path / "proxai.toml"
    config.write_text(f'[upstream]\nbase_url = "{upstream.base_url}"\n')
    hypercorn = Path(sys.executable).parent / "hypercorn"
    process = await trio.lowlevel.open_process(
        [
            str(hypercorn),
            "--worker-class",
            "trio",
            "--bind",
            "127.0.0.1:0",
            "proxai.asgi:create_app()",
        ],
        env={**os.environ, "PROXAI_CONFIG": str(config)},
        stderr=subprocess.PIPE,
    )
    running = ServeProcess(process)
    try:
        url = (await running.read_log_until(rb"Running on (http://\S+)")).group(1).decode()
        async with httpx.AsyncClient() as client:
            ready = await client.get(url + "/readyz")
            response = await client.post(url + "/v1/responses", json=TURN1_REQUEST)
    finally:
        process.terminate()
        await process.wait()
    assert ready.status_code == 200
    assert (response.status_code, response.content) == (200, TURN1)


async def test_a_second_signal_to_the_workers_parent_ends_the_drain(
    start_upstream: Any, tmp_path: Path
) -> None:
    upstream = await start_upstream([paced(60.0)])
    config = tmp_path / "proxai.toml"
    config.write_text(
        f'[server]\nport = 0\ndrain_timeout = 60.0\n[upstream]\nbase_url = "{upstream.base_url}"\n'
    )
    async with serve_process(config, "--workers", "2") as px:
        await px.read_log_until_count(rb"Running on ", 2)
        result: dict[str, Any] = {"started": trio.Event()}
        async with httpx.AsyncClient(timeout=30) as client, trio.open_nursery() as nursery:
            nursery.start_soon(stream, client, px.url + "/v1/responses", "m", result)
            with trio.fail_after(10):
                await result["started"].wait()
            px.process.send_signal(signal.SIGTERM)  # to the parent only, as `kill PID` does
            # Time for the parent to handle it (two signals before its handler runs are
            # one) and its workers to start draining (they log nothing to wait on).
            await trio.sleep(2.0)
            px.process.send_signal(signal.SIGTERM)
            hurried = trio.current_time()
        assert await px.stop(signal.SIGTERM) == 0
    assert result["ended_at"] - hurried < 10.0  # not the 60 s drain_timeout
    assert b"event: response.failed" in result["body"]


async def test_workers_accept_connections_made_while_they_start(
    start_upstream: Any, tmp_path: Path
) -> None:
    upstream = await start_upstream([Script.sse([TURN1])])
    config = tmp_path / "proxai.toml"
    config.write_text(f'[server]\nport = 0\n[upstream]\nbase_url = "{upstream.base_url}"\n')
    async with serve_process(config, "--workers", "2") as px:
        # "listening" is logged as the workers start (each takes about a second to import
        # proxai): a request made now must wait in the backlog, not be refused.
        async with httpx.AsyncClient(timeout=30) as client:
            response = await client.post(px.url + "/v1/responses", json=TURN1_REQUEST)
        assert await px.stop() == 0
    assert (response.status_code, response.content) == (200, TURN1)
