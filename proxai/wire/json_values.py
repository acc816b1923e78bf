"""Values read out of JSON that may hold anything: a peer's body, event or field.

One spelling each for "this, if it is of the type proxai needs, else nothing", so
every reader treats a wrong type alike.
"""

from __future__ import annotations

from typing import Any

import orjson

__all__ = ["count_or_none", "field_of", "json_object_or_none", "str_or_none"]


def str_or_none(value: object) -> str | None:
    """``value`` if it is a string, else ``None``."""
    return value if isinstance(value, str) else None


def count_or_none(value: object) -> int | None:
    """``value`` if it is a count (an integer, not a bool, not negative), else ``None``."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def field_of(value: object, key: str) -> object:
    """``value[key]`` if ``value`` is a JSON object, else ``None``."""
    return value.get(key) if isinstance(value, dict) else None


def json_object_or_none(data: bytes | bytearray | memoryview | str) -> dict[str, Any] | None:
    """The JSON object ``data`` holds, or ``None`` for anything else (not JSON, or JSON
    that is not an object)."""
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None
