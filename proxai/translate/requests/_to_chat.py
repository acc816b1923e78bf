"""Writing a Chat Completions request, as both translators to Chat must (from Messages, from
Responses): where system prompts go, and a stream's usage."""

from __future__ import annotations

from typing import Any

from ._common import SECTIONS_JOINER

__all__ = ["add_system", "stream_with_usage"]

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


def stream_with_usage(body: dict[str, JSON], out: dict[str, JSON]) -> None:
    """A streamed request asks for usage: the client's API reports it at the end, and a Chat
    stream brings it only when asked."""
    if body.get("stream"):
        out["stream"] = True
        out["stream_options"] = {"include_usage": True}
