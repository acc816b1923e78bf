"""Values read out of JSON that may hold anything: a peer's body, event or field.

One spelling each for "this, if it is of the type proxai needs, else nothing", so
every reader treats a wrong type alike.
"""

from __future__ import annotations

from typing import Any

import orjson

__all__ = ["json_object_or_none", "str_or_none"]


def str_or_none(value: object) -> str | None:
    """``value`` if it is a string, else ``None``."""
    return value if isinstance(value, str) else None


def json_object_or_none(data: bytes | bytearray | memoryview | str) -> dict[str, Any] | None:
    """The JSON object ``data`` holds, or ``None`` for anything else (not JSON, or JSON
    that is not an object)."""
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None
