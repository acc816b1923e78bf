"""The SSE framer: whole frames out, every byte kept, for any chunking."""

from __future__ import annotations

import itertools

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxai.wire.sse import SSEFrame, SSEFramer, sse_event


def frame_all(chunks: list[bytes]) -> tuple[list[SSEFrame], bytes]:
    framer = SSEFramer()
    frames: list[SSEFrame] = []
    for chunk in chunks:
        frames.extend(framer.feed(chunk))
    return frames, framer.close()


def events(frames: list[SSEFrame]) -> list[tuple[str | None, bytes]]:
    return [(f.event, f.data) for f in frames if f.data is not None]


def test_openai_framing() -> None:
    stream = (
        b'event: response.created\ndata: {"a":1}\n\nevent: response.completed\ndata: {"b":2}\n\n'
    )
    frames, tail = frame_all([stream])
    assert events(frames) == [("response.created", b'{"a":1}'), ("response.completed", b'{"b":2}')]
    assert [f.raw for f in frames] == [
        b'event: response.created\ndata: {"a":1}\n\n',
        b'event: response.completed\ndata: {"b":2}\n\n',
    ]
    assert tail == b""


@pytest.mark.parametrize("newline", [b"\n", b"\r\n", b"\r"])
def test_every_line_ending(newline: bytes) -> None:
    stream = newline.join([b"event: x", b"data: 1", b"", b"data: 2", b"data: 3", b"", b""])
    frames, tail = frame_all([stream])
    assert events(frames) == [("x", b"1"), (None, b"2\n3")]
    assert b"".join(f.raw for f in frames) + tail == stream


def test_crlf_split_across_chunks_is_one_line_end() -> None:
    frames, tail = frame_all([b"data: 1\r", b"\n\r", b"\ndata: 2\r\n\r\n"])
    assert events(frames) == [(None, b"1"), (None, b"2")]
    assert b"".join(f.raw for f in frames) + tail == b"data: 1\r\n\r\ndata: 2\r\n\r\n"


def test_comment_is_forwarded_on_its_own_as_soon_as_complete() -> None:
    framer = SSEFramer()
    assert framer.feed(b": pi") == []
    (ping,) = framer.feed(b"ng\n")
    assert ping.raw == b": ping\n" and not ping.is_event
    (blank,) = framer.feed(b"\n")
    assert blank.raw == b"\n" and not blank.is_event


def test_comment_inside_an_event_stays_with_it() -> None:
    frames, _ = frame_all([b"event: x\n: note\ndata: 1\n\n"])
    assert [f.raw for f in frames] == [b"event: x\n: note\ndata: 1\n\n"]
    assert events(frames) == [("x", b"1")]


def test_field_parsing_rules() -> None:
    frames, _ = frame_all([b"data:no-space\ndata:  two\ndata\nid: 7\nretry: 10\nbogus: 1\n\n"])
    assert events(frames) == [(None, b"no-space\n two\n")]


def test_bom_at_start_is_kept_in_bytes_but_not_in_fields() -> None:
    frames, _ = frame_all([b"\xef\xbb", b"\xbfevent: x\ndata: 1\n\n"])
    assert events(frames) == [("x", b"1")]
    assert frames[0].raw.startswith(b"\xef\xbb\xbf")


def test_multibyte_utf8_cut_at_chunk_edge() -> None:
    payload = 'data: {"city":"北京"}\n\n'.encode()
    cut = payload.index("京".encode()) + 1
    frames, _ = frame_all([payload[:cut], payload[cut:]])
    assert events(frames) == [(None, '{"city":"北京"}'.encode())]


def test_unicode_line_separators_inside_data_do_not_split() -> None:
    payload = 'data: {"t":"a\u2028b\x85c"}\n\n'.encode()
    frames, _ = frame_all([payload])
    assert events(frames) == [(None, '{"t":"a\u2028b\x85c"}'.encode())]


def test_unfinished_event_is_returned_by_close() -> None:
    frames, tail = frame_all([b"data: 1\n\ndata: 2\n"])
    assert events(frames) == [(None, b"1")]
    assert tail == b"data: 2\n"


def test_pending_counts_the_unfinished_frame() -> None:
    framer = SSEFramer()
    assert framer.feed(b"data: 12345\n\ndata: xx") != []
    assert framer.pending == len(b"data: xx")
    framer.feed(b"x" * 20)
    assert framer.pending == len(b"data: xx") + 20


def test_lines_that_are_no_sse_field_are_flagged() -> None:
    frames, _ = frame_all([b"<html>\n\ndata: 1\nid: 3\nretry: 5\n\nHTTP/1.1 500 oops\ndata: 2\n\n"])
    assert [(f.data, f.unknown) for f in frames] == [(None, True), (b"1", False), (b"2", True)]


# --- properties -------------------------------------------------------------------------

_text = st.text(
    alphabet=st.characters(blacklist_characters="\r\n", blacklist_categories=["Cs"]), max_size=30
)
_newline = st.sampled_from([b"\n", b"\r\n", b"\r"])


@st.composite
def sse_streams(draw: st.DrawFn) -> bytes:
    """A valid event stream: events with event/data/id fields and comments, any line ends."""
    nl = draw(_newline)
    out = bytearray()
    if draw(st.booleans()):
        out += b"\xef\xbb\xbf"
    for _ in range(draw(st.integers(0, 8))):
        lines: list[bytes] = []
        for _ in range(draw(st.integers(0, 4))):
            kind = draw(st.sampled_from(["data", "event", "comment", "id"]))
            value = draw(_text).encode()
            lines.append(b":" + value if kind == "comment" else kind.encode() + b": " + value)
        out += b"".join(line + nl for line in lines) + nl
    return bytes(out)


@st.composite
def chunkings(draw: st.DrawFn, data: bytes) -> list[bytes]:
    cuts = sorted(draw(st.sets(st.integers(0, len(data)), max_size=12)))
    bounds = [0, *cuts, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_any_chunking_gives_same_events_and_same_bytes(data: st.DataObject) -> None:
    stream = data.draw(sse_streams())
    whole_frames, whole_tail = frame_all([stream])
    chunks = data.draw(chunkings(stream))
    frames, tail = frame_all(chunks)
    assert events(frames) == events(whole_frames)
    assert b"".join(f.raw for f in frames) + tail == stream
    assert b"".join(f.raw for f in whole_frames) + whole_tail == stream


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300), st.data())
def test_arbitrary_bytes_are_kept(data: bytes, draw: st.DataObject) -> None:
    frames, tail = frame_all(draw.draw(chunkings(data)))
    assert b"".join(f.raw for f in frames) + tail == data
    # every frame but a CR-terminated one ends with a line end
    assert all(f.raw.endswith((b"\n", b"\r")) for f in frames)


@pytest.mark.parametrize("event", [None, "response.created"])
def test_the_writer_writes_one_frame_the_framer_reads_back(event: str | None) -> None:
    payload = {"text": "two\nlines\r\u2028and more", "n": 1}
    raw = sse_event(event, payload)
    frames, rest = frame_all([raw])
    assert rest == b""
    assert [(f.raw, f.event, orjson.loads(f.data or b"")) for f in frames] == [
        (raw, event, payload)
    ]
