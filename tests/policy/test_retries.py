"""Retries and fallback before the first byte, on a virtual clock.

Two upstreams, ``default`` (http://upstream.test) and ``backup``
(http://backup.test), play scripts chosen by the Host header. Timeouts as in
memory_harness: first_byte 10 s, total 1000 s.
"""

from __future__ import annotations

import random
from typing import Any

import attrs
import pytest
import trio
from trio.testing import MockClock

from proxai.config import RetriesConfig
from proxai.ops.request_log import log_fields
from proxai.outcome import AttemptRecord, OutcomeKind
from proxai.policy.retry import RetryPlan, parse_retry_after
from proxai.testing import RecordedRequest, Reset, Script, Sleep, Stall
from proxai.testing.memory_proxy import MemoryProxy
from proxai.testing.seed import TURN1_EVENTS, TURN1_REQUEST, turn_bytes
from tests.helpers import BACKUP, FALLBACK, by_host, error_json

TURN1 = turn_bytes(TURN1_EVENTS)
#: Rounds: more attempts than upstreams, so upstreams are revisited after a backoff.
ON = {"max_attempts": 3, "backoff_initial": 1.0, "backoff_max": 8.0, "retry_after_max": 10.0}
#: proxai's own defaults (MemoryProxy turns retries off unless told).
DEFAULTS: dict[str, Any] = {}


def hosts(proxy: MemoryProxy) -> list[str]:
    return [(r.header("host") or "").split(".")[0] for r in proxy.transport.requests]


@pytest.mark.parametrize(
    ("primary", "kind_or_status", "at"),
    [
        (error_json(503), 503, 0.0),
        (error_json(429), 429, 0.0),
        (error_json(500), 500, 0.0),
        (Script(before_head=[Stall()]), OutcomeKind.STALLED_FIRST_BYTE, 10.0),
        (Script(before_head=[Reset()]), OutcomeKind.UPSTREAM_RESET, 0.0),
    ],
)
async def test_fallback_to_the_next_upstream_before_the_first_byte(
    autojump_clock: MockClock, primary: Script, kind_or_status: Any, at: float
) -> None:
    respond = by_host(default=primary, backup=Script.sse([TURN1]))
    async with MemoryProxy(respond, upstreams=BACKUP, routes=FALLBACK, retries=ON) as proxy:
        exchange = await proxy.request(TURN1_REQUEST)
    assert exchange.status == 200
    assert exchange.body == TURN1  # the second upstream's stream, byte for byte
    assert exchange.elapsed == at  # a fresh upstream is tried at once
    first, second = proxy.transport.requests
    assert first.body == second.body  # the request replayed byte for byte
    assert first.header("authorization") == "Bearer sk-up"
    assert second.header("authorization") == "Bearer sk-backup"
    outcome = exchange.outcome
    assert outcome is not None
    assert outcome.kind is OutcomeKind.COMPLETED
    assert outcome.upstream == "backup"
    assert outcome.route == "routes[0] model='*'"
    tried = [(a.upstream, a.status if a.status is not None else a.kind) for a in outcome.attempts]
    assert tried == [("default", kind_or_status), ("backup", 200)]


async def test_connect_refused_falls_back(autojump_clock: MockClock) -> None:
    import httpx

    def respond(request: RecordedRequest) -> Script:
        if request.header("host") == "upstream.test":
            raise httpx.ConnectError("[Errno 111] Connection refused")
        return Script.sse([TURN1])

    async with MemoryProxy(respond, upstreams=BACKUP, routes=FALLBACK, retries=ON) as proxy:
        exchange = await proxy.request(TURN1_REQUEST)
    assert (exchange.status, exchange.body) == (200, TURN1)
    assert exchange.outcome is not None
    first = exchange.outcome.attempts[0]
    assert (first.upstream, first.kind) == ("default", OutcomeKind.UPSTREAM_UNREACHABLE)


async def test_no_retry_once_a_byte_reached_the_client(autojump_clock: MockClock) -> None:
    half = len(TURN1) // 2
    cut = TURN1[: TURN1.rindex(b"\n\n", 0, half) + 2]
    respond = by_host(default=Script.sse([cut], then=[Reset()]), backup=Script.sse([TURN1]))
    async with MemoryProxy(respond, upstreams=BACKUP, routes=FALLBACK, retries=ON) as proxy:
        exchange = await proxy.request(TURN1_REQUEST)
    assert hosts(proxy) == ["upstream"]  # the backup never saw the request
    assert exchange.status == 200
    assert exchange.body.startswith(cut)
    assert exchange.events()[-1]["type"] == "response.failed"
    assert exchange.outcome is not None
    assert exchange.outcome.kind is OutcomeKind.UPSTREAM_RESET
    assert len(exchange.outcome.attempts) == 1


async def test_a_stream_that_stalls_after_its_headers_is_not_retried(
    autojump_clock: MockClock,
) -> None:
    """The upstream accepted the request and started answering: the client gets 504."""
    respond = by_host(default=Script.sse([], then=[Stall()]), backup=Script.sse([TURN1]))
    async with MemoryProxy(respond, upstreams=BACKUP, routes=FALLBACK, retries=ON) as proxy:
        exchange = await proxy.request(TURN1_REQUEST)
    assert hosts(proxy) == ["upstream"]
    assert exchange.status == 504


async def test_the_last_attempt_is_relayed_as_the_upstream_sent_it(
    autojump_clock: MockClock,
) -> None:
    respond = by_host(default=error_json(503), backup=error_json(502, **{"x-request-id": "r9"}))
    async with MemoryProxy(respond, upstreams=BACKUP, routes=FALLBACK, retries=ON) as proxy:
        exchange = await proxy.request(TURN1_REQUEST)
    assert hosts(proxy) == ["upstream", "backup", "upstream"]  # 3 attempts, around again
    assert exchange.status == 503
    assert exchange.json()["error"]["message"] == "upstream says 503"
    assert exchange.outcome is not None
    assert exchange.outcome.kind is OutcomeKind.UPSTREAM_ERROR
    assert [a.status for a in exchange.outcome.attempts] == [503, 502, 503]
    # Revisiting "default" waited the first backoff step: between 0.5 and 1 s.
    assert 0.5 <= exchange.outcome.attempts[2].started_s <= 1.0


@pytest.mark.parametrize("status", [400, 401, 404, 422])
async def test_client_errors_are_not_retried(autojump_clock: MockClock, status: int) -> None:
    respond = by_host(default=error_json(status), backup=Script.sse([TURN1]))
    async with MemoryProxy(respond, upstreams=BACKUP, routes=FALLBACK, retries=ON) as proxy:
        exchange = await proxy.request(TURN1_REQUEST)
    assert hosts(proxy) == ["upstream"]
    assert exchange.status == status


@pytest.mark.parametrize(("retry_after", "waited"), [("2", 2.0), ("100", 10.0), ("0", 0.5)])
async def test_retry_after_is_respected_up_to_its_cap(
    autojump_clock: MockClock, retry_after: str, waited: float
) -> None:
    respond = by_host(
        default=[error_json(429, **{"retry-after": retry_after}), Script.sse([TURN1])]
    )
    retries = {**ON, "backoff_initial": 0.5, "backoff_max": 0.5}  # backoff: 0.25 to 0.5 s
    async with MemoryProxy(respond, retries=retries) as proxy:
        exchange = await proxy.request(TURN1_REQUEST)
    assert (exchange.status, exchange.body) == (200, TURN1)
    first, second = proxy.transport.requests
    if retry_after == "0":
        assert 0.25 <= second.received_at - first.received_at <= waited
    else:
        assert second.received_at - first.received_at == pytest.approx(waited)


async def test_retries_never_pass_total(autojump_clock: MockClock) -> None:
    respond = by_host(default=error_json(429, **{"retry-after": "9"}))
    async with MemoryProxy(respond, retries=ON, total=5.0) as proxy:
        exchange = await proxy.request(TURN1_REQUEST)
    assert len(proxy.transport.requests) == 1  # waiting 9 s would pass total (5 s)
    assert exchange.status == 429


async def test_routes_rewrite_the_model_and_send_configured_headers(
    autojump_clock: MockClock,
) -> None:
    upstreams = {
        "backup": {
            "base_url": "http://backup.test/v1",
            "headers": {"OpenAI-Organization": "org-9", "X-Team": "core"},
        }
    }
    routes = [{"model": "gpt-*", "upstreams": ["backup"], "upstream_model": "gpt-5.4-mini"}]
    async with MemoryProxy([Script.sse([TURN1])], upstreams=upstreams, routes=routes) as proxy:
        exchange = await proxy.request(
            TURN1_REQUEST, headers=[(b"x-team", b"from-client"), (b"x-trace", b"t1")]
        )
        missing = await proxy.request({**TURN1_REQUEST, "model": "llama-3"})
    assert exchange.status == 200
    (sent,) = proxy.transport.requests
    assert sent.json() == {**TURN1_REQUEST, "model": "gpt-5.4-mini"}
    assert sent.header("openai-organization") == "org-9"
    assert sent.header("x-team") == "core"  # configured headers win over the client's
    assert sent.header("x-trace") == "t1"
    assert exchange.outcome is not None and exchange.outcome.model == TURN1_REQUEST["model"]
    assert missing.status == 404
    assert missing.json()["error"]["code"] == "model_not_found"
    assert len(proxy.transport.requests) == 1


async def test_per_upstream_timeouts_override_the_defaults(autojump_clock: MockClock) -> None:
    upstreams = {"slow": {"base_url": "http://slow.test/v1", "timeouts": {"first_byte": 25.0}}}
    routes = [{"model": "*", "upstreams": ["slow"]}]
    async with MemoryProxy(
        [Script(before_head=[Stall()])], upstreams=upstreams, routes=routes
    ) as p:
        exchange = await p.request(TURN1_REQUEST)
    assert exchange.status == 504
    assert exchange.elapsed == 25.0  # not the 10 s of [timeouts]


def test_backoff_grows_exponentially_with_jitter() -> None:
    retries = RetriesConfig(max_attempts=6, backoff_initial=1.0, backoff_max=3.0)
    plan = RetryPlan(["a"], retries, random.Random(7))
    delays = []
    for _ in range(5):
        plan.attempts.append(AttemptRecord("a", 0.0, status=503))
        following = plan.next_attempt(plan.attempts[-1])
        assert following is not None
        delays.append(following[1])
    plan.attempts.append(AttemptRecord("a", 0.0, status=503))
    assert plan.next_attempt(plan.attempts[-1]) is None  # max_attempts reached
    ceilings = [1.0, 2.0, 3.0, 3.0, 3.0]
    for delay, ceiling in zip(delays, ceilings, strict=True):
        assert ceiling / 2 <= delay <= ceiling
    assert len(set(delays)) == 5  # jittered


def test_parse_retry_after() -> None:
    assert parse_retry_after(b"3", 0.0) == 3.0
    assert parse_retry_after(b" 1.5 ", 0.0) == 1.5
    assert parse_retry_after(b"-4", 0.0) == 0.0
    assert parse_retry_after(b"Wed, 21 Oct 2015 07:28:00 GMT", 1445412470.0) == 10.0
    assert parse_retry_after(b"soon", 0.0) is None
    assert parse_retry_after(b"nan", 0.0) is None


async def test_a_retry_sleep_is_cut_short_by_the_client_leaving(autojump_clock: MockClock) -> None:
    respond = by_host(default=error_json(503, **{"retry-after": "9"}))
    async with MemoryProxy(respond, retries=ON) as proxy:
        exchange = await proxy.request(TURN1_REQUEST, disconnect_after=2.0)
        await trio.sleep(20)
    assert len(proxy.transport.requests) == 1
    assert exchange.outcome is not None
    assert exchange.outcome.kind is OutcomeKind.CLIENT_DISCONNECTED


def _busy_slots(proxy: MemoryProxy) -> list[int]:
    return [n for client in proxy.app._pipeline.clients.values() for n in client._busy]


@pytest.mark.parametrize(
    "when", ["backoff", "second_head", "streaming", "stop_second_head", "stop_backoff"]
)
async def test_every_exchange_is_closed_and_its_pool_slot_returned(
    autojump_clock: MockClock, when: str
) -> None:
    # The first answer is a 503 retried after Retry-After (5 s); the client leaves, or
    # proxai stops, during the backoff, while the retry waits for its head, or mid-stream.
    if when in ("second_head", "stop_second_head"):
        second = Script(before_head=[Stall()])
    elif when == "streaming":
        second = Script.sse(TURN1_EVENTS[:3], then=[Stall()])
    else:
        second = Script.sse([turn_bytes(TURN1_EVENTS)])
    respond = by_host(default=[error_json(503, **{"retry-after": "5"}), second])
    routes = [{"model": "*", "upstreams": ["default"]}]
    at = 2.0 if "backoff" in when else 7.0
    async with MemoryProxy(respond, routes=routes, retries=ON, first_byte=100.0) as proxy:
        async with trio.open_nursery() as nursery:

            async def stop_later() -> None:
                await trio.sleep(at)
                for relay in list(proxy.app._pipeline.relays):
                    relay.stop()

            if when.startswith("stop"):
                nursery.start_soon(stop_later)
            await proxy.request(
                TURN1_REQUEST, disconnect_after=None if when.startswith("stop") else at
            )
        await trio.sleep(1)
        assert proxy.transport.requests
        assert all(r.closed_at is not None for r in proxy.transport.requests)
        assert _busy_slots(proxy) == [0] * len(_busy_slots(proxy))


async def test_an_error_while_deciding_on_an_answer_still_closes_it(
    autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A bug between the answer's headers and the decision to relay it must not leave
    # the upstream response open or its pool slot taken.
    def broken(self: RetryPlan, attempt: AttemptRecord) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(RetryPlan, "next_attempt", broken)
    async with MemoryProxy([Script.sse([turn_bytes(TURN1_EVENTS)])]) as proxy:
        with pytest.raises(BaseException) as raised:  # wrapped in the nurseries' groups
            await proxy.request(TURN1_REQUEST)
        assert "RuntimeError('boom')" in repr(raised.value)
        await trio.sleep(1)
        assert proxy.transport.requests[0].closed_at is not None
        assert _busy_slots(proxy) == [0] * len(_busy_slots(proxy))


# -- the default: each upstream once, no revisits ------------------------------------


def attempts_planned(plan: RetryPlan, result: AttemptRecord) -> list[tuple[str, float]]:
    """Every attempt ``plan`` makes when each one ends like ``result``."""
    made = [(plan.first(), 0.0)]
    while True:
        plan.record(AttemptRecord(made[-1][0], 0.0, status=result.status, kind=result.kind))
        following = plan.next_attempt(plan.attempts[-1])
        if following is None:
            return made
        made.append(following)


@pytest.mark.parametrize(
    "failure",
    [AttemptRecord("", 0, status=429), AttemptRecord("", 0, kind=OutcomeKind.STALLED_FIRST_BYTE)],
)
def test_by_default_each_upstream_of_the_route_is_tried_once_at_once(
    failure: AttemptRecord,
) -> None:
    assert attempts_planned(RetryPlan(["a"], RetriesConfig()), failure) == [("a", 0.0)]
    plan = RetryPlan(["a", "b", "c"], RetriesConfig())
    assert attempts_planned(plan, failure) == [("a", 0.0), ("b", 0.0), ("c", 0.0)]


def test_an_upstream_a_route_names_twice_is_still_tried_once() -> None:
    plan = RetryPlan(["a", "b", "a"], RetriesConfig())
    assert attempts_planned(plan, AttemptRecord("", 0, status=503)) == [("a", 0.0), ("b", 0.0)]


def test_max_attempts_above_the_upstreams_goes_around_again_after_a_backoff() -> None:
    retries = RetriesConfig(max_attempts=5, backoff_initial=1.0, backoff_max=8.0)
    plan = RetryPlan(["a", "b"], retries, random.Random(3))
    made = attempts_planned(plan, AttemptRecord("", 0, status=503))
    assert [name for name, _ in made] == ["a", "b", "a", "b", "a"]
    assert [delay for _, delay in made[:2]] == [0.0, 0.0]
    assert all(0.5 <= delay <= 1.0 for _, delay in made[2:4])  # round 1: backoff_initial
    assert 1.0 <= made[4][1] <= 2.0  # round 2: doubled


async def test_one_upstream_that_stalls_is_a_504_after_first_byte_with_one_attempt(
    autojump_clock: MockClock,
) -> None:
    async with MemoryProxy([Script(before_head=[Stall()])], retries=DEFAULTS) as proxy:
        exchange = await proxy.request(TURN1_REQUEST)
    assert exchange.status == 504
    assert exchange.elapsed == 10.0  # first_byte, once
    assert len(proxy.transport.requests) == 1
    assert exchange.outcome is not None
    assert exchange.outcome.kind is OutcomeKind.STALLED_FIRST_BYTE
    assert not exchange.outcome.retry_refused  # nothing was due: the plan said no


async def test_one_upstream_that_says_429_is_relayed_at_once_with_its_retry_after(
    autojump_clock: MockClock,
) -> None:
    respond = by_host(default=[error_json(429, **{"retry-after": "7"}), Script.sse([TURN1])])
    async with MemoryProxy(respond, retries=DEFAULTS) as proxy:
        exchange = await proxy.request(TURN1_REQUEST)
    assert exchange.status == 429
    assert exchange.json()["error"]["message"] == "upstream says 429"
    assert (b"retry-after", b"7") in exchange.headers
    assert exchange.elapsed == 0.0
    assert len(proxy.transport.requests) == 1  # the client's SDK decides when to try again


@pytest.mark.parametrize(
    ("failure", "status", "at"),
    [(error_json(503), 503, 0.0), (Script(before_head=[Stall()]), 504, 20.0)],
)
async def test_two_upstreams_are_each_tried_once_and_never_revisited(
    autojump_clock: MockClock, failure: Script, status: int, at: float
) -> None:
    async with MemoryProxy(
        by_host(default=failure, backup=failure), upstreams=BACKUP, routes=FALLBACK, retries={}
    ) as proxy:
        exchange = await proxy.request(TURN1_REQUEST)
    assert hosts(proxy) == ["upstream", "backup"]
    assert exchange.status == status
    assert exchange.elapsed == at  # the second one tried at once
    assert exchange.outcome is not None and exchange.outcome.upstream == "backup"


async def test_max_attempts_above_the_upstreams_revisits_them_after_a_backoff(
    autojump_clock: MockClock,
) -> None:
    retries = {**ON, "max_attempts": 4}
    respond = by_host(default=error_json(503), backup=error_json(502))
    async with MemoryProxy(respond, upstreams=BACKUP, routes=FALLBACK, retries=retries) as proxy:
        exchange = await proxy.request(TURN1_REQUEST)
    assert hosts(proxy) == ["upstream", "backup", "upstream", "backup"]
    assert exchange.status == 502
    assert exchange.outcome is not None
    started = [a.started_s for a in exchange.outcome.attempts]
    assert started[:2] == [0.0, 0.0]
    # Each revisit waits the first round's backoff (1 s, jittered), as before.
    assert 0.5 <= started[2] <= 1.0
    assert 0.5 <= started[3] - started[2] <= 1.0


async def test_a_storm_of_429s_reaches_the_upstreams_at_most_one_fifth_amplified(
    autojump_clock: MockClock,
) -> None:
    # Every upstream takes a second to say 429, so retries overlap as in a real storm.
    slow_429 = attrs.evolve(error_json(429), before_head=[Sleep(1.0)])
    clients = 1000  # 20% of them is past the floor (10 retries a second, 100 a window)
    async with (
        MemoryProxy(
            by_host(default=slow_429, backup=slow_429),
            upstreams=BACKUP,
            routes=FALLBACK,
            retries=DEFAULTS,
        ) as proxy,
        trio.open_nursery() as nursery,
    ):
        for _ in range(clients):
            nursery.start_soon(proxy.request, TURN1_REQUEST)
    attempts = len(proxy.transport.requests)
    retried = attempts - clients
    assert retried == clients * 0.2  # 20% of the requests of the window (above the floor)
    refused = [o for o in proxy.outcomes if o.retry_refused]
    assert len(refused) == clients - retried  # each request had one retry due
    assert all(o.status == 429 and len(o.attempts) == 1 for o in refused)
    assert log_fields(refused[0])["retry_refused"] is True
    assert proxy.app._metrics is not None
    registry = proxy.app._metrics.registry
    assert registry.get_sample_value("proxai_retries_refused_total") == len(refused)


@pytest.mark.parametrize(
    ("budget_min_per_second", "status", "tried"),
    [
        (1, 200, ["upstream", "backup"]),  # a lone request fails over within the minimum
        (0, 503, ["upstream"]),  # no budget at all: the first failure goes to the client
    ],
)
async def test_the_budgets_minimum_decides_whether_a_lone_request_fails_over(
    autojump_clock: MockClock, budget_min_per_second: int, status: int, tried: list[str]
) -> None:
    respond = by_host(default=error_json(503), backup=Script.sse([TURN1]))
    retries = {"budget_percent": 0, "budget_min_per_second": budget_min_per_second}
    async with MemoryProxy(respond, upstreams=BACKUP, routes=FALLBACK, retries=retries) as proxy:
        exchange = await proxy.request(TURN1_REQUEST)
    assert exchange.status == status
    assert hosts(proxy) == tried
    assert exchange.outcome is not None
    assert exchange.outcome.retry_refused is (budget_min_per_second == 0)
