"""SteppedUpstream: an upstream a test plays step by step, under proxai's own pool."""

from __future__ import annotations

import json

import trio
from trio.testing import MockClock

from proxai.outcome import OutcomeKind
from proxai.testing import sse_event
from proxai.testing.memory_proxy import MemoryProxy
from proxai.testing.seed import TURN2_EVENTS, TURN2_REQUEST
from proxai.testing.stepped import SteppedUpstream

BODY = {**TURN2_REQUEST, "previous_response_id": None}


def proxy_for(upstream: SteppedUpstream) -> MemoryProxy:
    return MemoryProxy([], transport_factory=upstream.transport)


async def play_whole(upstream: SteppedUpstream, index: int) -> None:
    (*_, exchange) = await upstream.wait_for_exchanges(index + 1)
    assert await exchange.head()
    created = {"type": "response.created", "sequence_number": 0, "response": {"id": "r"}}
    for event in [
        created,
        *({**e, "sequence_number": e["sequence_number"] + 1} for e in TURN2_EVENTS),
    ]:
        assert await exchange.send(sse_event(event))
    assert await exchange.end()


async def test_a_whole_response_then_the_next_on_the_same_connection(
    autojump_clock: MockClock,
) -> None:
    upstream = SteppedUpstream()
    async with upstream.running(), proxy_for(upstream) as proxy, trio.open_nursery() as nursery:
        for index in range(2):
            nursery.start_soon(play_whole, upstream, index)
            exchange = await proxy.request(BODY)
            assert exchange.outcome is not None
            assert exchange.outcome.kind is OutcomeKind.COMPLETED
            assert exchange.events()[-1]["type"] == "response.completed"
        first, second = upstream.exchanges
        assert first.connection == second.connection == 0  # pooled, then reused
        assert json.loads(first.request.body)["model"] == BODY["model"]
        stats = upstream.pool_statistics()
        assert (stats.open, stats.idle, stats.listed) == (1, 1, 1)
        assert upstream.violations == []


async def test_a_reset_closes_the_connection_and_proxai_ends_the_stream(
    autojump_clock: MockClock,
) -> None:
    upstream = SteppedUpstream()

    async def play() -> None:
        (exchange,) = await upstream.wait_for_exchanges(1)
        await exchange.head()
        created = {"type": "response.created", "sequence_number": 0, "response": {"id": "r"}}
        await exchange.send(sse_event(created))
        await exchange.reset()

    async with upstream.running(), proxy_for(upstream) as proxy, trio.open_nursery() as nursery:
        nursery.start_soon(play)
        exchange = await proxy.request(BODY)
        assert exchange.outcome is not None
        assert exchange.outcome.kind is OutcomeKind.UPSTREAM_RESET
        (played,) = upstream.exchanges
        assert played.broken and not played.gone
        await trio.testing.wait_all_tasks_blocked()
        assert upstream.pool_statistics().open == 0
        assert upstream.open_connections == 0


async def test_proxai_leaving_a_stall_closes_the_connection(autojump_clock: MockClock) -> None:
    upstream = SteppedUpstream()

    async def play() -> None:
        (exchange,) = await upstream.wait_for_exchanges(1)
        await exchange.head()

    async with upstream.running(), proxy_for(upstream) as proxy, trio.open_nursery() as nursery:
        nursery.start_soon(play)
        exchange = await proxy.request(BODY)
        assert exchange.status == 504
        (played,) = upstream.exchanges
        assert played.gone and played.finished
        assert played.gone_at == exchange.ended_at
        assert not await played.send(b"data: late\n\n")  # nobody reads it
