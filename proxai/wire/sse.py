"""A sans-io Server-Sent Events framer that keeps every byte.

The framer splits an upstream byte stream into *frames*: runs of lines that end
with a blank line (an SSE event, or a block holding only comments), plus lone
comment lines that arrive while no event is being built (``: ping``), so that a
keep-alive is forwarded as soon as it is complete. Each frame carries the exact
bytes it was made of; the concatenation of all frames plus :meth:`SSEFramer.close`
is the input, byte for byte. The relay forwards whole frames only, so a client
never sees half an event and proxai can always append an event of its own at a
frame boundary.

Lines end with LF, CRLF or a lone CR (WHATWG "event stream interpretation").
A CR at the very end of a chunk ends its line at once; a LF that then starts the
next chunk is the second half of that CRLF, not an empty line. The framer works
on bytes, so a multi-byte UTF-8 sequence cut at a chunk edge needs no care.
"""

from __future__ import annotations

import attrs
import orjson

__all__ = ["Frames", "SSEFrame", "SSEFramer", "frame_of", "joined", "sse_event", "sse_frame"]

_LF = 0x0A
_COLON = 0x3A
_BOM = b"\xef\xbb\xbf"


_EVENT_NAMES: dict[bytes, str] = {}


def _event_name(value: bytes) -> str:
    """The ``event:`` value as text; the few names a stream uses are decoded once."""
    name = _EVENT_NAMES.get(value)
    if name is None:
        name = value.decode("utf-8", "replace")
        if len(_EVENT_NAMES) < 256 and len(value) <= 64:
            _EVENT_NAMES[value] = name
    return name


@attrs.define(slots=True)
class SSEFrame:
    """One complete unit of the stream, with the bytes it arrived as; never changed once
    made (not an attrs-frozen class only because its checked ``__init__`` costs more than
    twice a plain one's, and one frame is made per event).

    ``event`` is the value of the last ``event:`` field, ``data`` the ``data:``
    lines joined with LF (``None`` when the frame had no ``data:`` field, as for
    a comment or a stray blank line). Other fields (``id:``, ``retry:``) are
    kept in ``raw`` but not interpreted: proxai never needs them. ``unknown``
    is set when a line was no SSE field at all (what a parser ignores, and what
    an upstream sending something other than SSE produces).
    """

    raw: bytes
    event: str | None = None
    data: bytes | None = None
    unknown: bool = False

    @property
    def is_event(self) -> bool:
        """Whether a conforming SSE parser would dispatch this frame as an event."""
        return self.data is not None


class SSEFramer:
    """Incremental framer: :meth:`feed` bytes in, complete :class:`SSEFrame` out."""

    __slots__ = (
        "_at_stream_start",
        "_buf",
        "_data",
        "_event",
        "_frame_start",
        "_scan",
        "_searched",
        "_skip_lf",
        "_unknown",
    )

    def __init__(self) -> None:
        self._buf = bytearray()
        self._frame_start = 0  # offset in _buf where the frame being built starts
        self._scan = 0  # offset in _buf of the first unparsed line
        self._searched = 0  # offset in _buf up to which no line end was found
        self._event: str | None = None
        self._data: list[bytes] | None = None
        self._skip_lf = False  # the previous chunk ended with CR: a leading LF belongs to it
        self._at_stream_start = True
        self._unknown = False

    @property
    def pending(self) -> int:
        """How many bytes are held back as part of an unfinished frame (the caller
        bounds it: an upstream may send an event that never ends)."""
        return len(self._buf) - self._frame_start

    def feed(self, chunk: bytes) -> list[SSEFrame]:
        """Add bytes; return every frame they complete, in order."""
        if not chunk:
            return []
        frames: list[SSEFrame] = []
        if (
            not self._buf
            and chunk.endswith(b"\n\n")
            and not self._skip_lf
            and not self._at_stream_start
            and b"\r" not in chunk
        ):
            # Nothing pending and the chunk is whole LF-only events (how upstreams
            # send them): frame it without copying it into the buffer. The first
            # event this cannot take, and all after it, go the general way.
            end = len(chunk)
            stop = chunk.find(b"\n\n") + 2
            if stop == end and chunk.startswith(b"event: "):
                # One event in the read, as an LLM upstream writes them: _block's usual
                # shape, inline and without a copy of the read.
                nl = chunk.find(b"\n")
                if chunk.startswith(b"data: ", nl + 1) and chunk.find(b"\n", nl + 1) == end - 2:
                    value = chunk[7:nl]
                    name = _EVENT_NAMES.get(value)
                    return [
                        SSEFrame(
                            chunk,
                            _event_name(value) if name is None else name,
                            chunk[nl + 7 : -2],
                        )
                    ]
            start = 0
            while start < end:
                first = chunk[start]
                if first in (_LF, _COLON):
                    break
                stop = chunk.find(b"\n\n", start) + 2
                frame = self._block(chunk if start == 0 and stop == end else chunk[start:stop])
                if frame is None:
                    break
                frames.append(frame)
                start = stop
            if start == end:
                return frames
            chunk = chunk[start:]
        buf = self._buf
        buf += chunk
        pos = self._scan
        if self._skip_lf:
            self._skip_lf = False
            if buf[pos] == _LF:
                # The second half of a CRLF cut by the chunk edge: a line ending already
                # counted, kept as leading bytes of the frame being built.
                pos += 1
        end = len(buf)
        # Bytes of an unfinished line already searched need no second look: a line
        # that arrives in many reads is scanned once, not once per read.
        searched = self._searched
        search = max(pos, searched)
        while pos < end:
            if (
                pos == self._frame_start
                and pos >= searched
                and buf[pos] != _LF
                and buf[pos] != _COLON
                and not self._at_stream_start
            ):
                # Fast path at a frame boundary: a whole LF-only event of event: and
                # data: lines (what OpenAI and Anthropic send) found by its blank line
                # and split in bulk. Anything else (CR, comments, other fields, an
                # unfinished event) falls through to the line-by-line path below,
                # which gives the same frames.
                stop = buf.find(b"\n\n", pos)
                if stop >= 0 and buf.find(b"\r", pos, stop) < 0:
                    frame = self._block(bytes(buf[pos : stop + 2]))
                    if frame is not None:
                        frames.append(frame)
                        pos = search = self._frame_start = stop + 2
                        continue
            lf = buf.find(b"\n", search)
            cr = buf.find(b"\r", search, lf if lf >= 0 else end)
            if cr >= 0:
                line_end = cr
                if cr + 1 < end:
                    nxt = cr + 2 if buf[cr + 1] == _LF else cr + 1
                else:
                    nxt = cr + 1
                    self._skip_lf = True
            elif lf >= 0:
                line_end = lf
                nxt = lf + 1
            else:
                break
            frame = self._line(buf, pos, line_end, nxt)
            pos = search = nxt
            if frame is not None:
                frames.append(frame)
        self._scan = pos
        self._searched = end
        if self._frame_start:
            del buf[: self._frame_start]
            self._scan -= self._frame_start
            self._searched -= self._frame_start
            self._frame_start = 0
        return frames

    def close(self) -> bytes:
        """End of stream: return the bytes of an unfinished frame (possibly empty).

        A conforming parser discards an event that has no closing blank line, so
        the caller decides whether these bytes are forwarded or dropped.
        """
        tail = bytes(self._buf[self._frame_start :])
        self._buf.clear()
        self._frame_start = self._scan = self._searched = 0
        self._event = None
        self._data = None
        self._unknown = False
        return tail

    @staticmethod
    def _block(raw: bytes) -> SSEFrame | None:
        """The frame of ``raw`` (a whole LF-only event, blank line included) when it is
        made of ``event:`` and ``data:`` lines only; None for anything else."""
        nl = raw.find(b"\n")
        if (
            raw.startswith(b"event: ")
            and raw.startswith(b"data: ", nl + 1)
            and raw.find(b"\n", nl + 1) == len(raw) - 2
        ):  # the usual shape: one event: line, one data: line
            return SSEFrame(raw, _event_name(raw[7:nl]), raw[nl + 7 : -2])
        event: str | None = None
        data: list[bytes] = []
        for line in raw[:-2].split(b"\n"):
            if line.startswith(b"data:"):
                data.append(line[6:] if line.startswith(b" ", 5) else line[5:])
            elif line.startswith(b"event:"):
                value = line[7:] if line.startswith(b" ", 6) else line[6:]
                event = _event_name(value)
            else:
                return None
        if not data:
            return SSEFrame(raw, event)
        return SSEFrame(raw, event, data[0] if len(data) == 1 else b"\n".join(data))

    def _line(self, buf: bytearray, start: int, end: int, nxt: int) -> SSEFrame | None:
        """Interpret one line ``buf[start:end]``; return a frame if it completes one."""
        if self._at_stream_start:
            self._at_stream_start = False
            if buf.startswith(_BOM, start):
                start += len(_BOM)
        if start == end:  # blank line: the frame is complete
            frame = SSEFrame(
                bytes(buf[self._frame_start : nxt]), self._event, self._joined(), self._unknown
            )
            self._frame_start = nxt
            self._event = None
            self._data = None
            self._unknown = False
            return frame
        if buf[start] == 0x3A:  # ':' comment
            if self._data is None and self._event is None and self._only_comments(start):
                frame = SSEFrame(bytes(buf[self._frame_start : nxt]))
                self._frame_start = nxt
                return frame
            return None
        colon = buf.find(b":", start, end)
        if colon < 0:
            name = bytes(buf[start:end])
            value = b""
        else:
            name = bytes(buf[start:colon])
            vstart = colon + 1
            if vstart < end and buf[vstart] == 0x20:
                vstart += 1
            value = bytes(buf[vstart:end])
        if name == b"data":
            if self._data is None:
                self._data = [value]
            else:
                self._data.append(value)
        elif name == b"event":
            self._event = value.decode("utf-8", "replace")
        elif name != b"id" and name != b"retry":
            self._unknown = True
        return None

    def _only_comments(self, line_start: int) -> bool:
        """True when nothing but this comment line belongs to the frame being built."""
        return line_start == self._frame_start or (
            # a UTF-8 BOM or a trailing LF of a split CRLF may precede the comment
            line_start - self._frame_start <= len(_BOM)
            and not self._buf[self._frame_start : line_start].strip(b"\n\xef\xbb\xbf")
        )

    def _joined(self) -> bytes | None:
        if self._data is None:
            return None
        if len(self._data) == 1:
            return self._data[0]
        return b"\n".join(self._data)


#: Whole events proxai made, each framed as it was made: a carrier writes them its way
#: (SSE writes their ``raw`` bytes, a socket each one's ``data``) without parsing them.
Frames = list[SSEFrame]


def frame_of(event: str | None, payload: bytes) -> SSEFrame:
    """The frame of one event whose ``data`` is ``payload`` (one line: JSON)."""
    head = b"data: " if event is None else b"event: " + event.encode() + b"\ndata: "
    return SSEFrame(head + payload + b"\n\n", event, payload)


def sse_frame(event: str | None, data: object) -> SSEFrame:
    """One whole SSE event: ``event: <event>`` (none for ``None``) and ``data`` as JSON on
    one ``data:`` line (orjson writes no line break), ended by a blank line."""
    return frame_of(event, orjson.dumps(data))


def sse_event(event: str | None, data: object) -> bytes:
    """:func:`sse_frame`'s bytes."""
    return sse_frame(event, data).raw


def joined(frames: Frames) -> bytes:
    """The SSE bytes of ``frames``."""
    if len(frames) == 1:
        return frames[0].raw
    return b"".join([f.raw for f in frames])
