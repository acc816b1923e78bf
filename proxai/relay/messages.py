"""The messages the relay's tasks pass each other.

The reader sends a :class:`Head`, then :class:`Body` messages, then an
:class:`End` (or a :class:`~proxai.errors.ProxyError` if no response came) to
the observer; the observer sends the head, the client's :class:`Body` or
:class:`Out` messages and perhaps a :class:`~proxai.errors.ProxyError` to the
writer. An event stream is framed once, by the reader (or made as frames, by a
translator or proxai's closing): every message to the writer carries its whole
events as frames beside their bytes, so that no carrier or consumer after the
writer frames the stream again. Times are on the upstream clock
(:mod:`proxai.relay.clock`).
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from ..errors import ProxyError
from ..outcome import OutcomeKind
from ..wire.headers import Headers
from ..wire.sse import SSEFrame

__all__ = [
    "Body",
    "Chunk",
    "End",
    "Head",
    "Out",
    "ToObserver",
    "ToWriter",
    "merged",
    "out_of",
    "split",
]


@attrs.frozen
class Head:
    """The upstream's status and headers; ``sse`` when the body is an event stream."""

    status: int
    headers: Headers
    sse: bool
    at: float  # on the upstream clock


@attrs.define(slots=True)
class Body:
    """Bytes of one upstream read (whole frames only, for SSE), stamped on the upstream clock.
    Never changed once made (not frozen: a frozen class's ``__init__`` costs more than
    twice a plain one's, and one is made per read)."""

    data: bytes
    frames: Sequence[SSEFrame]
    at: float


@attrs.frozen(slots=True)
class Out:
    """What the client gets that no upstream read carried as it is: a translator's
    events, proxai's closing, a whole body made at the end. ``frames``: the whole events
    in ``data`` (none for a body that is not an event stream, or a cut-off tail)."""

    data: bytes
    frames: Sequence[SSEFrame] = ()


#: Nothing for the client.
NOTHING = Out(b"")

#: One message of the client's body: a read passed through as it came, or an :class:`Out`.
Chunk = Body | Out


def out_of(frames: Sequence[SSEFrame]) -> Out:
    """The client's message for ``frames``."""
    if len(frames) == 1:
        return Out(frames[0].raw, frames)
    return Out(b"".join([f.raw for f in frames]), frames)


def merged(chunks: Sequence[Chunk]) -> Out:
    """``chunks`` as one message, in order."""
    if len(chunks) == 1:
        only = chunks[0]
        return only if isinstance(only, Out) else Out(only.data, only.frames)
    frames: list[SSEFrame] = []
    for chunk in chunks:
        frames += chunk.frames
    return Out(b"".join([c.data for c in chunks]), frames)


def split(out: Out, max_bytes: int) -> list[Out]:
    """``out`` in parts of at most ``max_bytes`` (an event larger than that is a part of
    its own: a carrier writes whole events), or of whole bytes for a body without events."""
    if len(out.data) <= max_bytes:
        return [out]
    if not out.frames:
        data = out.data
        return [Out(data[at : at + max_bytes]) for at in range(0, len(data), max_bytes)]
    parts: list[Out] = []
    group: list[SSEFrame] = []
    size = 0
    for frame in out.frames:
        if group and size + len(frame.raw) > max_bytes:
            parts.append(out_of(group))
            group, size = [], 0
        group.append(frame)
        size += len(frame.raw)
    if group:
        parts.append(out_of(group))
    return parts


@attrs.frozen
class End:
    """The upstream body ended, cleanly or cut short by ``fault``; ``tail`` is an
    unfinished SSE frame's bytes."""

    at: float
    fault: OutcomeKind | None = None
    tail: bytes = b""
    detail: str | None = None


ToObserver = Head | Body | End | ProxyError
ToWriter = Head | Body | Out | ProxyError
