"""The memory backend's bounds: bytes (least recently used first) and age, on fake time."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from proxai.config import StateConfig
from proxai.state import MemoryState, RecordTooLarge, StoredResponse, open_store
from proxai.testing.work import kept_by

from .conftest import FakeClock, item, record

A = "a" * 64
#: The repository, whence ``python -m tests.state.rss_program`` runs.
ROOT = Path(__file__).resolve().parents[2]


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


# -- what the store holds is what it counts (issue 38, item 6) ---------------------------


def shaped(n: int, inputs: int, input_size: int, output_size: int) -> Iterator[StoredResponse]:
    """Records whose parts are ``orjson.dumps`` results, as the request path makes them
    (each holding its whole growth buffer, several times its length), one at a time."""
    for i in range(n):
        yield record(
            f"resp_{i}",
            inputs=tuple(item("message", f"in_{i}_{k}", "y" * input_size) for k in range(inputs)),
            outputs=(item("message", f"out_{i}", "x" * output_size),),
        )


@pytest.mark.parametrize(
    ("inputs", "input_size", "output_size"),
    [(1, 200_000, 300_000), (8, 50_000, 100_000), (200, 500, 2_000)],
    ids=["large-parts", "some-parts", "many-small-items"],
)
def test_what_the_store_holds_is_about_what_it_counts(
    fake_clock: FakeClock, inputs: int, input_size: int, output_size: int
) -> None:
    """A record is held as one bytes object of its size, whatever its parts held:
    ten times the bound stored leaves the store holding about its count, never the parts'
    buffers (which held 12 to 16 times their bytes)."""
    bound = 2 * 1024 * 1024
    size = next(shaped(1, inputs, input_size, output_size)).size

    def fill() -> MemoryState:
        state = MemoryState(max_bytes=bound, ttl=60, clock=fake_clock)
        for stored in shaped(10 * bound // size, inputs, input_size, output_size):
            state.put(stored)
        return state

    held = kept_by(fill)
    assert held <= 1.15 * bound + 64 * 1024, f"held {held} bytes for a count of at most {bound}"


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads RSS from /proc")
@pytest.mark.parametrize(
    ("mode", "inputs", "input_bytes", "output_bytes"),
    [
        ("stream", 20, 65_000, 130_000),
        ("whole", 20, 65_000, 130_000),
        ("stream", 1000, 200, 2_000),
    ],
    ids=["streamed", "whole", "many-small-items"],
)
def test_storing_25_times_the_bound_grows_a_fresh_process_by_a_few_bounds_at_most(
    mode: str, inputs: int, input_bytes: int, output_bytes: int
) -> None:
    """Through the request path (the storing downstream, ``Conversations.save``, the
    memory store), in a process of its own: what the process holds afterwards, not only
    the store's count, stays within 8 bounds and 16 MiB of where it was. It grew 50 to
    60 MiB for a 4 MiB bound while every record held orjson's buffers of its parts."""
    shape = [mode, str(inputs), str(input_bytes), str(output_bytes)]
    ran = subprocess.run(
        [sys.executable, "-m", "tests.state.rss_program", *shape],
        cwd=ROOT,
        capture_output=True,
        timeout=300,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr.decode()[-3000:]
    figures = orjson.loads(ran.stdout)
    bound = figures["bound"]
    assert figures["stored"] >= 25 * bound and figures["held"] <= bound
    assert figures["last_found"]  # the store still answers for what it holds
    allowed = 8 * bound + 16 * 1024 * 1024
    assert figures["grown"] <= allowed, f"RSS grew {figures['grown'] / 2**20:.1f} MiB: {figures}"
