"""The lean Redis path's RESP2 codec: any split of the bytes parses to the same
replies, and nothing past its bounds is buffered."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxai.state.resp import ErrorReply, ProtocolError, Reply, ReplyParser, encode


def wire(reply: Reply) -> bytes:
    """How Redis would write ``reply`` (a bulk for bytes)."""
    if reply is None:
        return b"$-1\r\n"
    if isinstance(reply, ErrorReply):
        return b"-%s\r\n" % reply.message.encode()
    if isinstance(reply, int):
        return b":%d\r\n" % reply
    if isinstance(reply, bytes):
        return b"$%d\r\n%s\r\n" % (len(reply), reply)
    return b"*%d\r\n" % len(reply) + b"".join(wire(r) for r in reply)


replies = st.recursive(
    st.none()
    | st.integers(-(2**63), 2**63 - 1)
    | st.binary(max_size=300)
    | st.builds(ErrorReply, st.from_regex(r"[A-Z]{3,8} [a-z ]{0,20}", fullmatch=True)),
    lambda children: st.lists(children, max_size=6),
    max_leaves=40,
)


@given(st.lists(replies, min_size=1, max_size=8), st.data())
def test_any_split_of_the_bytes_gives_the_same_replies(
    sent: list[Reply], data: st.DataObject
) -> None:
    whole = b"".join(wire(r) for r in sent)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(whole)), max_size=12)))
    parser = ReplyParser(max_depth=16)
    got: list[Reply] = []
    start = 0
    for cut in [*cuts, len(whole)]:
        got += parser.feed(whole[start:cut])
        start = cut
    assert got == sent


def test_a_big_bulk_read_a_byte_at_a_time_and_a_simple_string() -> None:
    big = bytes(range(256)) * 400
    data = wire(big) + b"+OK\r\n"
    parser = ReplyParser()
    got: list[Reply] = []
    for i in range(0, len(data), 7):
        got += parser.feed(data[i : i + 7])
    assert got == [big, b"OK"]


def test_the_bounds_refuse_instead_of_buffering() -> None:
    with pytest.raises(ProtocolError):
        ReplyParser(max_bytes=1000).feed(b"$5000\r\n")  # announced past the bound
    parser = ReplyParser(max_bytes=1000)
    with pytest.raises(ProtocolError):  # a nested array whose parts pass it together
        for _ in range(20):
            parser.feed(b"*40\r\n" if _ == 0 else b"$90\r\n" + b"x" * 90 + b"\r\n")
    with pytest.raises(ProtocolError):
        ReplyParser(max_depth=3).feed(b"*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n")
    with pytest.raises(ProtocolError):
        ReplyParser(max_elements=10).feed(b"*11\r\n")
    with pytest.raises(ProtocolError):
        ReplyParser().feed(b"?what\r\n")
    with pytest.raises(ProtocolError):
        ReplyParser().feed(b"$3\r\nabcXY")
    with pytest.raises(ProtocolError):
        ReplyParser().feed(b"+" + b"x" * 70_000)  # a line with no end in sight


def test_commands_are_arrays_of_bulk_strings() -> None:
    assert encode(["GET", "k"]) == b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"
    assert (
        encode(["EVALSHA", b"\x00\r\n", 2])
        == b"*3\r\n$7\r\nEVALSHA\r\n$3\r\n\x00\r\n\r\n$1\r\n2\r\n"
    )
    assert ReplyParser().feed(encode(["a", 1])) == [[b"a", b"1"]]
