"""The messages the relay's tasks pass each other.

The reader sends a :class:`Head`, then :class:`Body` messages, then an
:class:`End` (or a :class:`~proxai.errors.ProxyError` if no response came) to
the observer; the observer sends the head, body bytes and perhaps a
:class:`~proxai.errors.ProxyError` to the writer. Times are on the upstream
clock (:mod:`proxai.relay.clock`).
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from ..errors import ProxyError
from ..outcome import OutcomeKind
from ..wire.headers import Headers
from ..wire.sse import SSEFrame

__all__ = ["Body", "End", "Head", "ToObserver", "ToWriter"]


@attrs.frozen
class Head:
    """The upstream's status and headers; ``sse`` when the body is an event stream."""

    status: int
    headers: Headers
    sse: bool
    at: float  # on the upstream clock


@attrs.frozen
class Body:
    """Bytes of one upstream read (whole frames only, for SSE), stamped on the upstream clock."""

    data: bytes
    frames: Sequence[SSEFrame]
    at: float


@attrs.frozen
class End:
    """The upstream body ended, cleanly or cut short by ``fault``; ``tail`` is an
    unfinished SSE frame's bytes."""

    at: float
    fault: OutcomeKind | None = None
    tail: bytes = b""
    detail: str | None = None


ToObserver = Head | Body | End | ProxyError
ToWriter = Head | bytes | ProxyError
