"""Reading one upstream body: frame it, stamp it, say how it ended.

The relay's reader task opens the upstream (:mod:`proxai.relay.attempts`) and
then hands the response to :func:`read_body`, the only code that iterates an
upstream body. It sends the observer a :class:`~proxai.relay.messages.Head`,
one :class:`~proxai.relay.messages.Body` per read (whole SSE frames only), and
an :class:`~proxai.relay.messages.End`, all stamped on the upstream clock.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterable

import attrs
import trio

from ..outcome import Outcome, OutcomeKind
from ..upstream.client import EventTooLarge, UpstreamBroken, UpstreamReply
from ..wire.coding import CorruptCoding, Decoder, coding_names, content_codings, decodable
from ..wire.headers import Headers
from ..wire.sse import SSEFrame, SSEFramer
from .clock import UpstreamClock
from .exchange import Tap
from .messages import Body, End, Head, ToObserver

__all__ = ["Reading", "is_event_stream", "read_body", "reading_for", "translated_headers"]

log = logging.getLogger("proxai")


def is_event_stream(status: int, headers: Headers) -> bool:
    """A 2xx ``text/event-stream`` body is framed and observed; anything else passes raw."""
    if not 200 <= status < 300:
        return False
    for name, value in headers:
        if name.lower() == b"content-type":
            return value.split(b";", 1)[0].strip().lower() == b"text/event-stream"
    return False


@attrs.frozen
class Reading:
    """How to read an upstream body, decided from its head alone."""

    sse: bool  # framed and observed
    headers: Headers  # the head the client gets
    decode: bytes | None = None  # the content coding to undo first
    #: Said of an event stream in a coding proxai cannot undo (relayed unobserved).
    unreadable: str | None = None

    @property
    def anomaly(self) -> str | None:
        if self.decode is not None:
            coding = self.decode.decode("latin-1")
            return (
                f"upstream sent a {coding}-encoded event stream despite accept-encoding: "
                "identity; decoded for the observer and the client"
            )
        return self.unreadable


def reading_for(status: int, headers: Headers) -> Reading:
    """An event stream is framed as it arrives, so it must arrive plain: one that an
    upstream compressed anyway is decoded when zlib can (the client gets it plain,
    whatever it accepts: a stream proxai may end with an event of its own must stay
    at an event boundary, which compressed bytes have none of), and relayed as it
    came, unobserved, otherwise. Other bodies pass as they came."""
    if not is_event_stream(status, headers):
        return Reading(False, headers)
    codings = content_codings(headers)
    if not codings:
        return Reading(True, headers)
    if decodable(codings):
        plain = [(n, v) for n, v in headers if n.lower() != b"content-encoding"]
        return Reading(True, plain, decode=codings[0])
    return Reading(
        False,
        headers,
        unreadable=f"upstream sent an event stream in content coding {coding_names(codings)}, "
        "which proxai cannot decode; relayed unobserved",
    )


async def read_body(
    response: UpstreamReply,
    channel: trio.MemorySendChannel[ToObserver],
    *,
    clock: UpstreamClock,
    outcome: Outcome,
    tap: Tap | None,
    max_event_bytes: int,
) -> None:
    """Send the head, every read and the end of ``response`` to the observer; stop at
    once if the observer has gone (the rest of the body is left for the caller to close).

    The observer closes its end when it has its verdict, and cancels this task's scope;
    a read already on its way resumes this task all the same, and its send then finds
    the channel closed: the end of the read, not an error of the request.

    Nothing of a read is held while the next one is awaited (a held stream would keep
    its last read, as bytes and as frames, in this frame for as long as it lasts)."""
    send = clock.send_paused
    if tap is not None:
        tap.upstream_head(response.status, response.headers)
    reading = reading_for(response.status, response.headers)
    if reading.anomaly is not None:
        outcome.anomalies.append(reading.anomaly)
    if reading.unreadable is not None:
        log.warning("request %s: %s", outcome.request_id, reading.unreadable)
    framer = SSEFramer() if reading.sse else None
    decoder = Decoder(reading.decode) if reading.decode is not None else None
    try:  # the observer may go at any send: the end of the read, not an error
        try:
            await send(channel, Head(response.status, reading.headers, reading.sse, clock.now()))
            events = response.iter_events() if reading.sse else None
            del reading
            if events is not None:
                await _read_events(events, channel, clock, outcome, tap)
                return
            async for data in response.iter_body():
                at = clock.now()
                outcome.bytes_in += len(data)
                if tap is not None:
                    tap.upstream.add(data)
                if framer is None:
                    await send(channel, Body(data, (), at))
                elif decoder is None and framer.pending + len(data) <= max_event_bytes:
                    # The common read, inline: one undecoded read that cannot overflow.
                    frames = framer.feed(data)
                    if len(frames) == 1:  # the usual read: one whole event
                        raw = frames[0].raw
                    else:
                        raw = b"".join([f.raw for f in frames]) if frames else b""
                    message = Body(raw, frames, at)
                    del raw
                    del frames
                    try:
                        channel.send_nowait(message)
                    except trio.WouldBlock:
                        await send(channel, message)
                    else:
                        clock.queued += 1
                    del message
                else:
                    pieces = decoder.feed(data) if decoder is not None else (data,)
                    if not await _frame(pieces, framer, channel, clock, at, max_event_bytes):
                        return
                    del pieces
                del data
            if response.anomaly is not None:
                outcome.anomalies.append(response.anomaly)
                log.warning("request %s: %s", outcome.request_id, response.anomaly)
            if decoder is not None:
                assert framer is not None  # only an event stream is decoded
                rest = decoder.close()
                if rest and not await _frame(
                    (rest,), framer, channel, clock, clock.now(), max_event_bytes
                ):
                    return
            await send(channel, End(clock.now(), tail=framer.close() if framer else b""))
        except UpstreamBroken as exc:
            tail = framer.close() if framer else b""
            await send(channel, End(clock.now(), OutcomeKind.UPSTREAM_RESET, tail, str(exc)))
        except CorruptCoding as exc:
            # A body that cannot be decoded is as broken as a badly framed one.
            assert framer is not None
            detail = f"upstream sent an event stream that is not valid {exc}"
            end = End(clock.now(), OutcomeKind.UPSTREAM_RESET, framer.close(), detail)
            await send(channel, end)
    except trio.BrokenResourceError:
        return


async def _read_events(
    events: AsyncIterator[SSEFrame],
    channel: trio.MemorySendChannel[ToObserver],
    clock: UpstreamClock,
    outcome: Outcome,
    tap: Tap | None,
) -> None:
    """Send each event of an upstream whose messages are whole events (a WebSocket):
    one read, one event, framed as it was made (nothing to parse)."""
    send = clock.send_paused
    try:
        async for frame in events:
            outcome.bytes_in += len(frame.raw)
            if tap is not None:
                tap.upstream.add(frame.raw)
            await send(channel, Body(frame.raw, (frame,), clock.now()))
    except UpstreamBroken as exc:
        await send(channel, End(clock.now(), OutcomeKind.UPSTREAM_RESET, detail=str(exc)))
        return
    except EventTooLarge as exc:
        fault = OutcomeKind.UPSTREAM_EVENT_TOO_LARGE
        await send(channel, End(clock.now(), fault, detail=str(exc)))
        return
    await send(channel, End(clock.now()))


async def _frame(
    pieces: Iterable[bytes],
    framer: SSEFramer,
    channel: trio.MemorySendChannel[ToObserver],
    clock: UpstreamClock,
    at: float,
    max_event_bytes: int,
) -> bool:
    """Send the frames of one read's (decoded) pieces; False once the stream has ended
    on an event over ``max_event_bytes``."""
    send = clock.send_paused
    sent = False
    for data in pieces:
        frames = framer.feed(data)
        joined = b"".join([f.raw for f in frames]) if frames else b""
        await send(channel, Body(joined, frames, at))
        sent = True
        if framer.pending > max_event_bytes:
            # An event that never ends must not grow without bound.
            detail = f"upstream sent an event over {max_event_bytes} bytes (max_event_bytes)"
            fault = OutcomeKind.UPSTREAM_EVENT_TOO_LARGE
            await send(channel, End(clock.now(), fault, detail=detail))
            return False
    if not sent:
        # A read that completes no frame (or decodes to nothing yet) still tells the
        # observer the upstream is alive.
        await send(channel, Body(b"", (), at))
    return True


def translated_headers(headers: Headers, *, sse: bool) -> Headers:
    """The upstream's headers for a body proxai rewrites into another API: its length,
    encoding and type no longer apply; ``sse``: the client gets an event stream (else the
    client API's JSON), whatever the upstream sent."""
    drop = {b"content-length", b"content-encoding", b"etag", b"content-md5", b"content-type"}
    out = [(n, v) for n, v in headers if n.lower() not in drop]
    out.append(
        (b"content-type", b"text/event-stream; charset=utf-8" if sse else b"application/json")
    )
    return out
