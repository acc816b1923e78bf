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

from collections.abc import Awaitable, Callable, Sequence

import trio

from ..outcome import Outcome
from ..protocols.table import STORING, ResponseRecord
from ..relay.reader import is_event_stream
from ..relay.writer import Downstream
from ..state import RecordTooLarge, StateUnavailable
from ..wire.headers import Headers
from ..wire.sse import SSEFrame
from .conversations import Conversations, StatePlan

__all__ = ["StoringDownstream", "storing_downstream"]

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
        self._events = False  # an event stream: its events are stored as they pass
        self._held: list[bytes] | None = None
        self._held_bytes = 0
        self.saved = False

    async def send_head(self, status: int, headers: Headers) -> None:
        if status == 200:
            if is_event_stream(status, headers):
                self._events = True
            else:
                self._held = []
        await self._inner.send_head(status, headers)

    async def send_body(
        self, data: bytes, *, more: bool = True, frames: Sequence[SSEFrame] = ()
    ) -> None:
        if self._events and not self.saved:
            ended = False
            for frame in frames:  # framed once, by the relay
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
        await self._inner.send_body(data, more=more, frames=frames)

    async def _store(self) -> None:
        self.saved = True
        await self._save(self._record)

    async def wait_disconnect(self) -> None:
        await self._inner.wait_disconnect()

    @property
    def sends(self) -> trio.CancelScope | None:
        return self._inner.sends


def storing_downstream(
    conversations: Conversations, state: StatePlan, downstream: Downstream, outcome: Outcome
) -> Downstream:
    """The client's downstream as the state plan asks: storing the response, claiming
    the upstream's ids of it, or as it is."""
    if state.stored is not None:
        return _storing(conversations, state, downstream, outcome)
    if state.claims:
        return _claiming(conversations, state, downstream, outcome)
    return downstream


def _storing(
    conversations: Conversations, state: StatePlan, downstream: Downstream, outcome: Outcome
) -> Downstream:
    """The client's downstream, storing the response before its terminal goes out."""

    async def save(record: ResponseRecord) -> None:
        try:
            await conversations.save(state, record)
        except StateUnavailable as exc:
            outcome.warnings.append(f"the response was not stored: {exc.message}")
            return
        except RecordTooLarge:
            outcome.warnings.append(
                "the response was not stored: larger than the whole [state] max_bytes"
            )
            return
        outcome.stored_as = record.response_id

    return StoringDownstream(downstream, conversations.record(), save)


def _claiming(
    conversations: Conversations, state: StatePlan, downstream: Downstream, outcome: Outcome
) -> Downstream:
    """The client's downstream, claiming the upstream's ids of the response for its
    tenant: its id before its first event goes out, its items' before its terminal.
    A claim the store does not take leaves the ids unknown (a warning), the response
    served."""

    async def claim(response_id: str, item_ids: Sequence[str] = ()) -> None:
        try:
            await conversations.claim(state.tenant, response_id, item_ids)
        except StateUnavailable as exc:
            outcome.warnings.append(f"the response's ids were not claimed: {exc.message}")

    async def save(record: ResponseRecord) -> None:
        if record.response_id is not None:
            await claim(record.response_id, record.item_ids)

    return StoringDownstream(downstream, conversations.id_record(), save, claim)
