"""Request bodies: parsed once as JSON objects and projected, or refused with a 400.

orjson parses JSON nested up to 1,024 levels but writes at most
:data:`MAX_WRITTEN_DEPTH`: a body proxai rewrites (translated, normalized, its model
replaced, counted) deeper than that is refused with a 400 naming the field
(:func:`too_deep`), in place of an error on the way out.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import cattrs
import orjson
from cattrs.errors import ClassValidationError

from ..converters import error_paths
from ..errors import ProxyError

__all__ = [
    "MAX_WRITTEN_DEPTH",
    "deepest",
    "dumps_exact",
    "dumps_kept",
    "json_depth",
    "load_json_object",
    "project_body",
    "structure_str_or_object",
    "too_deep",
]

#: Levels of nested arrays and objects orjson writes (the outermost counts one).
MAX_WRITTEN_DEPTH = 254
#: Steps of a path a 400 names at most (a path into JSON nested 1,000 deep is long).
_NAMED_STEPS = 12

T = TypeVar("T")


#: What nests in parsed JSON (a tuple: ``dict | list`` would be built at every test).
_NESTED = (dict, list)


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


def structure_str_or_object(value: Any, _: Any) -> str | dict[str, Any] | None:
    """cattrs' hook for a projected field that is a string or an object (a ``tool_choice``,
    a ``response_format``), left as it is."""
    if value is None or isinstance(value, str | dict):
        return value
    raise TypeError("expected a string or an object")


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


def dumps_exact(data: object) -> bytes:
    """``orjson.dumps(data)`` copied to its exact size, for bytes that outlive the call:
    orjson's own result holds on to its whole growth buffer (many times its length:
    4 KiB for a 100-byte body, 8 MiB for a 520 KB item)."""
    return bytes(memoryview(orjson.dumps(data)))


def dumps_kept(data: object, *, client_body: Callable[[], Any] | None = None) -> bytes:
    """``orjson.dumps(data)`` for bytes kept as long as a stream (an upstream's request
    body): copied to its exact size, since orjson's result holds on to its whole growth
    buffer (4 KiB for a 100-byte body).

    ``data`` nested deeper than orjson writes is the client's doing: a 400 names the
    deepest field of ``client_body()`` (the request as the client sent it, whose paths
    the client knows), or of ``data`` itself."""
    try:
        return dumps_exact(data)
    except orjson.JSONEncodeError:
        if json_depth(data) <= MAX_WRITTEN_DEPTH:
            raise  # not the nesting: not the client's doing
        raise too_deep(client_body() if client_body is not None else data) from None


def json_depth(value: Any) -> int:
    """How many levels of arrays and objects ``value`` nests (a scalar: 0)."""
    return deepest(value)[0]


def deepest(value: Any) -> tuple[int, str]:
    """The depth of ``value`` and the path of its first deepest array or object
    (``messages[0].content[1].input``), walked without recursion (parsed JSON can nest
    past Python's stack)."""
    best: tuple[int, str] = (0, "")
    pending: list[tuple[Any, int, str]] = [(value, 1, "")]
    while pending:
        node, level, path = pending.pop()
        if isinstance(node, dict):
            items: Any = (
                (f"{path}.{key}" if path else str(key), inner) for key, inner in node.items()
            )
        elif isinstance(node, list):
            items = ((f"{path}[{index}]", inner) for index, inner in enumerate(node))
        else:
            continue
        if level > best[0]:
            best = (level, path)
        # Reversed, so the first deepest in document order is found first.
        for here, inner in reversed(list(items)):
            if isinstance(inner, _NESTED):
                pending.append((inner, level + 1, here))
    return best


def too_deep(value: Any) -> ProxyError:
    """The 400 for a request nested deeper than proxai can write, naming its deepest
    field (its first steps)."""
    depth, path = deepest(value)
    steps = path.replace("[", ".[").split(".")
    named = path
    if len(steps) > _NAMED_STEPS:
        named = ".".join(steps[:_NAMED_STEPS]).replace(".[", "[") + "..."
    return ProxyError.invalid_request(
        f"invalid request: {named or 'the body'}: nested {depth} levels deep, too deep for "
        "proxai to write once it rewrites the request (a translation, which can add a "
        "level, a normalize pass, a model rewrite) or counts its tokens: it writes at most "
        f"{MAX_WRITTEN_DEPTH} levels of JSON",
        param=named or None,
        code="json_too_deep",
    )
