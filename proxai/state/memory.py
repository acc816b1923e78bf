"""The in-process backend: bounded by bytes and by age, O(1) per call, sans-io.

:class:`MemoryState` is the whole logic, synchronous and fed the time by a clock;
:class:`MemoryStore` is the :class:`~proxai.state.store.StateStore` on top of it (its
calls never wait, so they never time out). Two orders are kept over the same records:

- use (least recently used first): ``put`` and ``get`` move a record to the end; when
  the bytes held pass ``max_bytes`` the front goes;
- age (oldest first): every record lives ``ttl`` from its ``put``, so the order of puts
  is the order of expiry, and each call frees the expired ones from the front. An
  expired record is never answered even before it is freed.

Each record is held as one bytes object, its :meth:`~StoredResponse.to_bytes`, of
exactly its length: what it counts is what it holds, whatever the parts it was made of
held (orjson's results keep their growth buffer, several times their length), and none
of them is kept. A ``get`` reads a record from its bytes; an item is sliced out of them.
An item's index entry names the record that holds it and where in its bytes, and goes
with that record (an item seen again in a later response, as its input, is indexed to
the later one). The owners of an upstream's ids (:meth:`MemoryState.claim`) are entries
of the same two orders, counted in ``max_bytes`` and expired by ``ttl`` as records are.
Memory is linear in what is held: the records and owners, two dictionary entries each,
and one entry per indexed item.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Sequence

import attrs

from .records import StoredResponse
from .store import RecordTooLarge

__all__ = ["MemoryState", "MemoryStore"]

_Key = tuple[str, str]  # (tenant, id)
#: The tenant slot of an owner's key: a tenant is hex or ``unauthenticated``, never this.
_OWNER = "owner:"
#: What an owner entry costs besides its id and tenant (its entries in both orders).
OWNER_OVERHEAD = 192


@attrs.define
class _Entry:
    #: The record's bytes (:meth:`StoredResponse.to_bytes`): one object, its exact size;
    #: ``None``: an owner entry (``owner`` says whose the id is).
    data: bytes | None
    size: int
    expires_at: float
    #: Its items' ids, to forget their index entries with it.
    item_ids: tuple[str | None, ...] = ()
    owner: str = ""


class MemoryState:
    """Stored responses in this process, synchronously (see the module's docstring)."""

    def __init__(self, *, max_bytes: int, ttl: float, clock: Callable[[], float]) -> None:
        self.max_bytes = max_bytes
        self.ttl = ttl
        self._clock = clock
        self._by_use: OrderedDict[_Key, _Entry] = OrderedDict()
        self._by_age: OrderedDict[_Key, None] = OrderedDict()
        #: (tenant, item id) -> (id of the record holding it, its offset and length there)
        self._items: dict[_Key, tuple[str, int, int]] = {}
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._by_use)

    @property
    def indexed_items(self) -> int:
        return len(self._items)

    def get(self, tenant: str, response_id: str) -> StoredResponse | None:
        self._expire()
        key = (tenant, response_id)
        entry = self._by_use.get(key)
        if entry is None or entry.data is None:
            return None
        self._by_use.move_to_end(key)
        return StoredResponse.from_bytes(entry.data)

    def put(self, record: StoredResponse) -> None:
        size = record.size
        if size > self.max_bytes:
            raise RecordTooLarge(
                f"a stored response of {size} bytes is larger than state.max_bytes "
                f"({self.max_bytes})"
            )
        self._expire()
        key = (record.tenant, record.id)
        self._drop(key)
        data = record.to_bytes()
        self._add(key, _Entry(data, size, self._clock() + self.ttl, record.item_ids))
        for item_id, offset, length in record.item_spans():
            self._items[(record.tenant, item_id)] = (record.id, offset, length)
        self._evict()

    def claim(self, tenant: str, ids: Sequence[str]) -> None:
        self._expire()
        expires_at = self._clock() + self.ttl
        for claimed in ids:
            key = (_OWNER, claimed)
            if key in self._by_use:  # the first owner stays
                self._by_use.move_to_end(key)
                continue
            size = len(claimed) + len(tenant) + OWNER_OVERHEAD
            self._add(key, _Entry(None, size, expires_at, owner=tenant))
        self._evict()

    def owners(self, ids: Sequence[str]) -> tuple[str | None, ...]:
        self._expire()
        found: list[str | None] = []
        for claimed in ids:
            entry = self._by_use.get((_OWNER, claimed))
            if entry is not None:
                self._by_use.move_to_end((_OWNER, claimed))  # a use, as a get is
            found.append(None if entry is None else entry.owner)
        return tuple(found)

    def _add(self, key: _Key, entry: _Entry) -> None:
        self._by_use[key] = entry
        self._by_age[key] = None
        self.bytes += entry.size

    def _evict(self) -> None:
        while self.bytes > self.max_bytes:
            self._drop(next(iter(self._by_use)))

    def delete(self, tenant: str, response_id: str) -> bool:
        self._expire()
        return self._drop((tenant, response_id))

    def item(self, tenant: str, item_id: str) -> bytes | None:
        self._expire()
        found = self._items.get((tenant, item_id))
        if found is None:
            return None
        holder, offset, length = found
        self._by_use.move_to_end((tenant, holder))  # a use, as a get is
        data = self._by_use[(tenant, holder)].data
        assert data is not None  # an item's index names records only
        return data[offset : offset + length]

    def clear(self) -> None:
        self._by_use.clear()
        self._by_age.clear()
        self._items.clear()
        self.bytes = 0

    def _expire(self) -> None:
        """Free the expired records: the oldest first, stopping at the first alive
        (each record is freed once, so this is O(1) amortized per call)."""
        now = self._clock()
        while self._by_age:
            key = next(iter(self._by_age))
            if self._by_use[key].expires_at > now:
                return
            self._drop(key)

    def _drop(self, key: _Key) -> bool:
        entry = self._by_use.pop(key, None)
        if entry is None:
            return False
        del self._by_age[key]
        self.bytes -= entry.size
        tenant, response_id = key
        for item_id in entry.item_ids:
            if item_id is not None:
                found = self._items.get((tenant, item_id))
                if found is not None and found[0] == response_id:
                    del self._items[(tenant, item_id)]
        return True


class MemoryStore:
    """:class:`MemoryState` as a :class:`~proxai.state.store.StateStore`."""

    def __init__(
        self, *, max_bytes: int, ttl: float, clock: Callable[[], float] = time.time
    ) -> None:
        self.state = MemoryState(max_bytes=max_bytes, ttl=ttl, clock=clock)

    async def get(self, tenant: str, response_id: str) -> StoredResponse | None:
        return self.state.get(tenant, response_id)

    async def put(self, record: StoredResponse) -> None:
        self.state.put(record)

    async def delete(self, tenant: str, response_id: str) -> bool:
        return self.state.delete(tenant, response_id)

    async def item(self, tenant: str, item_id: str) -> bytes | None:
        return self.state.item(tenant, item_id)

    async def claim(self, tenant: str, ids: Sequence[str]) -> None:
        self.state.claim(tenant, ids)

    async def owners(self, ids: Sequence[str]) -> tuple[str | None, ...]:
        return self.state.owners(ids)

    async def aclose(self) -> None:
        self.state.clear()
