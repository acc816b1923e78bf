"""A Responses answer stored on its way to the client.

:class:`StoringDownstream` sits between the relay's writer and the client's
:class:`~proxai.relay.writer.Downstream`. It follows the answer the client gets (the
translated one) with a :class:`~proxai.protocols.responses.record.ResponseRecord`
and calls ``save`` *before* the bytes holding the terminal event go out: SDKs and
agents send the next turn the moment they see the terminal, possibly to another
proxai, so the response must already be stored. A whole (non-streamed) answer is
held until it is stored, up to ``max_bytes``; past that it is sent on unstored.

It also claims the ids an upstream that keeps state minted for the client's tenant
(:mod:`proxai.policy.upstream_ids`): ``on_id`` is awaited when a stream's id is known
(its ``response.created``), before that event goes out, so that a background response
polled or cancelled at once is already the tenant's; ``save`` then claims its items.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from ..protocols.table import STORING, ResponseRecord
from ..relay.reader import is_event_stream
from ..relay.writer import Downstream
from ..wire.headers import Headers
from ..wire.sse import SSEFramer

__all__ = ["StoringDownstream"]

Save = Callable[[ResponseRecord], Awaitable[None]]
OnId = Callable[[str], Awaitable[None]]


class StoringDownstream:
    """A :class:`Downstream` that stores the Responses answer passing through it."""

    def __init__(
        self, inner: Downstream, record: ResponseRecord, save: Save, on_id: OnId | None = None
    ) -> None:
        self._inner = inner
        self._record = record
        self._save = save
        self._on_id = on_id
        self._framer: SSEFramer | None = None
        self._held: list[bytes] | None = None
        self._held_bytes = 0
        self.saved = False

    async def send_head(self, status: int, headers: Headers) -> None:
        if status == 200:
            if is_event_stream(status, headers):
                self._framer = SSEFramer()
            else:
                self._held = []
        await self._inner.send_head(status, headers)

    async def send_body(self, data: bytes, *, more: bool = True) -> None:
        if self._framer is not None and not self.saved:
            ended = False
            for frame in self._framer.feed(data):
                if frame.data is not None:
                    self._record.event(frame.data)
                    ended = ended or (
                        STORING.is_terminal(frame.data) and self._record.terminal is not None
                    )
            if self._on_id is not None and self._record.response_id is not None:
                on_id, self._on_id = self._on_id, None
                await on_id(self._record.response_id)
            if ended:
                await self._store()
        elif self._held is not None:
            self._held.append(data)
            self._held_bytes += len(data)
            if self._held_bytes > self._record.max_bytes:
                held, self._held = self._held, None  # too large to store: sent as it is
                await self._inner.send_body(b"".join(held), more=more)
                return
            if more:
                return
            body = b"".join(self._held)
            self._held = None
            self._record.whole(body)
            if self._record.terminal is not None:
                await self._store()
            data = body
        await self._inner.send_body(data, more=more)

    async def _store(self) -> None:
        self.saved = True
        await self._save(self._record)

    async def wait_disconnect(self) -> None:
        await self._inner.wait_disconnect()
