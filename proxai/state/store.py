"""The stores' one interface and their failures (:mod:`.backends` opens one).

The interface is small on purpose: a record in, a record or one item out, by tenant
and id; and the owners of the ids an upstream that keeps state minted, by id alone.
Expanding history, resolving references, bounding and deciding who may name an id are
done above it (and, for the memory backend, in :mod:`proxai.state.memory`'s sans-io
core), so that both backends pass the same contract tests and a third would need only
these seven methods.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ..errors import ProxyError
from ..outcome import OutcomeKind
from .records import StoredResponse

__all__ = ["RecordTooLarge", "StateStore", "StateUnavailable"]


class StateUnavailable(ProxyError):
    """The backend did not answer within ``[state] timeout``, or answered an error:
    a 503 in the client API's error shape (``code: "state_unavailable"``)."""

    def __init__(self, reason: str) -> None:
        super().__init__(
            503,
            f"proxai's conversation state store is unavailable ({reason}); retry the request",
            "server_error",
            code="state_unavailable",
            headers=((b"retry-after", b"1"),),
            kind=OutcomeKind.STATE_UNAVAILABLE,
        )


class RecordTooLarge(ValueError):
    """A record larger than the memory backend's whole ``max_bytes``: not stored."""


class StateStore(Protocol):
    """Stored responses, each scoped to its tenant: another tenant's id is ``None``.

    Every method may raise :class:`StateUnavailable` (never after more than ``[state]
    timeout``); :meth:`put` may raise :class:`RecordTooLarge`.
    """

    async def get(self, tenant: str, response_id: str) -> StoredResponse | None:
        """The record, or ``None`` if unknown, expired, evicted or deleted."""
        ...

    async def put(self, record: StoredResponse) -> None:
        """Store (or replace) ``record`` and index its items by id, for ``ttl``."""
        ...

    async def delete(self, tenant: str, response_id: str) -> bool:
        """Forget the record and its items' index; whether it was there."""
        ...

    async def item(self, tenant: str, item_id: str) -> bytes | None:
        """The JSON of an item of a stored response (``item_reference``), by its id."""
        ...

    async def claim(self, tenant: str, ids: Sequence[str]) -> None:
        """Record ``ids`` (a response and its items, minted by an upstream that keeps
        state) as ``tenant``'s, for ``ttl``; an id already claimed keeps its owner."""
        ...

    async def owners(self, ids: Sequence[str]) -> tuple[str | None, ...]:
        """The tenant that claimed each id (``None``: unknown, expired or evicted)."""
        ...

    async def aclose(self) -> None:
        """Release the backend (idempotent); the store answers nothing afterwards."""
        ...
