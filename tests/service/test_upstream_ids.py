"""Another tenant's response on an upstream that keeps state (issue 38's review).

An ``openai`` or ``openai_responses`` upstream stores responses under proxai's one
upstream key: without an index of whose each is, a key B that learns A's response id
(a trace's ``gen_ai.response.id``, a log's ``url.path``) reads, deletes or chains onto
A's conversation. proxai records each such response's tenant when its id is known and
checks it before forwarding anything that names an id it does not hold itself.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
import trio.testing

from proxai.state import StateUnavailable
from proxai.testing.memory_proxy import MemoryExchange, MemoryProxy
from proxai.testing.memory_socket import open_memory_socket
from proxai.testing.redis import open_redis
from proxai.testing.seed import TURN1_EVENTS, TURN1_REQUEST, TURN2_EVENTS, TURN2_REQUEST
from proxai.testing.upstream import RecordedRequest, Script
from proxai.testing.ws_upstream import ScriptedSocketUpstream

from ..state.conftest import needs_redis
from .test_websocket import create, ws_seed

KEYS = {"keys": ["sk-a", "sk-b"]}
A = [(b"authorization", b"Bearer sk-a")]
B = [(b"authorization", b"Bearer sk-b")]
#: A whole (non-streamed) answer of the upstream, with its own ids.
WHOLE = {
    "id": "resp_whole",
    "object": "response",
    "created_at": 1764460800,
    "status": "completed",
    "model": "gpt-5.4",
    "output": [
        {
            "type": "message",
            "id": "msg_whole",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "hi", "annotations": []}],
        }
    ],
}


def stateful(request: RecordedRequest) -> Script:
    """An upstream that keeps state: turn 1 (``resp_01``, its call ``fc_01``), turn 2
    for a request naming ``resp_01``, the whole answer for one not streamed, and an
    answer for a retrieve, delete or cancel of any id."""
    path = request.target.split("?")[0]
    if request.method == "DELETE":
        rid = path.rsplit("/", 1)[1]
        return Script.json({"id": rid, "object": "response.deleted", "deleted": True})
    if path.startswith("/v1/responses/"):
        return Script.json({**WHOLE, "id": path.split("/")[3]})
    body = request.json()
    if not body.get("stream"):
        return Script.json(WHOLE)
    chained = body.get("previous_response_id") == "resp_01"
    return Script.sse(TURN2_EVENTS if chained else TURN1_EVENTS)


def get(proxy: MemoryProxy, path: str, headers: Any, method: str = "GET") -> Any:
    return proxy.request(b"", method=method, path=path, headers=headers)


def references(item_id: str) -> dict[str, Any]:
    return {**TURN1_REQUEST, "input": [{"type": "item_reference", "id": item_id}]}


async def b_tries_everything(proxy: MemoryProxy, rid: str, item_id: str) -> list[MemoryExchange]:
    """Key B naming A's response and item by every route HTTP has."""
    return [
        await get(proxy, f"/v1/responses/{rid}", B),
        await get(proxy, f"/v1/responses/{rid}?stream=true&starting_after=2", B),
        await get(proxy, f"/v1/responses/{rid}/input_items", B),
        await get(proxy, f"/v1/responses/{rid}", B, method="DELETE"),
        await get(proxy, f"/v1/responses/{rid}/cancel", B, method="POST"),
        await proxy.request({**TURN2_REQUEST, "previous_response_id": rid}, headers=B),
        await proxy.request(
            {**TURN2_REQUEST, "previous_response_id": rid, "store": False}, headers=B
        ),
        await proxy.request(references(item_id), headers=B),
    ]


def assert_refused_as_unknown(answers: list[MemoryExchange], rid: str, item_id: str) -> None:
    assert [a.status for a in answers] == [404, 404, 404, 404, 404, 400, 400, 400]
    for answer in answers[:5]:
        error = answer.json()["error"]
        assert error["message"] == f"Response with id '{rid}' not found."
        assert error["type"] == "invalid_request_error"
    for answer in answers[5:7]:
        error = answer.json()["error"]
        assert error["code"] == "previous_response_not_found"
        assert error["param"] == "previous_response_id"
    error = answers[7].json()["error"]
    assert error["code"] == "item_not_found" and error["param"] == "input[0]"
    assert item_id in error["message"]


async def test_another_key_reaches_nothing_of_an_upstream_stored_response_over_http(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """B's retrieve, stream resume, input_items, delete, cancel, previous_response_id
    (stored or not) and item_reference naming A's upstream-stored response or item are
    answered as unknown ids are, and none goes upstream (before: each was forwarded
    with proxai's upstream key)."""
    async with MemoryProxy(stateful, auth=KEYS) as proxy:
        first = await proxy.request(TURN1_REQUEST, headers=A)
        assert first.events()[-1]["response"]["id"] == "resp_01"
        whole = await proxy.request({**TURN1_REQUEST, "stream": False}, headers=A)
        assert whole.json()["id"] == "resp_whole"
        answers = await b_tries_everything(proxy, "resp_01", "fc_01")
        of_whole = await b_tries_everything(proxy, "resp_whole", "msg_whole")
    assert_refused_as_unknown(answers, "resp_01", "fc_01")
    assert_refused_as_unknown(of_whole, "resp_whole", "msg_whole")
    assert len(proxy.transport.requests) == 2  # A's two; nothing of B's went upstream


async def test_the_owner_still_reaches_its_own_upstream_stored_response(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with MemoryProxy(stateful, auth=KEYS) as proxy:
        await proxy.request(TURN1_REQUEST, headers=A)
        await proxy.request({**TURN1_REQUEST, "stream": False}, headers=A)
        answers = [
            await get(proxy, "/v1/responses/resp_01", A),
            await get(proxy, "/v1/responses/resp_01/input_items", A),
            await get(proxy, "/v1/responses/resp_whole/cancel", A, method="POST"),
            await proxy.request(TURN2_REQUEST, headers=A),
            await proxy.request(references("fc_01"), headers=A),
            await proxy.request(references("msg_whole"), headers=A),
            await get(proxy, "/v1/responses/resp_01", A, method="DELETE"),
        ]
    assert [a.status for a in answers] == [200] * 7
    assert answers[3].events() == TURN2_EVENTS
    assert len(proxy.transport.requests) == 2 + 7
    sent = proxy.transport.requests[5]
    assert sent.json()["previous_response_id"] == "resp_01"
    assert sent.header("authorization") == "Bearer sk-up"


async def test_another_key_cannot_chain_onto_it_over_a_socket(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A socket turn toward an upstream that keeps state (taken as HTTP requests) naming
    A's response: B gets the error frame, A's own socket chains."""
    async with MemoryProxy(stateful, auth=KEYS) as proxy:
        async with open_memory_socket(proxy.app, headers=A) as ws:
            await ws.send(create(TURN1_REQUEST))
            assert (await ws.response())[-1]["response"]["id"] == "resp_01"
        async with open_memory_socket(proxy.app, headers=B) as ws:
            await ws.send(create(TURN2_REQUEST))
            refused = await ws.frame()
            await ws.send(create(references("fc_01")))
            referenced = await ws.frame()
        async with open_memory_socket(proxy.app, headers=A) as ws:
            await ws.send(create(TURN2_REQUEST))
            chained = await ws.response()
    for frame in (refused, referenced):
        assert isinstance(frame, dict) and frame["type"] == "error" and frame["status"] == 400
    assert refused["error"]["code"] == "previous_response_not_found"  # type: ignore[index]
    assert referenced["error"]["code"] == "item_not_found"  # type: ignore[index]
    assert chained == TURN2_EVENTS
    assert len(proxy.transport.requests) == 2  # A's two turns


async def test_another_key_cannot_chain_onto_it_on_an_upstream_socket(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """``websocket = true``: B's turn naming A's response is refused before any frame
    goes up B's upstream socket; A's next socket chains on its own."""
    upstream = ScriptedSocketUpstream(ws_seed)
    async with trio.open_nursery() as nursery:
        await nursery.start(upstream.serve)
        async with MemoryProxy(
            stateful, auth=KEYS, upstream={"websocket": True}, socket_upstream=upstream
        ) as proxy:
            async with open_memory_socket(proxy.app, headers=A) as ws:
                await ws.send(create(TURN1_REQUEST))
                assert (await ws.response())[-1]["response"]["id"] == "resp_01"
            async with open_memory_socket(proxy.app, headers=B) as ws:
                await ws.send(create(TURN2_REQUEST))
                refused = await ws.frame()
            async with open_memory_socket(proxy.app, headers=A) as ws:
                await ws.send(create(TURN2_REQUEST))
                chained = await ws.response()
        nursery.cancel_scope.cancel()
    assert isinstance(refused, dict) and refused["type"] == "error"
    assert refused["error"]["code"] == "previous_response_not_found"
    assert chained == TURN2_EVENTS
    assert [f.json().get("previous_response_id") for f in upstream.frames] == [None, "resp_01"]


async def test_ids_the_index_does_not_know_are_refused_unless_configured(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A response created outside proxai (or before it kept the index, or evicted) has no
    owner proxai knows: refused where several tenants share the upstream key, forwarded
    with ``[state] forward_unknown_upstream_ids = true``."""
    async with MemoryProxy(stateful, auth=KEYS) as proxy:
        refused = [
            await get(proxy, "/v1/responses/resp_elsewhere", A),
            await proxy.request({**TURN2_REQUEST, "previous_response_id": "resp_x"}, headers=A),
        ]
        assert len(proxy.transport.requests) == 0
    assert [a.status for a in refused] == [404, 400]
    forwarding = {"forward_unknown_upstream_ids": True}
    async with MemoryProxy(stateful, auth=KEYS, state=forwarding) as proxy:
        await proxy.request(TURN1_REQUEST, headers=A)
        forwarded = [
            await get(proxy, "/v1/responses/resp_elsewhere", B),
            await proxy.request({**TURN2_REQUEST, "previous_response_id": "resp_x"}, headers=B),
            await get(proxy, "/v1/responses/resp_01", B),  # known, and A's: still refused
        ]
    assert [a.status for a in forwarded] == [200, 200, 404]
    assert len(proxy.transport.requests) == 3


@asynccontextmanager
async def counting_store_calls(proxy: MemoryProxy) -> AsyncIterator[list[str]]:
    store = proxy.app.state_store
    assert store is not None
    calls: list[str] = []
    for name in ("get", "put", "delete", "item", "claim", "owners"):
        method = getattr(store, name)

        def counted(*args: Any, _method: Callable[..., Any] = method, _name: str = name) -> Any:
            calls.append(_name)
            return _method(*args)

        setattr(store, name, counted)
    yield calls


@pytest.mark.parametrize("auth", [None, {"keys": ["sk-a"]}])
async def test_one_tenant_pays_no_store_call_for_an_upstream_that_keeps_state(
    autojump_clock: trio.testing.MockClock, auth: dict[str, Any] | None
) -> None:
    """With ``[auth]`` off or one key there is no one to isolate from: nothing recorded,
    nothing checked (a generation request makes no store call at all), an upstream's id
    forwarded as before."""
    async with MemoryProxy(stateful, auth=auth) as proxy, counting_store_calls(proxy) as calls:
        first = await proxy.request(TURN1_REQUEST, headers=A)
        whole = await proxy.request({**TURN1_REQUEST, "stream": False}, headers=A)
        retrieved = await get(proxy, "/v1/responses/resp_elsewhere", A)
        cancelled = await get(proxy, "/v1/responses/resp_01/cancel", A, method="POST")
    assert [first.status, whole.status, retrieved.status, cancelled.status] == [200] * 4
    assert calls == ["get"]  # the retrieve's lookup of proxai's own records, as before
    assert len(proxy.transport.requests) == 4


async def test_the_index_unavailable_is_the_503_of_a_lookup(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Fail closed: a check that cannot be made forwards nothing."""
    async with MemoryProxy(stateful, auth=KEYS) as proxy:
        await proxy.request(TURN1_REQUEST, headers=A)
        store = proxy.app.state_store

        async def down(ids: Any) -> Any:
            raise StateUnavailable("Redis: ConnectionError")

        store.owners = down  # type: ignore[method-assign,union-attr]
        answers = [
            await get(proxy, "/v1/responses/resp_01", A),
            await proxy.request(TURN2_REQUEST, headers=A),
        ]
    assert [a.status for a in answers] == [503, 503]
    assert answers[1].json()["error"]["code"] == "state_unavailable"
    assert len(proxy.transport.requests) == 1


@needs_redis
async def test_on_redis_another_key_is_refused_and_the_owner_served() -> None:
    """The index in a real Redis, shared by every proxai that names it."""
    async with open_redis() as redis:
        state = {"backend": "redis", "url": redis.url, "key_prefix": "t38:"}
        async with MemoryProxy(stateful, auth=KEYS, state=state) as proxy:
            await proxy.request(TURN1_REQUEST, headers=A)
            await proxy.request({**TURN1_REQUEST, "stream": False}, headers=A)
        async with MemoryProxy(stateful, auth=KEYS, state=state) as other:
            answers = await b_tries_everything(other, "resp_01", "fc_01")
            own = [
                await get(other, "/v1/responses/resp_whole", A),
                await other.request(TURN2_REQUEST, headers=A),
                await other.request(references("msg_whole"), headers=A),
            ]
    assert_refused_as_unknown(answers, "resp_01", "fc_01")
    assert [a.status for a in own] == [200, 200, 200]
    assert len(other.transport.requests) == 3
