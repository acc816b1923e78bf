"""Checks a JSON value against the SDKs' own request TypedDicts (openai, anthropic).

The SDKs describe every request body as nested TypedDicts; this walks one and
reports each key the type does not know, each required key missing, and each
value of the wrong kind, with its path. Stricter than pydantic's TypedDict
validation, which ignores unknown keys and checks ``Iterable`` fields lazily.
"""

from __future__ import annotations

import collections.abc
import os
import types
import typing
from typing import Any, Literal, Union, get_args, get_origin

import typing_extensions

__all__ = ["type_errors"]

_WRAPPERS = {typing_extensions.Required, typing_extensions.NotRequired, typing.Required}
_SEQUENCES = {
    list,
    collections.abc.Iterable,
    collections.abc.Sequence,
    typing.Iterable,
    typing.List,  # noqa: UP006
    typing.Sequence,
}


def _is_typeddict(tp: Any) -> bool:
    return typing_extensions.is_typeddict(tp) or typing.is_typeddict(tp)


def _hints(td: Any) -> dict[str, Any]:
    return typing_extensions.get_type_hints(td, include_extras=True)


def _required(td: Any, hints: dict[str, Any]) -> set[str]:
    # The SDKs' modules use postponed annotations, so ``__required_keys__`` misses
    # ``Required[...]`` (it still knows a key from a ``total=False`` base is optional).
    required = set()
    for key, hint in hints.items():
        origin = get_origin(hint)
        if origin in (typing_extensions.Required, typing.Required) or (
            key in td.__required_keys__ and origin is not typing_extensions.NotRequired
        ):
            required.add(key)
    return required


def _unwrap(tp: Any) -> Any:
    while get_origin(tp) in _WRAPPERS or get_origin(tp) is typing_extensions.Annotated:
        tp = get_args(tp)[0]
    return tp


def type_errors(
    value: Any, tp: Any, path: str = "$", *, extra: frozenset[str] = frozenset()
) -> list[str]:
    """Every way ``value`` is not a ``tp`` (empty: it is one). ``extra``: keys allowed in any
    object besides the typed ones (``reasoning_content``: a DeepSeek extension)."""
    tp = _unwrap(tp)
    if tp is Any or tp is object:
        return []
    if tp is type(None) or tp is None:
        return [] if value is None else [f"{path}: expected null, got {value!r}"]
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        return _union_errors(value, get_args(tp), path, extra)
    if origin is Literal or origin is typing_extensions.Literal:
        ok = any(value == a and type(value) is type(a) for a in get_args(tp))
        return [] if ok else [f"{path}: {value!r} is not one of {get_args(tp)}"]
    if _is_typeddict(tp):
        return _typeddict_errors(value, tp, path, extra)
    if origin in _SEQUENCES or tp in _SEQUENCES or _is_sequence_alias(tp):
        if not isinstance(value, list):
            return [f"{path}: expected an array, got {type(value).__name__}"]
        args = get_args(tp)
        inner = args[0] if args else Any
        return [
            e
            for i, item in enumerate(value)
            for e in type_errors(item, inner, f"{path}[{i}]", extra=extra)
        ]
    if origin in (dict, collections.abc.Mapping, typing.Dict) or tp is dict:  # noqa: UP006
        if not isinstance(value, dict):
            return [f"{path}: expected an object, got {type(value).__name__}"]
        args = get_args(tp)
        inner = args[1] if len(args) == 2 else Any
        return [
            e for k, v in value.items() for e in type_errors(v, inner, f"{path}.{k}", extra=extra)
        ]
    if tp is bool:
        return [] if isinstance(value, bool) else [f"{path}: expected a boolean, got {value!r}"]
    if tp is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
        return [] if ok else [f"{path}: expected an integer, got {value!r}"]
    if tp is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        return [] if ok else [f"{path}: expected a number, got {value!r}"]
    if tp is str:
        return [] if isinstance(value, str) else [f"{path}: expected a string, got {value!r}"]
    if origin is typing.IO or tp is os.PathLike or origin is os.PathLike:
        return [f"{path}: a file object cannot come from JSON"]
    if isinstance(tp, type):  # an SDK model class (responses' blocks passed back): never JSON
        return [] if isinstance(value, tp) else [f"{path}: expected a {tp.__name__} object"]
    raise TypeError(f"{path}: the checker does not know {tp!r}")


def _is_sequence_alias(tp: Any) -> bool:
    # openai's SequenceNotStr[str] is a Protocol generic: treat it as a sequence.
    return getattr(get_origin(tp) or tp, "__name__", "") == "SequenceNotStr"


def _union_errors(
    value: Any, options: tuple[Any, ...], path: str, extra: frozenset[str]
) -> list[str]:
    found = [(option, type_errors(value, option, path, extra=extra)) for option in options]
    if any(not errors for _, errors in found):
        return []
    for option, errors in found:
        if _discriminated(value, option):
            return errors  # the member its "type" names: its errors say what is wrong
    return min((errors for _, errors in found), key=len)


def _discriminated(value: Any, option: Any) -> bool:
    option = _unwrap(option)
    if not (_is_typeddict(option) and isinstance(value, dict) and "type" in value):
        return False
    hint = _unwrap(_hints(option).get("type"))
    return get_origin(hint) is Literal and get_args(hint) == (value["type"],)


def _typeddict_errors(value: Any, td: Any, path: str, extra: frozenset[str]) -> list[str]:
    if not isinstance(value, dict):
        return [f"{path}: expected an object ({td.__name__}), got {type(value).__name__}"]
    hints = _hints(td)
    errors = [
        f"{path}: {td.__name__} has no key {k!r}"
        for k in value
        if k not in hints and k not in extra
    ]
    errors += [
        f"{path}: {td.__name__} requires {k!r}" for k in _required(td, hints) if k not in value
    ]
    for key, item in value.items():
        if key in hints:
            errors += type_errors(item, hints[key], f"{path}.{key}", extra=extra)
    return errors
