"""What every request translator needs: refusals naming a path, the dropped list, small shapes."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any, NoReturn

import orjson

from ...errors import ProxyError
from ..ir import CUSTOM_TOOL_PARAMETER, TranslationContext

__all__ = [
    "MAX_TOOL_NAME",
    "PARTS_JOINER",
    "SECTIONS_JOINER",
    "as_dict",
    "as_list",
    "custom_tool_description",
    "custom_tool_schema",
    "drop",
    "drop_unhandled",
    "dumps",
    "each_object",
    "object_schema",
    "refuse",
    "shorten_tool_name",
    "text_of",
]

#: Parts of one message that must become one string are joined with this.
PARTS_JOINER = "\n"
#: Separate instructions (system prompt, developer messages) merged into one are joined with this.
SECTIONS_JOINER = "\n\n"
#: The longest function name OpenAI's Chat Completions accepts.
MAX_TOOL_NAME = 64

JSON = Any


def refuse(message: str, param: str) -> NoReturn:
    """400 ``invalid_request_error`` naming ``param``: this request cannot be translated."""
    raise ProxyError.invalid_request(message, param=param, code="unsupported_value")


def drop(ctx: TranslationContext, path: str) -> None:
    """Note that ``path`` of the request was not forwarded (once per path)."""
    ctx.note_dropped(path)


def drop_unhandled(
    ctx: TranslationContext,
    body: dict[str, JSON],
    handled: frozenset[str],
    *,
    false_is_unset: bool = False,
) -> None:
    """Note every field of ``body`` set but not in ``handled`` (the fields a translator reads);
    null is unset, and so is ``false`` where ``false_is_unset`` (Chat's off switches)."""
    for key, value in body.items():
        if key not in handled and value is not None and not (false_is_unset and value is False):
            drop(ctx, key)


def as_list(value: JSON, param: str) -> list[JSON]:
    """``value`` as an array, ``[]`` for null; 400 for anything else."""
    if value is None:
        return []
    if not isinstance(value, list):
        refuse(f"invalid request: {param}: expected an array", param)
    return value


def as_dict(value: JSON, param: str) -> dict[str, JSON]:
    """``value`` as an object; 400 for anything else."""
    if not isinstance(value, dict):
        refuse(f"invalid request: {param}: expected an object", param)
    return value


def each_object(value: JSON, param: str) -> Iterator[tuple[str, dict[str, JSON]]]:
    """Each element of an array (none for null) as an object, with its path (``param[i]``);
    400 naming the first that is not one."""
    for index, element in enumerate(as_list(value, param)):
        path = f"{param}[{index}]"
        yield path, as_dict(element, path)


def text_of(value: JSON, param: str) -> str:
    """A string field (``None`` reads as empty); 400 for anything else."""
    if value is None:
        return ""
    if not isinstance(value, str):
        refuse(f"invalid request: {param}: expected a string", param)
    return value


def dumps(value: JSON) -> str:
    """Compact JSON text, non-ASCII kept (tool arguments, as models write them)."""
    return orjson.dumps(value).decode()


def object_schema(schema: JSON) -> dict[str, JSON]:
    """A function's parameters as an object schema: Chat upstreams reject any other root
    (and a missing one), while Responses and Anthropic tools may leave it out."""
    if not isinstance(schema, dict):
        return {"type": "object", "properties": {}}
    return {**schema, "type": "object"}


def custom_tool_schema() -> dict[str, JSON]:
    """The parameters of a free-form (custom) tool sent as a function: one string."""
    return {
        "type": "object",
        "properties": {CUSTOM_TOOL_PARAMETER: {"type": "string"}},
        "required": [CUSTOM_TOOL_PARAMETER],
    }


def custom_tool_description(description: str, syntax: JSON, rules: str) -> str:
    """A free-form tool's description with its grammar told: the model cannot be constrained
    to it any more once the tool is a function, so it is at least told."""
    note = f"The `{CUSTOM_TOOL_PARAMETER}` must match this {syntax} grammar:\n"
    return (description + SECTIONS_JOINER if description else "") + note + rules


def shorten_tool_name(name: str, ctx: TranslationContext) -> str:
    """``name`` cut to :data:`MAX_TOOL_NAME` characters, made unique by a hash of the whole,
    with the way back recorded in ``ctx.tool_names``; short names are left alone."""
    if len(name) <= MAX_TOOL_NAME:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    short = f"{name[: MAX_TOOL_NAME - 9]}_{digest}"
    ctx.tool_names[short] = name
    return short
