"""Observability: request ids, the request log, /metrics, captures and the live view."""

from __future__ import annotations

import json
import re
import signal
import threading
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import trio
from trio.testing import MockClock

from proxai.ops import capture as capture_module
from proxai.outcome import OutcomeKind
from proxai.testing import RecordedRequest, Script, Stall
from proxai.testing.memory_proxy import MemoryProxy
from proxai.testing.seed import (
    ANSWER_DELTAS,
    QUESTION,
    TURN1_EVENTS,
    TURN1_REQUEST,
    TURN2_EVENTS,
    TURN2_REQUEST,
    WEATHER_RESULT,
    seed_responder,
    turn1_stalled_script,
    turn_bytes,
)
from tests.helpers import metric
from tests.process import serve_process

TURN1 = turn_bytes(TURN1_EVENTS)
#: A client on loopback, whom the live view answers.
LOOPBACK = ("127.0.0.1", 50000)
CLIENT_KEY = "sk-client-observability-0123456789"
UPSTREAM_KEY = "sk-upstream-observability-9876543210"


USAGE = {
    "input_tokens": 120,
    "output_tokens": 45,
    "total_tokens": 165,
    "output_tokens_details": {"reasoning_tokens": 10},
}
# Turn 2 as the seed has it, with the usage a real response.completed carries.
TURN2_WITH_USAGE = [
    *TURN2_EVENTS[:-1],
    {**TURN2_EVENTS[-1], "response": {**TURN2_EVENTS[-1]["response"], "usage": USAGE}},
]


def stalling_seed(request: RecordedRequest) -> Script:
    """The seed's exchange (turn 2 with usage); a request whose metadata asks for it
    stalls mid-arguments."""
    body = request.json()
    if (body.get("metadata") or {}).get("stall"):
        return turn1_stalled_script()
    if body.get("previous_response_id"):
        return Script.sse(TURN2_WITH_USAGE)
    return seed_responder(request)


async def test_request_ids_reach_the_client_the_upstream_and_the_record(
    start_upstream: Any, proxai_for: Any
) -> None:
    upstream = await start_upstream(seed_responder)
    async with proxai_for(upstream) as px, httpx.AsyncClient() as client:
        ok = await client.post(
            px.base_url + "/responses",
            json=TURN1_REQUEST,
            headers={"x-proxai-request-id": "req_spoofed"},
        )
        bad = await client.post(px.base_url + "/responses", content=b"{not json")
        outcomes = await px.wait_for_outcomes(2)
    ok_id, bad_id = ok.headers["x-proxai-request-id"], bad.headers["x-proxai-request-id"]
    assert re.fullmatch(r"req_[0-9a-f]{24}", ok_id) and ok_id != bad_id
    assert bad.status_code == 400
    assert upstream.requests[0].header("x-proxai-request-id") == ok_id  # the spoof replaced
    assert [o.request_id for o in outcomes] == [ok_id, bad_id]


async def test_a_full_run_logs_one_json_line_per_request_and_no_secrets(
    start_upstream: Any, tmp_path: Path
) -> None:
    """The seed's two turns with the openai SDK, a stalled replay, a wrong key and a bad
    body, through a real proxai process logging JSON: the log has one line per request
    with the record's fields, and none of the prompt, the arguments, the answer or a key.
    A real process (its own log): tool_arguments (2 s) must end the stall, never a healthy
    turn however loaded the machine."""
    upstream = await start_upstream(stalling_seed)
    config = tmp_path / "proxai.toml"
    config.write_text(
        f"""
[server]
port = 0
[upstream]
base_url = "{upstream.base_url}"
api_key = "{UPSTREAM_KEY}"
[auth]
keys = ["{CLIENT_KEY}"]
[timeouts]
tool_arguments = 2.0
[logging]
format = "json"
warn_ms = 100000
"""
    )
    async with serve_process(config) as px:
        client = openai.AsyncOpenAI(base_url=px.url + "/v1", api_key=CLIENT_KEY, max_retries=0)
        stream = await client.responses.create(**TURN1_REQUEST)
        async for _ in stream:
            pass
        stream = await client.responses.create(**TURN2_REQUEST)
        async for _ in stream:
            pass
        with pytest.raises(openai.APIError):
            stream = await client.responses.create(**TURN1_REQUEST, metadata={"stall": "1"})
            async for _ in stream:
                pass
        wrong = openai.AsyncOpenAI(
            base_url=px.url + "/v1", api_key="sk-wrong-key-1111", max_retries=0
        )
        with pytest.raises(openai.AuthenticationError):
            await wrong.responses.create(**TURN1_REQUEST)
        async with httpx.AsyncClient() as raw:
            await raw.post(
                px.url + "/v1/responses",
                content=b'{"model": 5, "input": "' + QUESTION.encode() + b'"}',
                headers={"authorization": f"Bearer {CLIENT_KEY}"},
            )
        await px.read_log_until_count(rb'"logger":"proxai.request"', 5)
        assert await px.stop() == 0
    log = px.log.decode()
    lines = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    requests = [line for line in lines if line["logger"] == "proxai.request"]
    assert [r["outcome"] for r in requests] == [
        "completed",
        "completed",
        "stalled_tool_arguments",
        "unauthorized",
        "proxy_error",
    ]
    turn1, turn2, stalled, unauthorized, invalid = requests
    assert turn1["level"] == "info" and stalled["level"] == "warning"
    assert turn1["model"] == "gpt-5.4" and turn1["stream"] is True
    assert turn1["tools"] == ["get_weather", "web_search"]
    assert turn1["calls"] == [
        {
            "type": "function_call",
            "name": "get_weather",
            "call_id": "call_weather_01",
            "arguments_length": 28,
        }
    ]
    assert turn1["status"] == 200 and turn1["upstream"] == "default" and turn1["attempts"] == 1
    assert turn1["events"] == len(TURN1_EVENTS) and turn1["bytes_out"] == len(TURN1)
    assert turn1["first_byte_ms"] > 0 and turn1["total_ms"] >= turn1["first_event_ms"] > 0
    assert turn2["usage"] == {
        "input_tokens": 120,
        "output_tokens": 45,
        "total_tokens": 165,
        "reasoning_tokens": 10,
    }
    assert stalled["stalled_item"] == "function_call get_weather (call_weather_01)"
    assert unauthorized["status"] == 401 and invalid["status"] == 400
    assert all(re.fullmatch(r"req_[0-9a-f]{24}", r["request_id"]) for r in requests)
    secrets = [QUESTION, WEATHER_RESULT, "北京", *ANSWER_DELTAS, CLIENT_KEY, UPSTREAM_KEY]
    secrets += ["sk-wrong-key-1111"]
    for secret in secrets:
        assert secret not in log, secret


async def test_slow_requests_are_logged_at_warning(
    start_upstream: Any, proxai_for: Any, caplog: pytest.LogCaptureFixture
) -> None:
    upstream = await start_upstream([Script.sse([TURN1], delay=0.0)])
    caplog.set_level("INFO", logger="proxai.request")
    async with proxai_for(upstream, logging={"warn_ms": 0.001}) as px, httpx.AsyncClient() as c:
        await c.post(px.base_url + "/responses", json=TURN1_REQUEST)
        await px.wait_for_outcomes(1)
    (record,) = [r for r in caplog.records if r.name == "proxai.request"]
    assert record.levelname == "WARNING"
    assert record.getMessage().startswith("POST /v1/responses 200 completed request_id=req_")
    assert " slow=True" in record.getMessage()


async def test_metrics_count_what_happened(autojump_clock: MockClock) -> None:
    # On a virtual clock (tool_arguments 20 s): the stall is exact, and so are the durations.
    routes = [{"model": "*", "upstreams": ["default"]}]
    async with MemoryProxy(stalling_seed, routes=routes) as proxy:
        for request in (
            TURN1_REQUEST,
            TURN2_REQUEST,
            {**TURN1_REQUEST, "metadata": {"stall": "1"}},
        ):
            await proxy.request(request)
        stalled = proxy.outcomes[-1]
        text = (await proxy.request(b"", method="GET", path="/metrics")).body.decode()
    assert stalled.kind is OutcomeKind.STALLED_TOOL_ARGUMENTS and stalled.total_s == 20.0
    route = "routes[0] model='*'"
    common = {"route": route, "upstream": "default", "model": "gpt-5.4"}
    assert metric(text, "proxai_requests_total", outcome="completed", **common) == 2
    assert metric(text, "proxai_requests_total", outcome="stalled_tool_arguments", **common) == 1
    assert metric(text, "proxai_stalls_total", kind="stalled_tool_arguments") == 1
    assert metric(text, "proxai_in_flight_requests") == 0
    assert metric(text, "proxai_upstream_attempts_total", upstream="default", result="200") == 3
    assert metric(text, "proxai_time_to_first_byte_seconds_count", upstream="default") == 3
    assert metric(text, "proxai_time_to_first_event_seconds_count", upstream="default") == 3
    assert metric(text, "proxai_request_duration_seconds_count", upstream="default") == 3
    # The two whole turns took no time, the stall exactly its deadline.
    assert metric(text, "proxai_request_duration_seconds_sum", upstream="default") == 20.0
    assert metric(text, "proxai_relayed_events_total", upstream="default") > 20
    assert metric(text, "proxai_relayed_bytes_total", direction="out") > len(TURN1)
    assert metric(text, "proxai_usage_tokens_total", model="gpt-5.4", kind="output_tokens") == 45
    assert metric(text, "proxai_usage_tokens_total", model="gpt-5.4", kind="reasoning_tokens") == 10


async def test_in_flight_and_retries(autojump_clock: MockClock) -> None:
    # One upstream, revisited: by default a 503 would go to the client as it is. On a
    # virtual clock the second attempt is surely streaming (stalled) when the metrics are read.
    error = Script.json({"error": {"message": "busy"}}, status=503)
    scripts = [error, Script.sse([TURN1[:200]], then=[Stall()])]
    async with (
        MemoryProxy(scripts, retries={"max_attempts": 2}) as proxy,
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(proxy.request, TURN1_REQUEST)
        await trio.sleep(1)  # past the retry's backoff (0.25 s), well before idle's 30 s
        assert len(proxy.transport.requests) == 2
        during = (await proxy.request(b"", method="GET", path="/metrics")).body.decode()
        nursery.cancel_scope.cancel()
    assert metric(during, "proxai_in_flight_requests") == 1
    assert metric(during, "proxai_upstream_attempts_total", upstream="default", result="503") == 1
    assert metric(during, "proxai_upstream_retries_total", upstream="default") == 1


async def test_metrics_can_be_turned_off_or_moved(start_upstream: Any, proxai_for: Any) -> None:
    upstream = await start_upstream(seed_responder)
    async with (
        proxai_for(upstream, metrics={"path": "/ops/metrics"}) as px,
        httpx.AsyncClient() as client,
    ):
        moved = await client.get(px.url + "/ops/metrics")
        old = await client.get(px.url + "/metrics")
    assert moved.status_code == 200 and "proxai_requests_total" in moved.text
    assert old.status_code == 404
    async with (
        proxai_for(upstream, metrics={"enabled": False}) as px,
        httpx.AsyncClient() as client,
    ):
        assert (await client.get(px.url + "/metrics")).status_code == 404


async def test_metrics_sum_over_workers(start_upstream: Any, tmp_path: Path) -> None:
    upstream = await start_upstream([Script.sse([TURN1[:300], TURN1[300:]], delay=0.2)])
    config = tmp_path / "proxai.toml"
    config.write_text(f'[server]\nport = 0\n[upstream]\nbase_url = "{upstream.base_url}"\n')
    async with serve_process(config, "--workers", "2") as px:
        await px.read_log_until_count(rb"Running on ", 2)
        async with httpx.AsyncClient(timeout=30) as client, trio.open_nursery() as nursery:
            for _ in range(24):
                nursery.start_soon(
                    partial(client.post, px.url + "/v1/responses", json=TURN1_REQUEST)
                )
            await px.read_log_until_count(rb"proxai\.request\[\d+\]: POST", 24)
            pids = set(re.findall(rb"proxai\.request\[(\d+)\]: POST", px.log))
            scrapes = [(await client.get(px.url + "/metrics")).text for _ in range(6)]
        assert await px.stop(signal.SIGTERM) == 0
    assert len(pids) == 2  # both workers served (see test_service_process for the odds)
    for text in scrapes:  # whichever worker answers, it reports both workers' counts
        assert metric(text, "proxai_requests_total", outcome="completed") == 24


async def test_captures_hold_the_raw_exchange_with_keys_redacted(
    start_upstream: Any, proxai_for: Any, tmp_path: Path
) -> None:
    upstream = await start_upstream(seed_responder)
    capture = {"enabled": True, "dir": str(tmp_path / "captures"), "keep": 2, "max_bytes": 100000}
    async with proxai_for(upstream, capture=capture) as px, httpx.AsyncClient() as client:
        response = await client.post(
            px.base_url + "/responses",
            content=json.dumps(TURN1_REQUEST),
            headers={"authorization": "Bearer sk-client-secret", "x-trace": "t-1"},
        )
        with trio.fail_after(5):
            (folder,) = await px.wait_for_captures(1)  # written by a thread after the request
        assert list((tmp_path / "captures").iterdir()) == [folder]
        assert folder.name.endswith(response.headers["x-proxai-request-id"])
        request = (folder / "request.http").read_bytes()
        assert request.startswith(b"POST /v1/responses HTTP/1.1\r\n")
        assert b"authorization: [redacted]\r\n" in request and b"sk-client-secret" not in request
        assert b"x-trace: t-1\r\n" in request
        assert request.endswith(json.dumps(TURN1_REQUEST).encode())
        upstream_bytes = (folder / "upstream.bin").read_bytes()
        assert upstream_bytes.startswith(b"HTTP/1.1 200\r\n") and upstream_bytes.endswith(
            b"\r\n\r\n" + TURN1
        )
        assert (folder / "client.bin").read_bytes() == response.content == TURN1
        record = json.loads((folder / "outcome.json").read_text())
        assert record["kind"] == "completed" and record["truncated"] == []


async def test_a_capture_is_read_once_its_hook_fired_not_once_its_outcome_is_reported(
    start_upstream: Any, proxai_for: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The outcome is reported before a worker thread writes the capture: a test that
    reads on the outcome races that thread, one that waits for ``on_saved`` does not.
    The thread is held here, so the race is lost every time, not once in a while."""
    entered, release = threading.Event(), threading.Event()
    write = capture_module._write_private

    def held(path: Path, data: bytes) -> None:
        entered.set()
        release.wait(5)
        write(path, data)

    monkeypatch.setattr(capture_module, "_write_private", held)
    upstream = await start_upstream(seed_responder)
    capture = {"enabled": True, "dir": str(tmp_path / "captures")}
    async with proxai_for(upstream, capture=capture) as px, httpx.AsyncClient() as client:
        response = await client.post(px.base_url + "/responses", json=TURN1_REQUEST)
        with trio.fail_after(5):
            await px.wait_for_outcomes(1)
        assert await trio.to_thread.run_sync(entered.wait, 5)  # the write has begun
        assert px.captures == []
        assert list((tmp_path / "captures").glob("*/outcome.json")) == []  # not there yet
        release.set()
        with trio.fail_after(5):
            (folder,) = await px.wait_for_captures(1)
        names = ["client.bin", "outcome.json", "request.http", "upstream.bin"]
        assert sorted(p.name for p in folder.iterdir()) == names
        assert (folder / "client.bin").read_bytes() == response.content == TURN1
        assert json.loads((folder / "outcome.json").read_text())["kind"] == "completed"


async def test_captures_are_capped_and_only_the_newest_kept(
    start_upstream: Any, proxai_for: Any, tmp_path: Path
) -> None:
    upstream = await start_upstream(seed_responder)
    capture = {"enabled": True, "dir": str(tmp_path / "captures"), "keep": 2, "max_bytes": 500}
    ids = []
    async with proxai_for(upstream, capture=capture) as px, httpx.AsyncClient() as client:
        for n in range(1, 5):
            response = await client.post(px.base_url + "/responses", json=TURN1_REQUEST)
            ids.append(response.headers["x-proxai-request-id"])
            # Each saved (and the folder pruned) before the next starts: the four in order.
            with trio.fail_after(5):
                saved = await px.wait_for_captures(n)
        folders = sorted(p.name for p in (tmp_path / "captures").iterdir())
        assert folders == [f.name for f in saved[2:]]
        assert [f.rsplit("-", 1)[1] for f in folders] == ids[2:]
        newest = saved[-1]
        assert (newest / "client.bin").read_bytes() == TURN1[:500]
        record = json.loads((newest / "outcome.json").read_text())
        assert {"client.bin", "upstream.bin"} <= set(record["truncated"])


async def test_live_view_lists_open_streams(autojump_clock: MockClock) -> None:
    # On a virtual clock (tool_arguments 30 s here): 3 s into a stream stalled after six
    # events, its age and its open call's time left are exact.
    async with (
        MemoryProxy(
            [turn1_stalled_script()], live_view={"enabled": True}, tool_arguments=30.0
        ) as proxy,
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(proxy.request, TURN1_REQUEST)
        await trio.sleep(3)
        get = partial(proxy.request, b"", method="GET", client=LOOPBACK)
        streams = (await get(path="/_proxai/streams")).json()["streams"]
        page = await get(path="/_proxai/")
        events = await get(path="/_proxai/events", disconnect_after=0.5)
        nursery.cancel_scope.cancel()
    (stream,) = streams
    assert stream["model"] == "gpt-5.4" and stream["upstream"] == "default"
    assert stream["stage"] == "streaming" and stream["events"] == 6
    assert stream["age_s"] == 3.0
    (item,) = stream["items"]
    assert item["label"] == "function_call get_weather (call_weather_01)"
    assert item["streams"] == "arguments" and item["deadline_left"] == 27.0
    assert "北京" not in json.dumps(streams, ensure_ascii=False)  # shapes, never content
    assert page.status == 200
    assert dict(page.headers)[b"content-type"].startswith(b"text/html")
    assert b"<script" in page.body
    snapshot = json.loads(events.body.split(b"data: ", 1)[1].split(b"\n\n")[0])
    assert snapshot["streams"][0]["request_id"] == stream["request_id"]


async def test_live_view_is_off_by_default_and_behind_client_keys(
    start_upstream: Any, proxai_for: Any
) -> None:
    upstream = await start_upstream(seed_responder)
    async with proxai_for(upstream) as px, httpx.AsyncClient() as client:
        assert (await client.get(px.url + "/_proxai/streams")).status_code == 404
    tables = {"live_view": {"enabled": True}, "auth": {"keys": [CLIENT_KEY]}}
    async with proxai_for(upstream, **tables) as px, httpx.AsyncClient() as client:
        refused = await client.get(px.url + "/_proxai/streams")
        allowed = await client.get(
            px.url + "/_proxai/streams", headers={"authorization": f"Bearer {CLIENT_KEY}"}
        )
    assert refused.status_code == 401
    assert allowed.status_code == 200 and allowed.json()["streams"] == []


def test_live_view_answers_loopback_and_allowed_networks_only() -> None:
    from proxai.config import LiveViewConfig
    from proxai.service.live_view import LiveViewAccess

    access = LiveViewAccess(LiveViewConfig(enabled=True, allow=["10.1.0.0/16"]))
    assert access.allows("127.0.0.1") and access.allows("::1") and access.allows("::ffff:127.0.0.1")
    assert access.allows("10.1.2.3") and access.allows("::ffff:10.1.2.3")
    assert not access.allows("10.2.0.1") and not access.allows("192.168.1.5")
    assert not access.allows(None) and not access.allows("unix-socket")


async def test_a_remote_client_gets_403(start_upstream: Any) -> None:
    from proxai.config_file import load_config
    from proxai.service.app import ProxaiApp

    config = load_config(
        None, overrides={"upstream": {"base_url": "http://u/v1"}, "live_view": {"enabled": True}}
    )
    app = ProxaiApp(config)
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b""}

    scope = {
        "type": "http",
        "method": "GET",
        "path": "/_proxai/streams",
        "headers": [],
        "client": ("203.0.113.9", 5000),
    }
    await app(scope, receive, send)
    assert sent[0]["status"] == 403
    assert json.loads(sent[1]["body"])["error"]["code"] == "forbidden"
