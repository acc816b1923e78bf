"""Reading one upstream body: frame it, stamp it, say how it ended.

The relay's reader task opens the upstream (:mod:`proxai.relay.attempts`) and
then hands the response to :func:`read_body`, the only code that iterates an
upstream body. It sends the observer a :class:`~proxai.relay.messages.Head`,
one :class:`~proxai.relay.messages.Body` per read (whole SSE frames only), and
an :class:`~proxai.relay.messages.End`, all stamped on the upstream clock.
"""

from __future__ import annotations

import trio

from ..outcome import Outcome, OutcomeKind
from ..upstream.client import UpstreamBroken, UpstreamResponse
from ..wire.headers import Headers
from ..wire.sse import SSEFramer
from .clock import UpstreamClock
from .exchange import Tap
from .messages import Body, End, Head, ToObserver

__all__ = ["is_event_stream", "read_body", "translated_headers"]


def is_event_stream(status: int, headers: Headers) -> bool:
    """A 2xx ``text/event-stream`` body is framed and observed; anything else passes raw."""
    if not 200 <= status < 300:
        return False
    for name, value in headers:
        if name.lower() == b"content-type":
            return value.split(b";", 1)[0].strip().lower() == b"text/event-stream"
    return False


async def read_body(
    response: UpstreamResponse,
    channel: trio.MemorySendChannel[ToObserver],
    *,
    clock: UpstreamClock,
    outcome: Outcome,
    tap: Tap | None,
    max_event_bytes: int,
) -> None:
    """Send the head, every read and the end of ``response`` to the observer."""
    send = clock.send_paused
    if tap is not None:
        tap.upstream_head(response.status, response.headers)
    sse = is_event_stream(response.status, response.headers)
    await send(channel, Head(response.status, response.headers, sse, clock.now()))
    framer = SSEFramer() if sse else None
    try:
        async for data in response.iter_body():
            at = clock.now()
            outcome.bytes_in += len(data)
            if tap is not None:
                tap.upstream.add(data)
            if framer is None:
                await send(channel, Body(data, (), at))
                continue
            frames = framer.feed(data)
            joined = b"".join([f.raw for f in frames]) if frames else b""
            # A read that completes no frame still tells the observer the
            # upstream is alive.
            await send(channel, Body(joined, frames, at))
            if framer.pending > max_event_bytes:
                # An event that never ends must not grow without bound.
                detail = f"upstream sent an event over {max_event_bytes} bytes (max_event_bytes)"
                fault = OutcomeKind.UPSTREAM_EVENT_TOO_LARGE
                await send(channel, End(clock.now(), fault, detail=detail))
                return
    except UpstreamBroken as exc:
        tail = framer.close() if framer else b""
        await send(channel, End(clock.now(), OutcomeKind.UPSTREAM_RESET, tail, str(exc)))
        return
    await send(channel, End(clock.now(), tail=framer.close() if framer else b""))


def translated_headers(headers: Headers, sse: bool) -> Headers:
    """The upstream's headers for a body proxai rewrites into another API: its length
    and encoding no longer apply, and a whole body is the client API's JSON."""
    drop = {b"content-length", b"content-encoding", b"etag", b"content-md5"}
    if not sse:
        drop.add(b"content-type")
    out = [(n, v) for n, v in headers if n.lower() not in drop]
    if not sse:
        out.append((b"content-type", b"application/json"))
    return out
