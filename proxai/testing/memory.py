"""Scripts played in memory, as an httpx transport: for deadline tests on a virtual clock.

:class:`ScriptTransport` plays the same :class:`~proxai.testing.upstream.Script`
objects as :class:`~proxai.testing.upstream.ScriptedUpstream`, but inside the
test's trio run instead of over a socket, so ``Sleep`` and ``Stall`` take
virtual time under pytest-trio's ``autojump_clock`` and every deadline can be
checked at its exact instant. ``Close`` and ``Reset`` raise what httpx raises
for them on a real connection.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Sequence

import httpx
import trio

from .upstream import Close, RecordedRequest, Reset, Responder, Script, Send, Sleep, Stall, Step

__all__ = ["ScriptTransport"]


async def _control(step: Step, *, before_head: bool) -> None:
    if isinstance(step, Sleep):
        await trio.sleep(step.seconds)
    elif isinstance(step, Stall):
        await trio.sleep(math.inf)
    elif isinstance(step, Reset):
        raise httpx.ReadError("[Errno 104] Connection reset by peer")
    elif isinstance(step, Close):
        if before_head:
            raise httpx.RemoteProtocolError("Server disconnected without sending a response.")
        raise httpx.RemoteProtocolError(
            "peer closed connection without sending complete message body"
        )


class _ScriptBody(httpx.AsyncByteStream):
    def __init__(self, steps: Sequence[Step], record: RecordedRequest) -> None:
        self._steps = steps
        self._record = record

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for step in self._steps:
            if isinstance(step, Send):
                if step.data:
                    self._record.bytes_sent += len(step.data)
                    yield step.data
            else:
                await _control(step, before_head=False)

    async def aclose(self) -> None:
        self._record._mark_closed()


class ScriptTransport(httpx.AsyncBaseTransport):
    """An httpx transport whose "server" plays scripts in the caller's trio run."""

    def __init__(self, responder: Responder | Sequence[Script]) -> None:
        if callable(responder):
            self._responder: Responder = responder
        else:
            scripts = list(responder)

            def in_order(request: RecordedRequest) -> Script:
                return scripts[min(len(self.requests) - 1, len(scripts) - 1)]

            self._responder = in_order
        self.requests: list[RecordedRequest] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = await request.aread()
        record = RecordedRequest(
            method=request.method,
            target=request.url.raw_path.decode("ascii"),
            headers=list(request.headers.raw),
            body=body,
            received_at=trio.current_time(),
        )
        self.requests.append(record)
        script = self._responder(record)
        try:
            for step in script.before_head:
                await _control(step, before_head=True)
        except BaseException:
            record._mark_closed()
            raise
        headers = list(script.headers)
        if script.content_length:
            headers.append(("content-length", str(len(script.body))))
        return httpx.Response(
            script.status, headers=headers, stream=_ScriptBody(script.steps, record)
        )
