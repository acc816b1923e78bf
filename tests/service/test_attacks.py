"""The new stateful surfaces as an attacker sees them (issue 38's review): what one
request can make proxai pull from its store and send upstream, what a key can hold
open on sockets, and what another key can reach. Each test is one attack; the ones
that held before the review pin why."""

from __future__ import annotations

import contextlib
from typing import Any

import orjson
import trio
import trio.testing

from proxai.testing.memory_proxy import MemoryProxy
from proxai.testing.memory_socket import Denied, open_memory_socket
from proxai.testing.seed import TURN1_REQUEST, seed_responder, turn1_script

from .test_websocket import chat_turns, create

#: The bound on what one request pulls from the store, small enough to pass in a test.
STATE_BYTES = 256 * 1024


def chat_proxy(**kwargs: Any) -> MemoryProxy:
    """proxai in front of one Chat-only upstream: proxai holds the responses."""
    server = {"websocket_max_state_bytes": STATE_BYTES, **kwargs.pop("server", {})}
    return MemoryProxy(chat_turns, upstream={"protocol": "openai_chat"}, server=server, **kwargs)


def big_message(item_id: str, size: int) -> dict[str, Any]:
    return {"type": "message", "role": "user", "id": item_id, "content": "x" * size}


async def test_item_references_cannot_amplify_one_request_past_the_state_bound(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """One stored 64 KiB item named 64 times by a 3 KiB request would send 4 MiB
    upstream (and build it in proxai's memory): what references pull in is bounded by
    ``websocket_max_state_bytes``, and past it the request is a 400 before anything
    goes upstream."""
    async with chat_proxy() as proxy:
        first = await proxy.request({**TURN1_REQUEST, "input": [big_message("msg_big", 65536)]})
        assert first.events()[-1]["type"] == "response.completed"
        refs = [{"type": "item_reference", "id": "msg_big"}] * 64
        amplified = await proxy.request({**TURN1_REQUEST, "input": refs})
        three = await proxy.request({**TURN1_REQUEST, "input": refs[:3]})
    assert amplified.status == 400
    error = amplified.json()["error"]
    assert error["code"] == "item_references_too_large"
    assert error["param"] == "input[3]"  # the fourth 64 KiB item passes 256 KiB
    assert three.events()[-1]["type"] == "response.completed"  # within it: served
    assert len(proxy.transport.requests) == 2  # the amplified one never went upstream
    assert len(proxy.transport.requests[1].body) < 4 * 65536


async def test_a_chain_cannot_grow_what_one_request_pulls_past_the_state_bound(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Each chained turn stores its whole conversation: without a bound, a chain of
    large turns makes every later turn pull (and send) more, without end. A stored
    conversation past ``websocket_max_state_bytes`` is a 400 ``previous_response_not_found``
    saying why (as a socket's own conversation is), so the client sends the whole context."""
    async with chat_proxy() as proxy:
        rid = None
        answers = []
        for turn in range(3):
            body: dict[str, Any] = {**TURN1_REQUEST, "input": [big_message(f"m{turn}", 150_000)]}
            if rid is not None:
                body["previous_response_id"] = rid
            answer = await proxy.request(body)
            answers.append(answer)
            if answer.status == 200:
                rid = answer.events()[-1]["response"]["id"]
    assert [a.status for a in answers] == [200, 200, 400]
    error = answers[2].json()["error"]
    assert error["code"] == "previous_response_not_found"
    assert "websocket_max_state_bytes" in error["message"]
    assert len(proxy.transport.requests) == 2


async def test_references_cost_the_store_one_lookup_per_distinct_id_and_a_bounded_count(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Behind an upstream that keeps state an unknown reference is no 400 (the upstream
    may hold it), so each one was a store call: a 50 MiB body of 41-byte references is
    1.2 million Redis round trips for one request. Each id is looked up once, and a
    request names at most ``MAX_ITEM_REFERENCES`` (1024) distinct ones."""
    async with MemoryProxy(seed_responder) as proxy:
        store = proxy.app.state_store
        assert store is not None
        looked_up: list[str] = []
        item = store.item

        async def counted(tenant: str, item_id: str) -> bytes | None:
            looked_up.append(item_id)
            return await item(tenant, item_id)

        store.item = counted  # type: ignore[method-assign]
        same = [{"type": "item_reference", "id": "msg_upstreams"}] * 500
        repeated = await proxy.request({**TURN1_REQUEST, "input": same})
        distinct = [{"type": "item_reference", "id": f"msg_{n}"} for n in range(1024 + 1)]
        flood = await proxy.request({**TURN1_REQUEST, "input": distinct})
    assert repeated.status == 200 and looked_up[:1] == ["msg_upstreams"]
    assert len(looked_up) == 1  # 500 references to one id: one lookup; the flood: none
    assert flood.status == 400
    assert flood.json()["error"]["code"] == "too_many_item_references"
    assert flood.json()["error"]["param"] == "input[1024]"
    assert len(proxy.transport.requests) == 1
    from proxai.protocols.responses.history import MAX_ITEM_REFERENCES

    assert MAX_ITEM_REFERENCES == 1024  # the figure docs/state.md gives


# -- sockets ------------------------------------------------------------------------------

KEYS = {"keys": ["sk-a", "sk-b"]}


def key(name: str) -> list[tuple[bytes, bytes]]:
    return [(b"authorization", f"Bearer {name}".encode())]


def warm_up(size: int) -> dict[str, Any]:
    """A warm-up frame: proxai answers it itself and keeps its input as the socket's
    state, so it holds memory with no upstream request at all."""
    return {
        "type": "response.create",
        "model": "gpt-5",
        "generate": False,
        "input": [{"type": "message", "role": "user", "content": "x" * size}],
    }


async def test_one_key_cannot_hold_sockets_without_end(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """An idle socket counts in no limit (``max_concurrent_streams`` counts its turns),
    yet each holds its conversation, up to ``websocket_max_state_bytes``, filled for
    free by warm-ups: one key opening sockets held memory without bound. A key holds
    at most ``server.websocket_max_per_key`` (32) sockets per process; the next upgrade
    is a 429 before it is accepted, and another key is unaffected."""
    async with contextlib.AsyncExitStack() as stack:
        proxy = await stack.enter_async_context(chat_proxy(auth=KEYS))
        held = []
        for _ in range(32):
            ws = await stack.enter_async_context(open_memory_socket(proxy.app, headers=key("sk-a")))
            await ws.send(warm_up(100_000))
            assert (await ws.response())[-1]["type"] == "response.completed"
            held.append(ws)
        await trio.sleep(0.1)  # the last warm-up's input becomes its socket's state
        state = sum(s.state_bytes for s in proxy.app._sockets.snapshots())
        assert state >= 32 * 100_000
        async with open_memory_socket(proxy.app, headers=key("sk-a")) as extra:
            refused = await extra.frame()
        async with open_memory_socket(proxy.app, headers=key("sk-b")) as other:
            await other.send(warm_up(10))
            answered = (await other.response())[-1]["type"]
        await held[0].close()  # one closed: its place is free again
        await held[0].finished.wait()
        async with open_memory_socket(proxy.app, headers=key("sk-a")) as again:
            await again.send(warm_up(10))
            served = (await again.response())[-1]["type"]
    assert isinstance(refused, Denied) and refused.status == 429
    error = refused.json()["error"]
    assert error["code"] == "too_many_websockets"
    assert "server.websocket_max_per_key" in error["message"]
    assert answered == "response.completed" and served == "response.completed"


async def test_frames_queued_on_a_socket_hold_at_most_one_request_body(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """While a turn runs (or its client reads nothing, up to ``client_write``), the
    frames behind it wait in the socket's queue, counted in frames only: 16 frames of
    ``max_request_body_bytes`` each (800 MiB by default) per socket, outside every
    limit. The queue holds at most one request body's bytes as well; a frame past
    that gets the ``websocket_queue_full`` error frame, as one past the count does."""
    body = 64 * 1024
    frame = {"type": "response.create", "model": "gpt-5", "input": "x" * (body - 200)}
    async with (
        MemoryProxy([turn1_script(delay=1.0)], server={"max_request_body_bytes": body}) as proxy,
        open_memory_socket(proxy.app) as ws,
    ):
        await ws.send(create(TURN1_REQUEST))  # the turn in flight
        await trio.sleep(0.1)
        for _ in range(4):
            await ws.send(frame)
        await trio.sleep(0.1)
        (snapshot,) = proxy.app._sockets.snapshots()
        errors = []
        while (got := ws.receive_nowait()) is not None:
            data = got[1]
            if isinstance(data, str) and '"websocket_queue_full"' in data:
                errors.append(data)
    assert snapshot.queued == 1  # one body's worth waits; three were refused at once
    assert len(errors) == 3


# -- what held ----------------------------------------------------------------------------


async def test_another_key_reaches_nothing_of_a_stored_response_by_any_route(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Key B holding key A's response id and item id (from a log line, a trace, a
    screenshot): retrieve, input_items, delete, previous_response_id, item_reference,
    over HTTP and over a socket, all answer as for an unknown id, and A's response is
    still there afterwards (B's delete deleted nothing)."""
    async with chat_proxy(auth=KEYS) as proxy:
        first = await proxy.request(TURN1_REQUEST, headers=key("sk-a"))
        rid = first.events()[-1]["response"]["id"]
        item_id = next(
            e["item"]["id"] for e in first.events() if e["type"] == "response.output_item.done"
        )
        b = key("sk-b")
        answers = [
            await proxy.request(b"", method="GET", path=f"/v1/responses/{rid}", headers=b),
            await proxy.request(
                b"", method="GET", path=f"/v1/responses/{rid}/input_items", headers=b
            ),
            await proxy.request(b"", method="DELETE", path=f"/v1/responses/{rid}", headers=b),
            await proxy.request({**TURN1_REQUEST, "previous_response_id": rid}, headers=b),
            await proxy.request(
                {**TURN1_REQUEST, "input": [{"type": "item_reference", "id": item_id}]}, headers=b
            ),
        ]
        async with open_memory_socket(proxy.app, headers=b) as ws:
            await ws.send(create(TURN1_REQUEST, previous_response_id=rid))
            chained = await ws.frame()
            await ws.send(create(TURN1_REQUEST, input=[{"type": "item_reference", "id": item_id}]))
            referenced = await ws.frame()
        still = await proxy.request(
            b"", method="GET", path=f"/v1/responses/{rid}", headers=key("sk-a")
        )
    assert [a.status for a in answers] == [404, 404, 404, 400, 400]
    assert answers[3].json()["error"]["code"] == "previous_response_not_found"
    assert answers[4].json()["error"]["code"] == "item_not_found"
    for frame in (chained, referenced):
        assert isinstance(frame, dict) and frame["type"] == "error" and frame["status"] == 400
    assert still.status == 200 and still.json()["id"] == rid
    assert len(proxy.transport.requests) == 1  # nothing of B's went upstream


async def test_a_compaction_is_one_upstream_request_about_the_size_of_the_clients(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Compaction as an amplifier: 2,000 of proxai's smallest compaction items (an
    empty summary each, sealed by the client itself: the digest is no signature) and a
    trigger make one summarizing request, and what goes upstream is about the client's
    own bytes (each item becomes its summary message: the prefix and the summary)."""
    from proxai.protocols.responses.compaction import Summary, seal

    item = {"type": "compaction", "encrypted_content": seal(Summary(""))}
    request = {
        "model": "gpt-5",
        "input": [item] * 2000 + [{"type": "compaction_trigger"}],
        "stream": True,
        "store": False,
    }
    async with chat_proxy() as proxy:
        answer = await proxy.request(request)
    sent = len(orjson.dumps(request))
    assert answer.status == 200
    (upstream,) = proxy.transport.requests  # one request for one compaction
    # Measured 0.81x with the default prefix; the prompt is added once.
    assert len(upstream.body) < sent + 2048
