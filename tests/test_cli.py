"""The ``proxai`` command as a user runs it: a real process, real signals."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import trio

from proxai.testing.seed import TURN1_EVENTS, TURN1_REQUEST, seed_responder, turn_bytes


async def test_serve_proxies_and_shuts_down_on_sigterm(start_upstream: Any) -> None:
    upstream = await start_upstream(seed_responder)
    process = await trio.lowlevel.open_process(
        [
            sys.executable,
            "-m",
            "proxai",
            "serve",
            "--port",
            "0",
            "--upstream",
            upstream.base_url,
            "--api-key",
            "sk-cli",
        ],
        stderr=subprocess.PIPE,
    )
    try:
        assert process.stderr is not None
        log = b""
        with trio.fail_after(20):
            while not (match := re.search(rb"listening on (http://\S+?),? ", log)):
                chunk = await process.stderr.receive_some()
                assert chunk, log.decode()
                log += chunk
        url = match.group(1).decode()
        async with httpx.AsyncClient() as client:
            response = await client.post(url + "/v1/responses", json=TURN1_REQUEST)
        assert response.content == turn_bytes(TURN1_EVENTS)
        assert upstream.requests[0].header("authorization") == "Bearer sk-cli"
        process.send_signal(signal.SIGTERM)
        with trio.fail_after(10):
            assert await process.wait() == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def test_bad_config_stops_start_up_with_the_key_named(tmp_path: Path) -> None:
    config = tmp_path / "proxai.toml"
    config.write_text('[upstream]\nbase_url = "http://u/v1"\n[timeouts]\nidle = -1\n')
    result = await trio.run_process(
        [sys.executable, "-m", "proxai", "serve", "--config", str(config)],
        capture_stderr=True,
        check=False,
    )
    assert result.returncode == 2
    assert b"timeouts.idle: must be a positive number" in result.stderr

    result = await trio.run_process(
        [sys.executable, "-m", "proxai", "serve"], capture_stderr=True, check=False
    )
    assert result.returncode == 2
    assert b"--upstream" in result.stderr


async def test_demo_tells_the_seed_story_offline() -> None:
    started = trio.current_time()
    result = await trio.run_process(
        [
            sys.executable,
            "-m",
            "proxai",
            "demo",
            "--delay",
            "0",
            "--deadline",
            "0.5",
            "--direct-wait",
            "1",
        ],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    out = result.stdout.decode()
    assert result.returncode == 0, result.stderr.decode()
    assert trio.current_time() - started < 30
    assert 'aggregated by item: get_weather({"city": "北京", "date": "today"})' in out
    assert "web_search ws_01: searching" in out
    assert "今天北京不太适合高强度户外跑步。" in out
    assert (
        "the SDK raised APIError: upstream stalled for 0.5 s while streaming arguments of "
        "function_call get_weather (call_weather_01)" in out
    )
    assert "still waiting after 1." in out
    # Twice over HTTP, twice over the WebSocket; then the socket's own upgrade record;
    # then the two turns, retrieve and input_items in front of the Chat-only server.
    assert out.count(": completed, status 200") == 8
    assert "what the Chat server received for turn 2: messages ['user', 'assistant', 'tool']" in out
    assert "input_items.list(turn 2): ['message', 'function_call', 'function_call_output']" in out
    assert "turn 2: 6 frames, ended response.completed (resp_02): 今天北京" in out
    assert "GET /v1/responses model=None: completed, status 101" in out
    assert ": stalled_tool_arguments, status 200" in out
    assert "never the client's" in out
    assert "request_id=" not in result.stderr.decode() + out  # no stray log line in the story


async def test_demo_help_documents_its_options() -> None:
    result = await trio.run_process(
        [sys.executable, "-m", "proxai", "demo", "--help"], capture_stdout=True
    )
    for option in ("--stall-after", "--deadline", "--delay", "--direct-wait"):
        assert option.encode() in result.stdout
