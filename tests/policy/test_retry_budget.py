"""The retry budget: a share of the requests over a sliding window, never less than a
floor of retries a second (issue 20 item 13, issue 38 item 5).

The arithmetic on its own (sans-io, the time as an argument), a quiet proxai that
retries every 429, then a storm through a real proxai: 300 clients whose SDK retries
each 503 twice, against two upstreams that both answer 503, where the upstreams must
see at most 1.2 times the clients' attempts.
"""

from __future__ import annotations

import math
import re
import ssl
from typing import Any

import httpx
import openai
import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st
from trio.testing import MockClock

from proxai.config import ConfigError, RetriesConfig
from proxai.config_file import load_config
from proxai.policy.retry import RetryBudget
from proxai.testing import Script, ScriptedUpstream, open_proxai
from proxai.testing.memory_proxy import MemoryProxy
from proxai.testing.seed import TURN1_EVENTS, TURN1_REQUEST, turn_bytes
from tests.helpers import BACKUP, FALLBACK, by_host, error_json

# -- the arithmetic --------------------------------------------------------------------


def test_a_quiet_proxai_still_has_its_floor_per_window() -> None:
    budget = RetryBudget(percent=20, per_second=0.3, window=10.0)  # 3 in a window
    budget.deposit(0.0)
    assert [budget.withdraw(0.5) for _ in range(4)] == [True, True, True, False]
    assert not budget.withdraw(9.9)  # the same window
    assert budget.withdraw(10.5)  # the first slice of retries has left the window
    assert budget.withdraw(10.5) and budget.withdraw(10.5) and not budget.withdraw(10.5)


def test_the_budget_is_a_share_of_the_requests_in_the_window() -> None:
    budget = RetryBudget(percent=20, per_second=0, window=10.0)
    for _ in range(100):
        budget.deposit(1.0)
    assert sum(budget.withdraw(2.0) for _ in range(50)) == 20
    for _ in range(5):
        budget.deposit(3.0)
    assert budget.withdraw(3.0)  # 21 of 105
    assert not budget.withdraw(3.0)
    # The requests of t=1 have left the window, the retries they paid for have not:
    # they still count against the requests that come next.
    assert budget.retries_left(11.5) == 0
    for _ in range(100):
        budget.deposit(11.5)
    assert budget.retries_left(11.5) == 0  # 20% of 105, less 21
    assert budget.retries_left(12.5) == 20  # the retries of t=2 are gone: 20% of 105, less 1
    assert budget.retries_left(13.5) == 20  # and those of t=3 with their requests


def test_the_floor_is_retries_a_second_and_not_added_to_the_share() -> None:
    budget = RetryBudget(percent=20, per_second=10, window=10.0)
    budget.deposit(0.0)
    # One request in ten seconds, and still a hundred retries: a quiet proxai retries.
    assert sum(budget.withdraw(0.5) for _ in range(150)) == 100
    busy = RetryBudget(percent=20, per_second=10, window=10.0)
    for _ in range(1000):
        busy.deposit(0.0)
    # A storm: 20% of its requests, and the floor adds nothing (Finagle would add 100).
    assert sum(busy.withdraw(0.5) for _ in range(400)) == 200


def test_a_retry_is_not_a_request() -> None:
    budget = RetryBudget(percent=100, per_second=0, window=10.0)
    budget.deposit(0.0)
    assert budget.withdraw(0.0)
    assert not budget.withdraw(0.0)  # retries deposit nothing: no chain reaction


def test_a_budget_of_nothing_refuses_every_retry() -> None:
    budget = RetryBudget(percent=0, per_second=0, window=10.0)
    for _ in range(1000):
        budget.deposit(0.0)
    assert not budget.withdraw(0.0)


def test_a_percentage_above_100_lets_each_request_retry_more_than_once() -> None:
    budget = RetryBudget(percent=200, per_second=0, window=10.0)
    budget.deposit(0.0)
    assert [budget.withdraw(0.0) for _ in range(3)] == [True, True, False]


def test_a_long_silence_empties_the_window_and_the_memory_stays_fixed() -> None:
    budget = RetryBudget(percent=20, per_second=0.1, window=10.0)
    for second in range(0, 1000, 3):
        budget.deposit(float(second))
    assert budget.retries_left(10_000.0) == 1  # only the floor
    assert len(budget._requests) == len(budget._retries) == budget.slices


def test_the_config_keys_of_the_budget() -> None:
    budget = RetryBudget.from_config(
        RetriesConfig(budget_percent=50.0, budget_min_per_second=7, budget_window=30.0)
    )
    assert (budget.percent, budget.per_second, budget.window, budget.floor) == (50.0, 7, 30.0, 210)
    defaults = RetryBudget.from_config(RetriesConfig())
    # Finagle's: 20% of the requests, or 10 retries a second (100 in 10 s) if more.
    assert (defaults.percent, defaults.per_second, defaults.window) == (20.0, 10.0, 10.0)
    assert defaults.floor == 100
    for retries, message in [
        (
            {"budget_min_per_second": -1},
            "retries.budget_min_per_second: must be a number of retries a second",
        ),
        ({"budget_window": 0}, "retries.budget_window: must be a positive number"),
        ({"budget_percent": 1001}, "retries.budget_percent: must be a percentage from 0 to 1000"),
        ({"budget_percent": -1}, "retries.budget_percent: must be a percentage from 0 to 1000"),
        # the old per-window count may not go on meaning something else: it is named anew
        ({"budget_min": 3}, "retries.budget_min (a count of retries per budget_window) is now"),
    ]:
        with pytest.raises(ConfigError, match=re.escape(message)):
            load_config(
                None, overrides={"upstream": {"base_url": "http://u/v1"}, "retries": retries}
            )


#: An arrival: seconds since the last one (multiples of 1/8 s: exact in binary) and
#: whether it is a request's first attempt (a deposit) or a retry asked for.
_ARRIVALS = st.lists(
    st.tuples(st.integers(0, 40).map(lambda n: n / 8), st.booleans()), max_size=400
)


@given(
    arrivals=_ARRIVALS,
    percent=st.sampled_from([0.0, 5.0, 20.0, 33.0, 100.0, 250.0]),
    per_second=st.sampled_from([0.0, 0.1, 0.3, 0.5]),
)
def test_over_any_arrivals_retries_stay_within_the_share_of_the_requests_or_the_floor(
    arrivals: list[tuple[float, bool]], percent: float, per_second: float
) -> None:
    window = 10.0
    budget = RetryBudget(percent=percent, per_second=per_second, window=window)
    floor = budget.floor
    width = window / budget.slices
    now = 0.0
    requests: list[float] = []
    granted: list[float] = []
    for gap, is_request in arrivals:
        now += gap
        if is_request:
            budget.deposit(now)
            requests.append(now)
        elif budget.withdraw(now):
            granted.append(now)
            # At every retry granted: the retries of the last window (less one slice)
            # are at most percent% of the requests of the last window, or the floor.
            recent = sum(1 for t in granted if t > now - (window - width))
            sent = sum(1 for t in requests if t > now - window)
            assert recent <= max(percent / 100 * sent, floor) + 1e-9
        else:
            # A retry is refused only when the window (its slices up to now's) has spent
            # its share: the budget is not stingier than it says.
            first = math.floor(now / width) - budget.slices + 1
            spent = sum(1 for t in granted if math.floor(t / width) >= first)
            sent = sum(1 for t in requests if math.floor(t / width) >= first)
            assert spent + 1 > max(percent / 100 * sent, floor) - 1e-9
    # And over the whole run: the share of all requests, plus the floor once per window.
    windows = math.floor(now / width) // budget.slices + 1
    assert len(granted) <= percent / 100 * len(requests) + floor * windows + 1e-9


# -- the gate keeps it on trio's clock ------------------------------------------------


async def test_the_gates_budget_slides_with_trios_clock(autojump_clock: MockClock) -> None:
    respond = by_host(default=error_json(503), backup=error_json(503))
    retries = {
        "budget_percent": 0,
        "budget_min_per_second": 0.2,
        "budget_window": 10.0,
    }  # 2 a window
    async with MemoryProxy(respond, upstreams=BACKUP, routes=FALLBACK, retries=retries) as proxy:
        for _ in range(3):
            await proxy.request(TURN1_REQUEST)
        assert [len(o.attempts) for o in proxy.outcomes] == [2, 2, 1]  # the floor: 2
        assert proxy.outcomes[-1].retry_refused
        await trio.sleep(10.0)  # the window has slid past the first two retries
        exchange = await proxy.request(TURN1_REQUEST)
    assert exchange.outcome is not None and len(exchange.outcome.attempts) == 2


async def test_a_quiet_proxai_retries_every_429_of_a_one_upstream_route(
    autojump_clock: MockClock,
) -> None:
    """Issue 38: with a floor of 3 retries per 10 s window, the fourth request in ten
    seconds whose one upstream said ``429, Retry-After: 1`` got that 429, although
    proxai had sent four requests in all. The floor is now retries per second."""
    answers = [error_json(429, **{"retry-after": "1"}), Script.sse([turn_bytes(TURN1_EVENTS)])]
    sent = 0

    def respond(_: Any) -> Script:
        nonlocal sent
        sent += 1
        return answers[(sent - 1) % 2]  # each request's first attempt 429, its retry 200

    async with MemoryProxy(respond, retries={"max_attempts": 2}) as proxy:
        statuses = []
        for _ in range(6):
            statuses.append((await proxy.request(TURN1_REQUEST)).status)
            await trio.sleep(0.5)
    assert statuses == [200] * 6
    assert [len(o.attempts) for o in proxy.outcomes] == [2] * 6
    assert not any(o.retry_refused for o in proxy.outcomes)


# -- a storm through a real proxai -----------------------------------------------------

CLIENTS = 300
SDK_RETRIES = 2  # openai-python's default: 3 attempts per call


def _unavailable(_: Any) -> Script:
    body = {"error": {"message": "upstream overloaded", "type": "server_error"}}
    return Script.json(body, status=503)


async def test_a_storm_of_503s_on_two_upstreams_reaches_them_about_one_fifth_amplified(
    nursery: trio.Nursery,
) -> None:
    # Every client's SDK retries each 503 twice; every request fails over from the first
    # upstream to the second. Without a budget each client attempt would be 2 upstream
    # attempts; the budget keeps the retries to budget_percent of the requests in its
    # window: the floor (10 a second, 100 a window) is more than 20% of the first burst
    # (300 requests) but less than 20% of the storm's 900, so it adds nothing in all.
    first, second = ScriptedUpstream(_unavailable), ScriptedUpstream(_unavailable)
    await nursery.start(first.serve)
    await nursery.start(second.serve)
    # A long keepalive_expiry keeps the idle sweep out of the storm (issue 20 item 1's
    # sweep race is another test's subject).
    quiet = {"keepalive_expiry": 120.0}
    tables: dict[str, Any] = {
        "upstream": quiet,
        "upstreams": {"backup": {"base_url": second.base_url, **quiet}},
        "routes": [{"model": "*", "upstreams": ["default", "backup"]}],
        "retries": {},  # the defaults: each upstream once, budget 20% or 10 a second
    }
    async with open_proxai(first.base_url, **tables) as px:
        failed = 0
        # One TLS context for all (each client would load the CA bundle again: most of
        # the test's time, and no part of what it tests; the upstreams are plain HTTP).
        tls = ssl.create_default_context()

        async def one() -> None:
            # Each client its own SDK and connection pool, as 300 processes would have.
            nonlocal failed
            async with httpx.AsyncClient(timeout=60, verify=tls) as http:
                client = openai.AsyncOpenAI(
                    base_url=px.base_url, api_key="k", max_retries=SDK_RETRIES, http_client=http
                )
                with pytest.raises(openai.InternalServerError):
                    await client.chat.completions.create(
                        model="m", messages=[{"role": "user", "content": "hi"}]
                    )
            failed += 1

        started = trio.current_time()
        async with trio.open_nursery() as clients:
            for _ in range(CLIENTS):
                clients.start_soon(one)
        elapsed = trio.current_time() - started
        client_attempts = len(await px.wait_for_outcomes(CLIENTS * (SDK_RETRIES + 1)))
    upstream_attempts = len(first.requests) + len(second.requests)
    ratio = upstream_attempts / client_attempts
    print(
        f"storm: {CLIENTS} clients, {client_attempts} client attempts, "
        f"{upstream_attempts} upstream attempts ({ratio:.3f}x) in {elapsed:.1f} s"
    )
    assert failed == CLIENTS and client_attempts == CLIENTS * (SDK_RETRIES + 1)
    assert len(first.requests) == client_attempts  # every client attempt, once
    # At most 1.2x. Only a storm longer than the window (a loaded machine) may go past:
    # once the first burst's slice has left, the retries the floor gave it beyond its
    # share (100 - 60) are free again in each later window.
    floor = RetryBudget.from_config(RetriesConfig()).floor
    early_excess = max(0, floor - CLIENTS // 5)
    assert upstream_attempts <= client_attempts * 1.2 + early_excess * math.floor(elapsed / 10.0)
    assert upstream_attempts >= client_attempts * 1.1  # the budget is spent, not hoarded
    refused = sum(o.retry_refused for o in px.outcomes)
    assert refused == client_attempts - len(second.requests)
