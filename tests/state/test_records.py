"""A stored response's bytes: versioned, exact, and each item's place known."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxai.state import RecordFormatError, StoredResponse
from proxai.state.records import FORMAT_VERSION

from .conftest import item, record

_json_items = st.lists(
    st.builds(
        lambda kind, item_id, text: item(kind, item_id, text),
        st.sampled_from(["message", "reasoning", "function_call"]),
        st.none() | st.text(min_size=1, max_size=8),
        st.text(max_size=40),
    ),
    max_size=5,
).map(tuple)


@given(inputs=_json_items, outputs=_json_items, instructions=st.none() | st.binary(max_size=20))
def test_bytes_round_trip_and_item_spans_point_at_the_items(
    inputs: tuple[bytes, ...], outputs: tuple[bytes, ...], instructions: bytes | None
) -> None:
    stored = record(inputs=inputs or (b"{}",), outputs=outputs or (b"[]",))
    stored = StoredResponse(
        id=stored.id,
        tenant=stored.tenant,
        created_at=stored.created_at,
        instructions=instructions,
        input_items=inputs,
        output_items=outputs,
        response=stored.response,
        status=stored.status,
    )
    data = stored.to_bytes()
    again = StoredResponse.from_bytes(data)
    assert again == stored and again.item_ids == stored.item_ids
    spans = list(stored.item_spans())
    assert [(i, data[o : o + n]) for i, o, n in spans] == list(stored.indexed_items())


def test_the_frame_carries_its_version_and_refuses_another() -> None:
    data = record().to_bytes()
    length, _, rest = data.partition(b"\n")
    header = orjson.loads(rest[: int(length)])
    assert header["v"] == FORMAT_VERSION
    header["v"] = FORMAT_VERSION + 1
    changed = orjson.dumps(header)
    other = b"%d\n" % len(changed) + changed + rest[int(length) :]
    with pytest.raises(RecordFormatError, match="format 2"):
        StoredResponse.from_bytes(other)


@pytest.mark.parametrize("cut", [0, 1, 5, -1])
def test_torn_bytes_are_refused(cut: int) -> None:
    data = record().to_bytes()
    with pytest.raises(RecordFormatError):
        StoredResponse.from_bytes(data[:cut] if cut >= 0 else data + b"x")


def test_size_counts_the_bytes_held() -> None:
    small = record(outputs=(item("message", "m", "x"),))
    big = record(outputs=(item("message", "m", "x" * 10_000),))
    assert big.size - small.size == 9_999
    assert small.size >= len(small.response) + sum(len(i) for i in small.items)


def test_items_that_are_not_objects_with_an_id_are_not_indexed() -> None:
    odd = (b"[1]", b'{"id": 3}', b'{"id": ""}', b"not json", item("message", "m"))
    assert record(outputs=odd).item_ids[1:] == (None, None, None, None, "m")


def test_status_is_one_of_three() -> None:
    with pytest.raises(ValueError, match="'running'"):
        StoredResponse("r", "t", 0.0, None, (), (), b"{}", "running")  # type: ignore[arg-type]
