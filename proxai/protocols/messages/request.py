"""A typed projection of a ``POST /v1/messages`` body (everything but ``messages``).

As for the OpenAI routes: unknown fields are ignored, ``messages`` is only
checked to be an array, and a known field of the wrong type is refused with
400 naming its path (in Anthropic's error shape on this route).
"""

from __future__ import annotations

from typing import Any

import attrs

from ...converters import strict_converter
from ...wire.json_body import project_body

__all__ = ["AnthropicTool", "MessagesRequest", "project_messages"]

JSON = Any


@attrs.frozen
class AnthropicTool:
    """A client tool (``input_schema``) or a server tool (a ``type`` such as
    ``web_search_20250305``)."""

    name: str
    type: str | None = None
    description: str | None = None
    input_schema: dict[str, JSON] | None = None


@attrs.frozen
class MessagesRequest:
    model: str | None = None
    max_tokens: int | None = None
    stream: bool | None = None
    system: JSON = None  # a string or an array of text blocks
    tools: list[AnthropicTool] | None = None
    tool_choice: dict[str, JSON] | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    stop_sequences: list[str] | None = None
    metadata: dict[str, JSON] | None = None
    thinking: dict[str, JSON] | None = None
    service_tier: str | None = None

    def tool_names(self) -> list[str]:
        return [tool.name for tool in self.tools or ()]


_converter = strict_converter(forbid_extra_keys=False)


def project_messages(data: dict[str, Any]) -> MessagesRequest:
    """Project a parsed body, or raise :class:`ProxyError` (400) naming the bad path."""
    return project_body(_converter, data, MessagesRequest, array="messages")
