"""The memory backend's bounds: bytes (least recently used first) and age, on fake time."""

from __future__ import annotations

import pytest

from proxai.config import StateConfig
from proxai.state import MemoryState, RecordTooLarge, StoredResponse, open_store

from .conftest import FakeClock, item, record

A = "a" * 64


def filler(n: int, size: int = 1000) -> list[StoredResponse]:
    return [record(f"resp_{i}", outputs=(item("message", f"m{i}", "x" * size),)) for i in range(n)]


def test_storing_far_past_max_bytes_keeps_the_bytes_under_it(fake_clock: FakeClock) -> None:
    state = MemoryState(max_bytes=50_000, ttl=60, clock=fake_clock)
    for stored in filler(1000):
        state.put(stored)
        assert state.bytes <= 50_000
    assert 0 < len(state) < 50 and state.indexed_items == len(state)  # the index went too
    assert state.get(A, "resp_999") is not None and state.get(A, "resp_0") is None
    assert state.item(A, "m0") is None


def test_the_least_recently_used_goes_first(fake_clock: FakeClock) -> None:
    records = filler(4)
    state = MemoryState(max_bytes=sum(r.size for r in records[:3]), ttl=60, clock=fake_clock)
    for stored in records[:3]:
        state.put(stored)
    assert state.get(A, "resp_0") is not None  # a get is a use: resp_1 is now the oldest
    assert state.item(A, "m1") is not None  # so is an item lookup: now resp_2 is
    state.put(records[3])
    assert [state.get(A, f"resp_{i}") is not None for i in range(4)] == [True, True, False, True]


def test_a_record_larger_than_the_whole_bound_is_refused(fake_clock: FakeClock) -> None:
    state = MemoryState(max_bytes=2000, ttl=60, clock=fake_clock)
    state.put(filler(1, 100)[0])
    with pytest.raises(RecordTooLarge, match=r"state\.max_bytes"):
        state.put(filler(1, 5000)[0])
    assert len(state) == 1  # what was there stays


def test_expired_records_are_invisible_and_freed_by_any_call(fake_clock: FakeClock) -> None:
    state = MemoryState(max_bytes=10**9, ttl=60, clock=fake_clock)
    for stored in filler(3):
        state.put(stored)
        fake_clock.advance(10)
    assert state.get(A, "resp_0") is not None  # used last, but the oldest put
    fake_clock.advance(31)  # resp_0 is 61 s old, resp_1 51 s
    assert state.item(A, "m0") is None
    assert len(state) == 2 and state.indexed_items == 2
    fake_clock.advance(20)
    assert state.delete(A, "nope") is False
    assert len(state) == 0 and state.bytes == 0 and state.indexed_items == 0


def test_expiry_goes_by_the_time_of_the_last_put(fake_clock: FakeClock) -> None:
    state = MemoryState(max_bytes=10**9, ttl=60, clock=fake_clock)
    state.put(record())
    fake_clock.advance(50)
    state.put(record())  # stored again: a new 60 s
    fake_clock.advance(50)
    assert state.get(A, "resp_1") is not None


async def test_open_store_gives_a_memory_store_by_default(fake_clock: FakeClock) -> None:
    async with open_store(StateConfig(max_bytes=5000, ttl=1.0), clock=fake_clock) as store:
        await store.put(record())
        assert await store.get(A, "resp_1") is not None
        fake_clock.advance(1.0)
        assert await store.get(A, "resp_1") is None


def test_owners_count_in_max_bytes_and_the_least_recently_used_go_first(
    fake_clock: FakeClock,
) -> None:
    """The owners of an upstream's ids are bounded with the records: claiming far past
    ``max_bytes`` keeps the bytes under it, forgetting the least recently used."""
    state = MemoryState(max_bytes=64 * 1024, ttl=60.0, clock=fake_clock)
    state.put(record("resp_kept"))
    state.claim("a" * 64, ["resp_first"])
    for n in range(10_000):
        state.claim("a" * 64, [f"resp_{n:040}"])
        if n % 100 == 0:
            state.get("a" * 64, "resp_kept")  # used: it stays
    assert state.bytes <= state.max_bytes
    assert state.owners(["resp_first", f"resp_{9999:040}"]) == (None, "a" * 64)
    assert state.get("a" * 64, "resp_kept") is not None
    fake_clock.advance(61.0)
    assert state.owners([f"resp_{9999:040}"]) == (None,) and state.bytes == 0
