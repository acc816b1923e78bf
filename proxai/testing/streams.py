"""Reading SSE bodies in tests: the events a client would parse, as data.

Tests of proxai, and of code behind it, keep asking the same questions of a
response body: which events did it carry, and did it end at an event boundary
(a client left mid-event has lost the last event). These answer them with
proxai's own framer, so they split exactly as the relay does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from ..wire.sse import SSEFrame, SSEFramer

__all__ = ["data_frames", "made_bytes", "payloads"]


def data_frames(body: bytes, *, whole: bool = True) -> list[SSEFrame]:
    """The frames of ``body`` that carry a ``data`` field (comments left out).

    With ``whole`` (the default), fail if ``body`` ends inside an event.
    """
    framer = SSEFramer()
    frames = [f for f in framer.feed(body) if f.data is not None]
    if whole:
        assert framer.close() == b"", "the client was left mid-event"
    return frames


def payloads(body: bytes, *, whole: bool = True) -> list[Any]:
    """The JSON of each event in ``body``, in order; Chat's ``[DONE]`` is left out."""
    return [
        orjson.loads(f.data)
        for f in data_frames(body, whole=whole)
        if f.data is not None and f.data != b"[DONE]"
    ]


def made_bytes(frames: Sequence[SSEFrame]) -> bytes:
    """The bytes of events proxai made as frames, checked: an SSE parser reads exactly
    these frames (names and data) back from them, so no consumer needs to parse them."""
    data = b"".join([f.raw for f in frames])
    parsed = SSEFramer().feed(data)
    if parsed != list(frames):
        raise AssertionError(f"frames made {list(frames)!r} are not the frames of their bytes")
    return data
