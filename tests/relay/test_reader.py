"""The relay's reader on its own: what it does when the observer is gone."""

from __future__ import annotations

from collections.abc import AsyncIterator

import attrs
import trio

from proxai.outcome import Outcome
from proxai.relay.clock import UpstreamClock
from proxai.relay.messages import ToObserver
from proxai.relay.reader import read_body
from proxai.wire.headers import Headers


@attrs.define
class Reply:
    """An event stream of ``chunks``, noting how many were read."""

    chunks: list[bytes]
    read: int = 0
    go: trio.Event = attrs.field(factory=trio.Event)  # each chunk waits for it
    status: int = 200
    headers: Headers = attrs.field(factory=lambda: [(b"content-type", b"text/event-stream")])
    method: str = "POST"
    anomaly: str | None = None

    def iter_events(self) -> None:
        return None

    async def iter_body(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            await self.go.wait()
            self.read += 1
            yield chunk


async def test_an_observer_gone_mid_body_ends_the_read_quietly() -> None:
    """The observer ends (a translator failed, a verdict reached) and closes its end of
    the channel while the reader holds a read it has not sent yet: trio resumes the
    reader with that read even though its scope was cancelled, so its next send finds
    the channel broken. That is the end of the read, not an error of the request
    (it was one, 1 run in 15, under tests/translate/test_ends.py): the rest of the body
    stays unread, for the caller to close."""
    send, receive = trio.open_memory_channel[ToObserver](4)
    reply = Reply([b"data: {}\n\n"] * 3)
    outcome = Outcome("POST", "/v1/responses")
    ended = trio.Event()

    async def reader() -> None:
        await read_body(
            reply, send, clock=UpstreamClock(), outcome=outcome, tap=None, max_event_bytes=1024
        )
        ended.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(reader)
        await receive.receive()  # the head
        await receive.aclose()  # the observer is done
        reply.go.set()  # the read it had asked for arrives
        with trio.fail_after(1):
            await ended.wait()
    assert reply.read == 1  # nothing more is read
