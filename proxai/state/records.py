"""What proxai keeps of a stored response, and its bytes, sans-io.

A :class:`StoredResponse` holds a response as the client API shows it: its input items
(after ``previous_response_id`` and ``item_reference`` were expanded), its
``instructions``, its output items and the final response object, each as the JSON
bytes it arrived or was written as, so storing and answering from the store never
re-encodes them. Every record belongs to a *tenant*, the digest of the client key
that created it (:func:`proxai.policy.auth.tenant_of`): lookups are by tenant and id,
so another key's id is simply not there.

The bytes (:meth:`StoredResponse.to_bytes`) are a versioned frame: the length of an
orjson header, the header (fields, and the length of each part), then the parts
concatenated. Each item's place in them is known without parsing
(:meth:`StoredResponse.item_spans`), which lets Redis answer an item by its id with one
``GETRANGE`` instead of sending the whole record.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from typing import Any

import attrs
import orjson

__all__ = [
    "FORMAT_VERSION",
    "RecordFormatError",
    "ResponseStatus",
    "StoredResponse",
    "item_id_of",
]

#: The version of :meth:`StoredResponse.to_bytes`' frame; another is refused on read.
FORMAT_VERSION = 1
#: What :attr:`StoredResponse.size` counts besides the bytes, about what the memory
#: backend spends (by tracemalloc): per item (its place in the record's header), per
#: item with an id (its index entry, ~250 bytes) and per record (its entries).
ITEM_OVERHEAD = 64
INDEXED_ITEM_OVERHEAD = 256
RECORD_OVERHEAD = 512


class ResponseStatus(enum.StrEnum):
    """How a stored response ended (OpenAI stores all three)."""

    COMPLETED = "completed"
    INCOMPLETE = "incomplete"
    FAILED = "failed"


class RecordFormatError(ValueError):
    """Bytes that are not a record of :data:`FORMAT_VERSION` (another version, or torn)."""


def item_id_of(item: bytes) -> str | None:
    """The ``id`` of one JSON item, if it is an object with a string ``id``."""
    try:
        value: Any = orjson.loads(item)
    except orjson.JSONDecodeError:
        return None
    if isinstance(value, dict):
        found = value.get("id")
        if isinstance(found, str) and found:
            return found
    return None


def _item_ids(record: StoredResponse) -> tuple[str | None, ...]:
    return tuple(item_id_of(item) for item in (*record.input_items, *record.output_items))


@attrs.frozen
class StoredResponse:
    """One stored response, as OpenAI's API shows it back."""

    id: str
    tenant: str
    #: Unix time it was created (the response object's ``created_at``).
    created_at: float
    instructions: bytes | None
    input_items: tuple[bytes, ...]
    output_items: tuple[bytes, ...]
    #: The final response object (``response.completed``'s, or the whole body's).
    response: bytes
    status: ResponseStatus = attrs.field(converter=ResponseStatus)
    #: Each item's ``id`` (inputs first, then outputs; ``None`` where it has none):
    #: what ``item_reference`` looks up. Read from the items unless given.
    item_ids: tuple[str | None, ...] = attrs.field(
        default=attrs.Factory(_item_ids, takes_self=True), eq=False, repr=False
    )

    @item_ids.validator
    def _one_per_item(self, attribute: attrs.Attribute[Any], value: tuple[str | None, ...]) -> None:
        if len(value) != len(self.input_items) + len(self.output_items):
            raise ValueError("item_ids: one per input and output item")

    @property
    def items(self) -> tuple[bytes, ...]:
        """Input items, then output items: the order :attr:`item_ids` follows."""
        return (*self.input_items, *self.output_items)

    @property
    def size(self) -> int:
        """What the record costs a store: its bytes and a fixed overhead per item and per
        indexed item (what the memory backend's ``max_bytes`` counts)."""
        parts = len(self.response) + len(self.instructions or b"")
        items = self.input_items + self.output_items
        parts += sum(len(item) for item in items) + len(self.id) + len(self.tenant)
        indexed = sum(1 for item_id in self.item_ids if item_id is not None)
        overhead = ITEM_OVERHEAD * len(items) + INDEXED_ITEM_OVERHEAD * indexed
        return parts + overhead + RECORD_OVERHEAD

    def indexed_items(self) -> Iterator[tuple[str, bytes]]:
        """``(item id, item JSON)`` of every item that has an id."""
        for item_id, item in zip(self.item_ids, self.items, strict=True):
            if item_id is not None:
                yield item_id, item

    # -- bytes ---------------------------------------------------------------------------

    def _header(self) -> bytes:
        return orjson.dumps(
            {
                "v": FORMAT_VERSION,
                "id": self.id,
                "tenant": self.tenant,
                "created_at": self.created_at,
                "status": self.status.value,
                "instructions": None if self.instructions is None else len(self.instructions),
                "input": [len(item) for item in self.input_items],
                "output": [len(item) for item in self.output_items],
                "response": len(self.response),
                "item_ids": list(self.item_ids),
            }
        )

    def to_bytes(self) -> bytes:
        """``<header length>\\n<header JSON><instructions><items...><response>``: one bytes
        object of exactly its length, whatever its parts' own objects hold."""
        header = self._header()
        return b"".join(
            [
                b"%d\n" % len(header),
                header,
                self.instructions or b"",
                *self.input_items,
                *self.output_items,
                self.response,
            ]
        )

    def item_spans(self) -> Iterator[tuple[str, int, int]]:
        """``(item id, offset, length)`` in :meth:`to_bytes` of every item with an id."""
        header = self._header()
        offset = len(b"%d\n" % len(header)) + len(header) + len(self.instructions or b"")
        for item_id, item in zip(self.item_ids, self.items, strict=True):
            if item_id is not None:
                yield item_id, offset, len(item)
            offset += len(item)

    @classmethod
    def from_bytes(cls, data: bytes) -> StoredResponse:
        """The record :meth:`to_bytes` wrote; :class:`RecordFormatError` otherwise."""
        try:
            return _read(cls, data)
        except RecordFormatError:
            raise
        except (ValueError, KeyError, TypeError) as exc:
            raise RecordFormatError(f"not a stored record: {exc!r}") from None


def _read(cls: type[StoredResponse], data: bytes) -> StoredResponse:
    # The view is released on the way out, an exception's too: no traceback keeps
    # ``data`` alive through it.
    with memoryview(data) as view:
        return _read_view(cls, data, view)


def _read_view(cls: type[StoredResponse], data: bytes, view: memoryview) -> StoredResponse:
    newline = data.find(b"\n", 0, 24)
    if newline < 1:
        raise RecordFormatError("not a stored record: no header length")
    start = newline + 1 + int(data[:newline])
    head = orjson.loads(view[newline + 1 : start])
    if head["v"] != FORMAT_VERSION:
        raise RecordFormatError(f"a stored record of format {head['v']!r}")
    offset = start

    def take(length: int) -> bytes:
        nonlocal offset
        part = bytes(view[offset : offset + length])
        if len(part) != length:
            raise RecordFormatError("not a stored record: it ends early")
        offset += length
        return part

    instructions = None if head["instructions"] is None else take(head["instructions"])
    inputs = tuple(take(n) for n in head["input"])
    outputs = tuple(take(n) for n in head["output"])
    response = take(head["response"])
    if offset != len(data):
        raise RecordFormatError("not a stored record: bytes after its end")
    return cls(
        id=head["id"],
        tenant=head["tenant"],
        created_at=float(head["created_at"]),
        instructions=instructions,
        input_items=inputs,
        output_items=outputs,
        response=response,
        status=head["status"],
        item_ids=tuple(head["item_ids"]),
    )
