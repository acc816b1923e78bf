"""Strict cattrs converters and readable paths for their errors.

Both the configuration and the typed request projections are structured with
cattrs; both want strict scalars (a string is not a number, a boolean is not an
integer) and errors that name the offending key as a path such as
``timeouts.idle`` or ``tools[1].name``.
"""

from __future__ import annotations

import typing
from collections.abc import Iterable
from typing import Any

import attrs
import cattrs
from cattrs.errors import (
    ClassValidationError,
    ForbiddenExtraKeysError,
    IterableValidationError,
    IterableValidationNote,
)

__all__ = ["InvalidValue", "error_paths", "strict_converter"]


class InvalidValue(ValueError):
    """A validator's complaint about one attribute, so the message can name the key."""

    def __init__(self, attribute: attrs.Attribute[Any], reason: str) -> None:
        super().__init__(f"{attribute.name}: {reason}")
        self.key = attribute.name
        self.reason = reason


_NAMES = {
    dict: "an object",
    list: "an array",
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "a boolean",
    type(None): "null",
}


def _type_name(value: Any) -> str:
    return _NAMES.get(type(value), type(value).__name__)


def strict_converter(*, forbid_extra_keys: bool) -> cattrs.Converter:
    """A converter whose str/int/float/bool hooks check types instead of coercing."""
    conv = cattrs.Converter(forbid_extra_keys=forbid_extra_keys, detailed_validation=True)

    def exact(kind: type[Any], *accepted: type[Any]) -> None:
        def structure(value: Any, _: type[Any]) -> Any:
            # bool is an int subclass in Python; TOML and JSON keep them apart, so do we.
            if (isinstance(value, bool) and bool not in accepted) or not isinstance(
                value, accepted
            ):
                raise TypeError(f"expected {_NAMES[kind]}, got {_type_name(value)}")
            return kind(value)

        conv.register_structure_hook(kind, structure)

    exact(str, str)
    exact(int, int)
    exact(float, float, int)
    exact(bool, bool)
    # Any: free-form JSON (schemas, metadata values) is kept as it came.
    conv.register_structure_hook(Any, lambda value, _: value)

    # cattrs would build a list from any iterable (a dict, a string): require the real thing.
    conv.register_structure_hook_factory(
        lambda t: _origin(t) == "list", lambda t: _list_hook(conv, t)
    )
    conv.register_structure_hook_factory(
        lambda t: _origin(t) == "dict", lambda t: _dict_hook(conv, t)
    )
    return conv


def _origin(kind: Any) -> str | None:
    origin: Any = typing.get_origin(kind)
    return {list: "list", dict: "dict"}.get(origin)


def _structure_items(
    conv: cattrs.Converter, items: Iterable[tuple[Any, Any]], item_type: Any, kind: Any
) -> list[tuple[Any, Any]]:
    """Structure each (key, value); report every failure with its key as a path note."""
    out: list[tuple[Any, Any]] = []
    errors: list[Exception] = []
    for key, item in items:
        try:
            out.append((key, conv.structure(item, item_type)))
        except Exception as exc:
            exc.__notes__ = [
                *getattr(exc, "__notes__", []),
                IterableValidationNote("", key, item_type),
            ]
            errors.append(exc)
    if errors:
        raise IterableValidationError("invalid items", errors, kind)
    return out


def _list_hook(conv: cattrs.Converter, kind: Any) -> Any:
    (item_type,) = typing.get_args(kind)

    def structure(value: Any, _: Any) -> list[Any]:
        if not isinstance(value, list):
            raise TypeError(f"expected {_NAMES[list]}, got {_type_name(value)}")
        return [item for _, item in _structure_items(conv, enumerate(value), item_type, kind)]

    return structure


def _dict_hook(conv: cattrs.Converter, kind: Any) -> Any:
    _, value_type = typing.get_args(kind)

    def structure(value: Any, _: Any) -> dict[Any, Any]:
        if not isinstance(value, dict):
            raise TypeError(f"expected {_NAMES[dict]}, got {_type_name(value)}")
        if value_type is Any:
            return value
        return dict(_structure_items(conv, value.items(), value_type, kind))

    return structure


def _join(path: str, key: object) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else str(key)


def error_paths(exc: BaseException, path: str = "") -> list[tuple[str, str]]:
    """Flatten cattrs' nested validation errors into ``(path, reason)`` pairs."""
    if isinstance(exc, ForbiddenExtraKeysError):
        return [(_join(path, key), "unknown key") for key in sorted(exc.extra_fields)]
    if isinstance(exc, ClassValidationError | IterableValidationError):
        pairs: list[tuple[str, str]] = []
        for sub in exc.exceptions:
            where = path
            for note in getattr(sub, "__notes__", []):
                if hasattr(note, "name"):
                    where = _join(path, note.name)
                    break
                if hasattr(note, "index"):
                    where = _join(path, note.index)
                    break
            pairs.extend(error_paths(sub, where))
        return pairs
    if isinstance(exc, InvalidValue):
        return [(_join(path, exc.key), exc.reason)]
    if isinstance(exc, KeyError):
        return [(path, "required key is missing")]
    return [(path, str(exc))]
