"""Writing a Chat Completions request, as both translators to Chat must (from Messages, from
Responses): where system prompts go."""

from __future__ import annotations

from typing import Any

from ._common import SECTIONS_JOINER

__all__ = ["add_system"]

JSON = Any


def add_system(messages: list[dict[str, JSON]], text: str) -> None:
    """A system prompt joins the leading system message while nothing else came yet (many
    Chat servers read only one system message, first); later, it is a message of its own.
    An empty one adds nothing."""
    if not text:
        return
    if messages and all(m["role"] == "system" for m in messages):
        lead = messages[-1]
        lead["content"] = f"{lead['content']}{SECTIONS_JOINER}{text}"
    else:
        messages.append({"role": "system", "content": text})
