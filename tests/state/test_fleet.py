"""Two proxai processes sharing one real ``redis-server`` (issue 23): a conversation
started on one goes on on the other, and survives a restart; and what proxai does
while Redis is away (503 for what needs a lookup, the rest served, storing skipped with
a warning) and once it is back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import openai
import trio

from proxai.outcome import OutcomeKind
from proxai.testing.redis import open_redis
from proxai.testing.seed import TURN1_REQUEST, TURN2_REQUEST, seed_responder
from tests.helpers import CHAT_UPSTREAM, openai_client
from tests.process import serve_process
from tests.service.test_websocket import chat_turns

from .conftest import needs_redis

pytestmark = needs_redis


def fleet_config(path: Path, upstream_url: str, redis_url: str) -> Path:
    path.write_text(
        "[server]\nport = 0\n"
        f'[upstream]\nbase_url = "{upstream_url}"\nprotocol = "openai_chat"\n'
        f'[state]\nbackend = "redis"\nurl = "{redis_url}"\ntimeout = 0.5\n'
    )
    return path


def turn_one(url: str) -> Any:
    client = openai_client(url)
    body = {k: v for k, v in TURN1_REQUEST.items() if k != "stream"}
    with client.responses.stream(**body) as stream:
        return stream.get_final_response()


def turn_two(url: str, previous: str) -> Any:
    client = openai_client(url)
    with client.responses.stream(
        model=TURN2_REQUEST["model"], previous_response_id=previous, input=TURN2_REQUEST["input"]
    ) as stream:
        return stream.get_final_response()


def retrieve(url: str, response_id: str) -> Any:
    return openai_client(url).responses.retrieve(response_id)


async def test_turn_one_on_one_process_turn_two_on_another_and_a_restart_loses_nothing(
    start_upstream: Any, tmp_path: Path
) -> None:
    upstream = await start_upstream(chat_turns)
    async with open_redis() as redis:
        config = fleet_config(tmp_path / "proxai.toml", upstream.base_url, redis.url)
        async with serve_process(config) as a, serve_process(config) as b:
            with trio.fail_after(30):
                first = await trio.to_thread.run_sync(turn_one, a.url)
                # Stored before turn 1's terminal reached the client: b has it at once.
                second = await trio.to_thread.run_sync(turn_two, b.url, first.id)
                on_b = await trio.to_thread.run_sync(retrieve, b.url, first.id)
            assert await a.stop() == 0
        assert second.status == "completed" and second.output_text == "适合慢跑。"
        assert on_b.id == first.id and on_b.status == "completed"
        messages = upstream.requests[1].json()["messages"]
        assert [m["role"] for m in messages] == ["user", "assistant", "tool"]
        # A proxai started afresh (a restart) reads both turns from Redis.
        async with serve_process(config) as restarted:
            with trio.fail_after(30):
                again = await trio.to_thread.run_sync(retrieve, restarted.url, second.id)
                items = await trio.to_thread.run_sync(
                    lambda: list(openai_client(restarted.url).responses.input_items.list(second.id))
                )
    assert again.id == second.id and again.output_text == "适合慢跑。"
    assert [i.type for i in items][::-1] == ["message", "function_call", "function_call_output"]


async def test_while_redis_is_away_lookups_get_503_and_the_rest_is_served(
    start_upstream: Any, proxai_for: Any
) -> None:
    upstream = await start_upstream(chat_turns)
    async with open_redis() as redis:
        state = {"backend": "redis", "url": redis.url, "timeout": 0.5}
        async with (
            proxai_for(upstream, upstream=CHAT_UPSTREAM, state=state) as px,
            httpx.AsyncClient(base_url=px.url, timeout=30) as http,
        ):
            with trio.fail_after(30):
                first = await trio.to_thread.run_sync(turn_one, px.url)
            await redis.stop()
            chained = {**TURN2_REQUEST, "previous_response_id": first.id}
            started = trio.current_time()
            with trio.fail_after(10):
                refused = await http.post("/v1/responses", json=chained)
            waited = trio.current_time() - started
            # Needs no lookup: served; its response is not stored, and the record says so.
            with trio.fail_after(10):
                unstored = await http.post("/v1/responses", json=TURN1_REQUEST)
                outcomes = await px.wait_for_outcomes(3)
            await redis.start()  # the same port, empty: proxai finds it again by itself
            with trio.fail_after(30):
                for _ in range(100):  # until the pool has reconnected: turn 1 is stored
                    again = await trio.to_thread.run_sync(turn_one, px.url)
                    try:
                        recovered = await trio.to_thread.run_sync(turn_two, px.url, again.id)
                        break
                    except openai.BadRequestError:
                        await trio.sleep(0.1)
    assert refused.status_code == 503
    assert refused.headers["retry-after"] == "1"
    error = refused.json()["error"]
    assert error["code"] == "state_unavailable" and error["type"] == "server_error"
    assert outcomes[1].kind is OutcomeKind.STATE_UNAVAILABLE
    assert waited < 5  # bounded by [state] timeout (0.5 s), not a hang
    assert unstored.status_code == 200 and b"response.completed" in unstored.content
    warned = outcomes[-1]
    assert warned.stored_as is None
    assert any("not stored" in w for w in warned.warnings)
    assert recovered.status == "completed" and recovered.previous_response_id == again.id


async def test_while_redis_is_away_a_chain_bound_for_an_upstream_that_keeps_state_is_forwarded(
    start_upstream: Any, proxai_for: Any
) -> None:
    """An upstream that keeps its own state (OpenAI) holds the chain: proxai's store is not
    needed for it, so Redis away must not turn the request into a 503 (issue 37): it is
    forwarded as sent, ``previous_response_id`` and all."""
    upstream = await start_upstream(seed_responder)
    async with open_redis() as redis:
        state = {"backend": "redis", "url": redis.url, "timeout": 0.5}
        async with (
            proxai_for(upstream, state=state) as px,
            httpx.AsyncClient(base_url=px.url, timeout=30) as http,
        ):
            await redis.stop()
            with trio.fail_after(10):
                chained = await http.post("/v1/responses", json=TURN2_REQUEST)
                [outcome] = await px.wait_for_outcomes(1)
    assert chained.status_code == 200 and b"response.completed" in chained.content
    [sent] = upstream.requests
    assert sent.json()["previous_response_id"] == TURN2_REQUEST["previous_response_id"]
    assert outcome.kind is OutcomeKind.COMPLETED
    assert any("sent as the client wrote it" in w for w in outcome.warnings)
