"""What a long stream keeps of its request: the bytes each upstream is sent, at their size."""

from __future__ import annotations

import tracemalloc

import orjson

from proxai.wire.json_body import dumps_kept

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}


def allocated_per_item(make: object) -> float:
    """Bytes allocated per call of ``make`` that stay alive, over 200 calls."""
    assert callable(make)
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        kept = [make() for _ in range(200)]
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    grown = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    assert len(kept) == 200
    return grown / 200


def test_a_body_kept_for_a_stream_holds_its_size_not_orjsons_buffer() -> None:
    size = len(orjson.dumps(BODY))
    assert dumps_kept(BODY) == orjson.dumps(BODY)
    assert allocated_per_item(lambda: dumps_kept(BODY)) < size + 128
    # What this guards against: orjson's own result keeps its growth buffer.
    assert allocated_per_item(lambda: orjson.dumps(BODY)) > 1024
