"""Conversation state: stored responses, by tenant, in process or in Redis.

:mod:`.records` is what is kept and its bytes, :mod:`.store` the stores' interface,
:mod:`.backends` the row of each backend and :func:`open_backend`, :mod:`.memory` the
in-process backend and :mod:`.redis` the shared one, with its limiter in
:mod:`.redis_limits` (both loaded only when configured: they alone need trio and
coredis).
"""

from .backends import BACKENDS, Backend, BackendRow, open_backend, open_store
from .memory import MemoryState, MemoryStore
from .records import (
    RecordFormatError,
    ResponseStatus,
    StoredResponse,
)
from .store import RecordTooLarge, StateStore, StateUnavailable

__all__ = [
    "BACKENDS",
    "Backend",
    "BackendRow",
    "MemoryState",
    "MemoryStore",
    "RecordFormatError",
    "RecordTooLarge",
    "ResponseStatus",
    "StateStore",
    "StateUnavailable",
    "StoredResponse",
    "open_backend",
    "open_store",
]
