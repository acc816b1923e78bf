"""``/v1/messages/count_tokens`` answered by proxai when the model's upstream is not Anthropic.

Only an estimate, and documented as one: no tokenizer of the upstream's model
is at hand. Every character of text (system prompt, messages, tool calls and
results, thinking, tool names, descriptions and schemas as JSON) counts a
quarter token, rounded up; each message adds :data:`MESSAGE_TOKENS` for its
framing; each image or binary document counts :data:`IMAGE_TOKENS` (about what
Anthropic bills for an image of its largest unscaled size).
"""

from __future__ import annotations

import math
from typing import Any

import orjson

from ...wire.json_body import too_deep

__all__ = [
    "CHARS_PER_TOKEN",
    "IMAGE_TOKENS",
    "MESSAGE_TOKENS",
    "count_tokens_body",
    "estimate_input_tokens",
]

CHARS_PER_TOKEN = 4
IMAGE_TOKENS = 1600
MESSAGE_TOKENS = 4

#: Keys whose values are identifiers, binary data or caching hints, not text the model reads.
_NOT_TEXT = frozenset(
    {"type", "id", "tool_use_id", "signature", "data", "media_type", "cache_control", "citations"}
)


class _Tally:
    def __init__(self) -> None:
        self.chars = 0
        self.tokens = 0

    def add(self, value: Any) -> None:
        """Count ``value``'s text, walked without recursion (a client's JSON can nest a
        thousand levels, past Python's stack)."""
        pending = [value]
        while pending:
            value = pending.pop()
            if isinstance(value, str):
                self.chars += len(value)
            elif isinstance(value, list):
                pending += value
            elif isinstance(value, dict):
                self._block(value, pending)

    def _block(self, block: dict[str, Any], pending: list[Any]) -> None:
        source = block.get("source")
        binary = isinstance(source, dict) and source.get("type") in ("base64", "url", "file")
        if block.get("type") in ("image", "document") and binary:
            self.tokens += IMAGE_TOKENS
            return
        for key, value in block.items():
            if key == "input" and isinstance(value, dict):  # tool_use input: its JSON
                self.chars += len(orjson.dumps(value).decode())
            elif key not in _NOT_TEXT:
                pending.append(value)


def estimate_input_tokens(body: dict[str, Any]) -> int:
    """An estimate of a Messages request's input tokens (see the module docstring); 400
    for a body nested deeper than orjson writes (its tool inputs and tools are counted
    as JSON)."""
    try:
        return _estimate(body)
    except orjson.JSONEncodeError:
        raise too_deep(body) from None


def _estimate(body: dict[str, Any]) -> int:
    tally = _Tally()
    tally.add(body.get("system"))
    messages = body.get("messages")
    for message in messages if isinstance(messages, list) else ():
        tally.tokens += MESSAGE_TOKENS
        if isinstance(message, dict):
            tally.add(message.get("content"))
    tools = body.get("tools")
    for tool in tools if isinstance(tools, list) else ():
        if isinstance(tool, dict):
            tool = {k: v for k, v in tool.items() if k != "cache_control"}
        tally.chars += len(orjson.dumps(tool).decode())
    return max(1, math.ceil(tally.chars / CHARS_PER_TOKEN) + tally.tokens)


def count_tokens_body(body: dict[str, Any]) -> dict[str, int]:
    """The ``count_tokens`` answer for a request body: ``{"input_tokens": n}``."""
    return {"input_tokens": estimate_input_tokens(body)}
