"""Request bodies that must be JSON objects: parsed once, refused with OpenAI's 400."""

from __future__ import annotations

from typing import Any

import orjson

from .errors import ProxyError

__all__ = ["load_json_object"]


def load_json_object(body: bytes) -> dict[str, Any]:
    """Parse ``body`` as a JSON object or raise :class:`ProxyError` (400, ``invalid_json``)."""
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ProxyError.invalid_request(
            f"request body is not valid JSON: {exc}", code="invalid_json"
        ) from None
    if not isinstance(value, dict):
        raise ProxyError.invalid_request(
            f"request body must be a JSON object, got {type(value).__name__}", code="invalid_json"
        )
    return value
