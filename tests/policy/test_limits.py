"""The limits' arithmetic, sans-io: sliding windows that never let more than the limit
through in any 60 s, Retry-After that is exactly when the next request passes, token
charges, slots and their leases, the rules per key, and OpenAI's header formats."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxai.config import KeyLimitsConfig, LimitsConfig
from proxai.config_file import load_config
from proxai.policy.auth import ClientKeys
from proxai.policy.limits import (
    MAX_PENDING_RELEASES,
    RELEASE_BATCH,
    WINDOW,
    Decision,
    KeyRule,
    Limit,
    LimitRules,
    LimitsState,
    PendingReleases,
    Release,
    WindowView,
    estimated_tokens,
    ratelimit_headers,
    reset_text,
    retry_after_headers,
)
from proxai.protocols.chat.reader import chat_usage
from proxai.protocols.messages.reader import messages_usage
from proxai.protocols.responses.reader import responses_usage
from proxai.protocols.table import UsageReader

T = "a" * 64
#: Arrival gaps in quarter seconds: exact binary fractions, so window edges are exact.
GAPS = st.lists(st.integers(0, 40).map(lambda q: q / 4), min_size=1, max_size=120)


def admitted_in_window(times: list[float], end: float) -> int:
    """How many of ``times`` fall in the window ``(end - 60, end]``."""
    return sum(1 for t in times if end - WINDOW < t <= end)


@given(gaps=GAPS, rpm=st.integers(1, 8))
def test_no_60_s_window_ever_holds_more_than_the_limit(gaps: list[float], rpm: int) -> None:
    state = LimitsState(lease=30.0)
    rule = KeyRule("k", requests_per_minute=rpm)
    now, admitted = 1000.0, []
    for i, gap in enumerate(gaps):
        now += gap
        decision = state.admit(T, rule, f"r{i}", 0, now)
        if decision.admitted:
            admitted.append(now)
            state.finish(T, rule, f"r{i}", 0, now)
            continue
        # Refused only when the window is full, and Retry-After is exactly when a
        # request would pass: the window then has room, a moment before it was full.
        assert decision.refused is Limit.REQUESTS
        assert admitted_in_window(admitted, now) == rpm
        retry = decision.retry_after
        assert retry > 0
        assert admitted_in_window(admitted, now + retry) < rpm
        assert admitted_in_window(admitted, now + retry - 0.001) == rpm
    # Every window, wherever it starts (it is fullest ending at an admission).
    assert all(admitted_in_window(admitted, t) <= rpm for t in admitted)


@given(gaps=GAPS, rpm=st.integers(1, 8))
def test_a_request_is_refused_only_when_the_window_is_full(gaps: list[float], rpm: int) -> None:
    """Exact, not merely safe: as many pass as the limit allows."""
    state = LimitsState(lease=30.0)
    rule = KeyRule("k", requests_per_minute=rpm)
    now, admitted = 1000.0, []
    for i, gap in enumerate(gaps):
        now += gap
        full = admitted_in_window(admitted, now) >= rpm
        decision = state.admit(T, rule, f"r{i}", 0, now)
        assert decision.admitted is not full
        if decision.admitted:
            admitted.append(now)
        view = decision.requests
        assert view is not None
        assert view.used == admitted_in_window(admitted, now)
        assert view.remaining == rpm - view.used


@given(
    steps=st.lists(
        st.tuples(st.integers(0, 40).map(lambda q: q / 4), st.integers(0, 5000)),
        min_size=1,
        max_size=80,
    ),
    tpm=st.integers(1, 10_000),
)
def test_tokens_admit_while_the_window_has_room_and_retry_when_it_will(
    steps: list[tuple[float, int]], tpm: int
) -> None:
    state = LimitsState(lease=30.0)
    rule = KeyRule("k", tokens_per_minute=tpm)
    now = 1000.0
    charges: list[tuple[float, int]] = []
    for i, (gap, tokens) in enumerate(steps):
        now += gap
        in_window = sum(n for at, n in charges if now - WINDOW < at <= now)
        decision = state.admit(T, rule, f"r{i}", 0, now)
        assert decision.admitted is (in_window < tpm)
        assert decision.tokens == WindowView(
            tpm,
            max(0, tpm - in_window),
            in_window,
            decision.tokens.reset if decision.tokens else 0.0,
        )
        if decision.admitted:
            state.finish(T, rule, f"r{i}", tokens, now)  # charged when its usage is known
            if tokens:
                charges.append((now, tokens))
        else:
            later = now + decision.retry_after
            assert sum(n for at, n in charges if later - WINDOW < at <= later) < tpm
            before = later - 0.001
            assert sum(n for at, n in charges if before - WINDOW < at <= before) >= tpm


@given(
    ops=st.lists(st.tuples(st.booleans(), st.integers(0, 9)), max_size=100),
    streams=st.integers(1, 4),
    fleet=st.integers(0, 6),
)
def test_slots_never_exceed_the_key_or_the_fleet(
    ops: list[tuple[bool, int]], streams: int, fleet: int
) -> None:
    state = LimitsState(lease=30.0)
    rules = {t: KeyRule(t, max_concurrent_streams=streams) for t in ("a", "b")}
    open_slots: dict[str, str] = {}
    for n, (start, which) in enumerate(ops):
        tenant = "a" if which % 2 else "b"
        if start:
            slot = f"s{n}"
            decision = state.admit(tenant, rules[tenant], slot, fleet, 1000.0)
            mine = sum(1 for t in open_slots.values() if t == tenant)
            if mine >= streams:
                assert decision.refused is Limit.STREAMS
            elif fleet and len(open_slots) >= fleet:
                assert decision.refused is Limit.FLEET_STREAMS
            else:
                assert decision.admitted
                open_slots[slot] = tenant
        elif open_slots:
            slot = sorted(open_slots)[which % len(open_slots)]
            state.finish(open_slots.pop(slot), rules[tenant], slot, 0, 1000.0)
        assert state.fleet_streams == (len(open_slots) if fleet else 0)


def test_a_slot_not_renewed_lapses_with_its_lease_and_a_renewed_one_does_not() -> None:
    state = LimitsState(lease=10.0)
    rule = KeyRule("k", max_concurrent_streams=1)
    assert state.admit(T, rule, "held", 1, 0.0).admitted
    assert state.admit(T, rule, "other", 1, 9.0).refused is Limit.STREAMS
    state.renew([(T, "held")], 9.0)  # the holder is alive: good until 19 s
    assert state.admit(T, rule, "other", 1, 18.9).refused is Limit.STREAMS
    # Its process died (no renewal): the slot is free once the lease ends.
    assert state.admit(T, rule, "other", 1, 19.0).admitted


def test_a_late_charge_is_dated_when_its_request_ended() -> None:
    """A release sent again after a backend came back charges its tokens as of the
    request's end: they leave the window a minute after it, not after the send."""
    state = LimitsState(lease=30.0)
    rule = KeyRule("k", tokens_per_minute=100)
    state.finish(T, rule, "on-time", 30, 50.0)
    state.finish(T, rule, "late", 80, 55.0, age=45.0)  # ended at 10 s, sent at 55 s
    refused = state.admit(T, rule, "next", 0, 55.0)
    assert refused.refused is Limit.TOKENS and refused.tokens is not None
    assert refused.tokens.used == 110
    assert refused.retry_after == 15.0  # the late one leaves at 70 s: 30 < 100
    assert state.admit(T, rule, "next", 0, 70.0).admitted
    state.finish(T, rule, "too-late", 500, 71.0, age=WINDOW)  # out of the window already
    assert state.admit(T, rule, "after", 0, 71.0).admitted


def test_pending_releases_are_sent_until_answered_and_an_admissions_twice() -> None:
    rule = KeyRule("k", tokens_per_minute=1000)
    pending = PendingReleases()
    pending.add(Release(T, rule, "ended", 40), 10.0)  # a release that timed out
    pending.add(Release(T, rule, "admitted"), 12.0, rounds=2)  # an admission that did
    (batch,) = pending.due(20.0)
    assert [(r.slot, r.tokens, r.age) for r in batch] == [("ended", 40, 10.0), ("admitted", 0, 8.0)]
    assert len(pending) == 2  # not answered yet: nothing dropped
    pending.answered(batch)
    (again,) = pending.due(21.0)
    assert [r.slot for r in again] == ["admitted"]  # its own late script may follow the first
    pending.answered(again)
    assert len(pending) == 0 and pending.due(22.0) == []


def test_a_charge_pending_past_the_window_is_not_made_and_charges_are_made_once() -> None:
    rule = KeyRule("k", tokens_per_minute=1000)
    pending = PendingReleases()
    pending.add(Release(T, rule, "old", 40), 0.0)
    pending.add(Release(T, rule, "twice", 50), 0.0, rounds=2)
    (batch,) = pending.due(WINDOW)
    assert [r.tokens for r in batch] == [0, 0]  # a minute later: nothing left to charge
    pending = PendingReleases()
    pending.add(Release(T, rule, "twice", 50), 0.0, rounds=2)
    (first,) = pending.due(1.0)
    pending.answered(first)
    (second,) = pending.due(2.0)
    assert [r.tokens for r in first] == [50] and [r.tokens for r in second] == [0]


def test_pending_releases_are_bounded_and_sent_in_batches() -> None:
    rule = KeyRule("k")
    pending = PendingReleases()
    for i in range(MAX_PENDING_RELEASES + 5):
        pending.add(Release(T, rule, f"s{i}"), float(i))
    assert len(pending) == MAX_PENDING_RELEASES  # the oldest went: their leases free them
    batches = pending.due(1e6)
    assert all(len(b) <= RELEASE_BATCH for b in batches)
    slots = [r.slot for b in batches for r in b]
    assert slots[0] == "s5" and len(slots) == MAX_PENDING_RELEASES


def test_refused_requests_are_not_counted() -> None:
    state = LimitsState(lease=30.0)
    rule = KeyRule("k", requests_per_minute=1)
    assert state.admit(T, rule, "1", 0, 0.0).admitted
    for t in range(1, 60):
        assert not state.admit(T, rule, f"x{t}", 0, float(t)).admitted
    assert state.admit(T, rule, "2", 0, 60.0).admitted  # the first left the window


def test_the_state_of_an_unused_key_is_let_go() -> None:
    state = LimitsState(lease=30.0)
    rule = KeyRule("k", requests_per_minute=5, max_concurrent_streams=2)
    for i in range(3):
        state.admit(f"{i}" * 64, rule, f"s{i}", 0, 0.0)
        state.finish(f"{i}" * 64, rule, f"s{i}", 0, 61.0)
    assert state.use(61.0) == []


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (0.012, "12ms"),
        (0.0001, "1ms"),
        (1, "1s"),
        (1.5, "1.5s"),
        (20.131, "20.131s"),
        (59.9999, "1m0s"),
        (60, "1m0s"),
        (360, "6m0s"),
        (90.25, "1m30.25s"),
    ],
)
def test_reset_is_written_as_openai_writes_it(seconds: float, text: str) -> None:
    assert reset_text(seconds) == text


def test_retry_after_is_whole_seconds_rounded_up_and_milliseconds() -> None:
    assert retry_after_headers(12.3) == [(b"retry-after", b"13"), (b"retry-after-ms", b"12300")]
    assert retry_after_headers(0.0) == [(b"retry-after", b"1"), (b"retry-after-ms", b"1")]


def test_headers_name_only_the_limits_the_key_has() -> None:
    decision = Decision(requests=WindowView(10, 7, 3, 42.5))
    assert ratelimit_headers(decision) == [
        (b"x-ratelimit-limit-requests", b"10"),
        (b"x-ratelimit-remaining-requests", b"7"),
        (b"x-ratelimit-reset-requests", b"42.5s"),
    ]
    both = Decision(requests=WindowView(10, 7, 3, 1), tokens=WindowView(100, 0, 130, 360))
    assert [n for n, _ in ratelimit_headers(both)][3:] == [
        b"x-ratelimit-limit-tokens",
        b"x-ratelimit-remaining-tokens",
        b"x-ratelimit-reset-tokens",
    ]
    assert ratelimit_headers(Decision()) == []


@pytest.mark.parametrize(
    ("read", "usage", "tokens"),
    [
        (responses_usage, {"input_tokens": 30, "output_tokens": 20, "total_tokens": 50}, 50),
        (chat_usage, {"prompt_tokens": 7, "completion_tokens": 5, "total_tokens": 12}, 12),
        (chat_usage, {"prompt_tokens": 7, "completion_tokens": 5}, 12),
        (  # Anthropic: cache reads and writes are input outside input_tokens
            messages_usage,
            {"input_tokens": 3, "output_tokens": 9, "cache_read_input_tokens": 100},
            112,
        ),
        (messages_usage, {"output_tokens": 9}, 9),
        (responses_usage, {"input_tokens": True, "foo": 3}, None),
        (chat_usage, {"prompt_tokens": -4}, None),
        (responses_usage, {}, None),
    ],
)
def test_tokens_charged_from_each_apis_usage(
    read: UsageReader, usage: dict[str, object], tokens: int | None
) -> None:
    """Each API's reader puts its usage in one shape, whose ``charged`` limits read."""
    assert read(usage).charged == tokens


def test_an_estimate_counts_the_request_bytes_and_the_events() -> None:
    assert estimated_tokens(400, 25, 9000) == 125
    assert estimated_tokens(400, 0, 800) == 300  # a body that was not a stream


def digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def test_rules_by_plain_key_digest_and_star_each_key_its_own_window() -> None:
    limits = LimitsConfig(
        fleet_max_concurrent_streams=5,
        keys=[
            KeyLimitsConfig(key="sk-alpha", name="alpha", requests_per_minute=10),
            KeyLimitsConfig(key="sha256:" + digest("sk-beta"), tokens_per_minute=100),
            KeyLimitsConfig(key="sk-exempt"),
            KeyLimitsConfig(key="*", requests_per_minute=2),
        ],
    )
    keys = ClientKeys.from_config(
        load_config(
            None,
            overrides={
                "upstream": {"base_url": "http://x.test"},
                "auth": {"keys": ["sk-alpha", "sk-beta", "sk-exempt", "sk-gamma"]},
            },
        ).auth
    )
    rules = LimitRules.from_config(limits, keys)
    assert rules is not None
    assert rules.rule_for(digest("sk-alpha")) == KeyRule("alpha", requests_per_minute=10)
    beta = rules.rule_for(digest("sk-beta"))
    assert beta == KeyRule("sha256:" + digest("sk-beta")[:12], tokens_per_minute=100)
    assert rules.rule_for(digest("sk-exempt")) == KeyRule("sha256:" + digest("sk-exempt")[:12])
    gamma = rules.rule_for(digest("sk-gamma"))
    assert gamma is not None and gamma.requests_per_minute == 2
    assert "sk-gamma" not in gamma.label  # a digest prefix, never the key
    assert rules.fleet_streams == 5


def test_no_limits_configured_is_no_rules() -> None:
    assert LimitRules.from_config(LimitsConfig(), None) is None
