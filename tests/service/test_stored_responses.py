"""Stored responses on upstreams that keep none (issue 23), in memory on virtual time:
the seed's two turns over HTTP to a Chat-only upstream, retrieve, input_items, delete,
scoping by client key, store: false, item_reference, and what an upstream that keeps
state is left to do."""

from __future__ import annotations

import gc
import logging
import os
from typing import Any

import pytest
import trio
import trio.testing

from proxai.outcome import OutcomeKind
from proxai.state import MemoryStore
from proxai.testing.memory_proxy import MemoryProxy
from proxai.testing.seed import TURN1_REQUEST, TURN2_REQUEST, WEATHER_RESULT, seed_responder

from .test_websocket import chat_turns

KEYS = {"keys": ["sk-a", "sk-b"]}


def key(name: str) -> list[tuple[bytes, bytes]]:
    return [(b"authorization", f"Bearer {name}".encode())]


def chat_proxy(**kwargs: Any) -> MemoryProxy:
    """proxai in front of one Chat-only upstream: the only one that can hold responses."""
    return MemoryProxy(chat_turns, upstream={"protocol": "openai_chat"}, **kwargs)


async def test_the_seed_over_http_to_a_chat_upstream_chains_from_the_stored_turn(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with chat_proxy() as proxy:
        first = await proxy.request(TURN1_REQUEST)
        completed = first.events()[-1]
        assert completed["type"] == "response.completed"
        rid = completed["response"]["id"]
        assert rid.startswith("resp_") and len(rid) >= 5 + 32  # proxai's own, unguessable
        assert completed["response"]["store"] is True
        second = await proxy.request({**TURN2_REQUEST, "previous_response_id": rid})
        done = second.events()[-1]
        assert done["type"] == "response.completed"
        assert done["response"]["previous_response_id"] == rid
    messages = proxy.transport.requests[1].json()["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool"]
    assert messages[2]["content"] == WEATHER_RESULT
    assert proxy.outcomes[0].stored_as == rid


async def test_retrieve_input_items_and_delete_answer_for_stored_responses(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with chat_proxy() as proxy:
        rid = (await proxy.request(TURN1_REQUEST)).events()[-1]["response"]["id"]
        got = await proxy.request(b"", method="GET", path=f"/v1/responses/{rid}")
        assert got.status == 200
        response = got.json()
        assert response["id"] == rid and response["status"] == "completed"
        assert [i["type"] for i in response["output"]] == ["function_call"]
        listed = await proxy.request(b"", method="GET", path=f"/v1/responses/{rid}/input_items")
        page = listed.json()
        assert page["object"] == "list" and page["has_more"] is False
        assert [i["role"] for i in page["data"]] == ["user"]
        gone = await proxy.request(b"", method="DELETE", path=f"/v1/responses/{rid}")
        assert gone.json() == {"id": rid, "object": "response.deleted", "deleted": True}
        again = await proxy.request(b"", method="GET", path=f"/v1/responses/{rid}")
        chained = await proxy.request({**TURN2_REQUEST, "previous_response_id": rid})
    # Gone: proxai's 404 (only proxai can hold a response behind a Chat-only upstream),
    # and the chained turn is refused before anything goes upstream.
    assert again.status == 404
    assert again.json()["error"]["message"] == f"Response with id '{rid}' not found."
    assert chained.status == 400
    assert chained.json()["error"]["code"] == "previous_response_not_found"
    assert len(proxy.transport.requests) == 1  # only the first turn went upstream


async def test_another_key_never_reads_a_stored_response(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with chat_proxy(auth=KEYS) as proxy:
        rid = (await proxy.request(TURN1_REQUEST, headers=key("sk-a"))).events()[-1]["response"][
            "id"
        ]
        other = await proxy.request(
            {**TURN2_REQUEST, "previous_response_id": rid}, headers=key("sk-b")
        )
        peek = await proxy.request(
            b"", method="GET", path=f"/v1/responses/{rid}", headers=key("sk-b")
        )
        own = await proxy.request(
            b"", method="GET", path=f"/v1/responses/{rid}", headers=key("sk-a")
        )
    assert other.status == 400 and other.json()["error"]["param"] == "previous_response_id"
    assert peek.status == 404
    assert own.status == 200 and own.json()["id"] == rid


async def test_store_false_is_not_stored_and_pays_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with chat_proxy() as proxy:
        first = await proxy.request({**TURN1_REQUEST, "store": False})
        rid = first.events()[-1]["response"]["id"]
        assert first.events()[-1]["response"]["store"] is False
        chained = await proxy.request({**TURN2_REQUEST, "previous_response_id": rid})
    assert chained.status == 400
    assert proxy.outcomes[0].stored_as is None


async def test_item_references_resolve_to_stored_items(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with chat_proxy() as proxy:
        first = await proxy.request(TURN1_REQUEST)
        call = next(e["item"] for e in first.events() if e["type"] == "response.output_item.done")
        unchained = {k: v for k, v in TURN2_REQUEST.items() if k != "previous_response_id"}
        request = {
            **unchained,
            "input": [
                TURN1_REQUEST["input"][0],
                {"type": "item_reference", "id": call["id"]},
                *TURN2_REQUEST["input"],
            ],
        }
        second = await proxy.request(request)
        missing = await proxy.request(
            {**request, "input": [{"type": "item_reference", "id": "fc_nobody"}]}
        )
    assert second.events()[-1]["type"] == "response.completed"
    messages = proxy.transport.requests[1].json()["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool"]
    assert missing.status == 400 and missing.json()["error"]["param"] == "input[0]"


async def test_an_upstream_that_keeps_state_is_left_to_do_so(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with MemoryProxy(seed_responder) as proxy:
        await proxy.request(TURN1_REQUEST)
        second = await proxy.request(TURN2_REQUEST)
    assert second.events()[-1]["type"] == "response.completed"
    assert proxy.transport.requests[1].json()["previous_response_id"] == "resp_01"
    assert proxy.outcomes[0].stored_as is None
    assert [o.kind for o in proxy.outcomes] == [OutcomeKind.COMPLETED, OutcomeKind.COMPLETED]


async def test_a_non_streaming_response_is_stored_too(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with chat_proxy() as proxy:
        first = await proxy.request({**TURN1_REQUEST, "stream": False})
        rid = first.json()["id"]
        second = await proxy.request(
            {**TURN2_REQUEST, "previous_response_id": rid, "stream": False}
        )
    assert second.json()["status"] == "completed"
    messages = proxy.transport.requests[1].json()["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool"]


def _rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads RSS from /proc")
async def test_storing_far_past_max_bytes_keeps_the_store_and_rss_flat(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """2,000 stored turns of ~16 KB each (32 MB) through a 2 MB store: the store stays
    under its bound (least recently used evicted) and the process does not grow with
    what went through it; the latest turns can still be chained from."""
    bound = 2_000_000
    text = "天气" * 2700  # ~16 KB of UTF-8
    request = {**TURN1_REQUEST, "input": [{"role": "user", "content": text}]}
    async with chat_proxy(state={"max_bytes": bound}) as proxy:
        store = proxy.app.state_store
        assert isinstance(store, MemoryStore)
        for _ in range(200):  # warm up: the store fills to its bound, the allocator settles
            await proxy.request(request)
        gc.collect()
        before = _rss_bytes()
        last = ""
        for _ in range(1800):
            last = (await proxy.request(request)).events()[-1]["response"]["id"]
            proxy.outcomes.clear()
            proxy.transport.requests.clear()
        gc.collect()
        grown = _rss_bytes() - before
        chained = await proxy.request({**TURN2_REQUEST, "previous_response_id": last})
        held = store.state.bytes
        records = len(store.state)
    assert held <= bound and 0 < records < 200
    assert grown < 8_000_000, f"RSS grew {grown} bytes while 29 MB went through the store"
    assert chained.events()[-1]["type"] == "response.completed"


async def test_a_response_larger_than_the_whole_store_is_served_and_not_stored(
    autojump_clock: trio.testing.MockClock,
) -> None:
    request = {**TURN1_REQUEST, "input": [{"role": "user", "content": "x" * 50_000}]}
    async with chat_proxy(state={"max_bytes": 10_000}) as proxy:
        served = await proxy.request(request)
    assert served.events()[-1]["type"] == "response.completed"
    (outcome,) = proxy.outcomes
    assert outcome.stored_as is None and outcome.kind is OutcomeKind.COMPLETED
    assert outcome.warnings == [
        "the response was not stored: larger than the whole [state] max_bytes"
    ]


async def test_stored_prompts_and_outputs_are_never_logged(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with chat_proxy(auth=KEYS) as proxy:
        first = await proxy.request(TURN1_REQUEST, headers=key("sk-a"))
        rid = first.events()[-1]["response"]["id"]
        chained = {**TURN2_REQUEST, "previous_response_id": rid}
        await proxy.request(chained, headers=key("sk-a"))
        await proxy.request(b"", method="GET", path=f"/v1/responses/{rid}", headers=key("sk-a"))
        await proxy.request(chained, headers=key("sk-b"))  # another key's: a 400
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "POST /v1/responses" in logged  # the request log did run
    for secret in ("北京", WEATHER_RESULT[:8], "适合慢跑", "sk-a", "sk-b"):
        assert secret not in logged
