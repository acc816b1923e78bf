"""What the three encoders share: ids, usage, the tool-call repairs."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

import orjson

from ..ir import CUSTOM_TOOL_PARAMETER, Usage

__all__ = [
    "derive_id",
    "merge_usage",
    "unwrap_custom_input",
]

_UNSAFE_ID_CHARS = re.compile(r"[^A-Za-z0-9_-]")


def derive_id(
    upstream_id: str | None,
    prefix: str,
    new_id: Callable[[str], str],
    known_prefixes: Iterable[str],
) -> str:
    """The client API's id for the upstream's response: the same token under the client's
    prefix (``chatcmpl-abc`` -> ``resp_abc``; any of ``known_prefixes``, the APIs' own, is
    stripped first), so logs on both sides match; ``new_id``'s if none."""
    if not upstream_id:
        return new_id(prefix)
    if upstream_id.startswith(prefix):
        return upstream_id
    token = upstream_id
    for known in known_prefixes:
        if token.startswith(known):
            token = token[len(known) :]
            break
    token = _UNSAFE_ID_CHARS.sub("_", token)
    return prefix + token if token else new_id(prefix)


def merge_usage(old: Usage, new: Usage) -> Usage:
    """Counts reported later win; a count a later report leaves out is kept."""
    return Usage(
        input_tokens=_later(old.input_tokens, new.input_tokens),
        output_tokens=_later(old.output_tokens, new.output_tokens),
        cached_tokens=_later(old.cached_tokens, new.cached_tokens),
        reasoning_tokens=_later(old.reasoning_tokens, new.reasoning_tokens),
        cache_creation_tokens=_later(old.cache_creation_tokens, new.cache_creation_tokens),
    )


def _later(old: int | None, new: int | None) -> int | None:
    return old if new is None else new


def unwrap_custom_input(arguments: str) -> str:
    """A custom tool's free-form input from the function arguments it travelled as
    (``{"input": "..."}``); arguments of any other shape are passed on as they are."""
    try:
        parsed = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return arguments
    if isinstance(parsed, dict):
        value = parsed.get(CUSTOM_TOOL_PARAMETER)
        if isinstance(value, str):
            return value
    return arguments
