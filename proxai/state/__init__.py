"""Conversation state: stored responses, by tenant, in process or in Redis.

:mod:`.records` is what is kept and its bytes, :mod:`.store` the backends' interface
and :func:`open_store`, :mod:`.memory` the in-process backend and :mod:`.redis` the
shared one (loaded only when configured: it alone needs trio and coredis).
"""

from .memory import MemoryState, MemoryStore
from .records import (
    RecordFormatError,
    ResponseStatus,
    StoredResponse,
)
from .store import RecordTooLarge, StateStore, StateUnavailable, open_store

__all__ = [
    "MemoryState",
    "MemoryStore",
    "RecordFormatError",
    "RecordTooLarge",
    "ResponseStatus",
    "StateStore",
    "StateUnavailable",
    "StoredResponse",
    "open_store",
]
