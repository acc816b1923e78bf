"""Request bodies: parsed once as JSON objects and projected, or refused with a 400."""

from __future__ import annotations

from typing import Any, TypeVar

import cattrs
import orjson
from cattrs.errors import ClassValidationError

from ..converters import error_paths
from ..errors import ProxyError

__all__ = ["dumps_kept", "load_json_object", "project_body"]

T = TypeVar("T")


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


def project_body(
    converter: cattrs.Converter, data: dict[str, Any], cls: type[T], *, array: str | None = None
) -> T:
    """Structure a parsed body as ``cls``, or raise 400 with the offending path as ``param``.

    ``array`` names the field the projection leaves out (``input``, ``messages``),
    which is still checked to be an array when it is one by contract.
    """
    if array is not None and array in data and not isinstance(data[array], list):
        raise ProxyError.invalid_request(
            f"invalid request: {array}: expected an array", param=array, code="invalid_value"
        )
    try:
        projection: T = converter.structure(data, cls)
    except (ClassValidationError, TypeError, ValueError) as exc:
        path, reason = error_paths(exc)[0]
        raise ProxyError.invalid_request(
            f"invalid request: {path}: {reason}", param=path or None, code="invalid_value"
        ) from None
    return projection


def dumps_kept(data: object) -> bytes:
    """``orjson.dumps(data)`` for bytes kept as long as a stream (an upstream's request
    body): copied to its exact size, since orjson's result holds on to its whole growth
    buffer (4 KiB for a 100-byte body)."""
    return bytes(memoryview(orjson.dumps(data)))
