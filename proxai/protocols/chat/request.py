"""A typed projection of a ``POST /v1/chat/completions`` body.

Like the Responses projection: every documented field but ``messages`` (which
can be huge and is forwarded as sent; it is only checked to be an array), unknown
fields ignored, unknown tool types kept raw, and a known field of the wrong type
refused with 400 naming its path (``tools[0].function.name``).
"""

from __future__ import annotations

from typing import Any

import attrs

from ...converters import strict_converter
from ...wire.json_body import project_body, structure_str_or_object

__all__ = [
    "ChatCustomTool",
    "ChatFunctionTool",
    "ChatRawTool",
    "ChatRequest",
    "ChatTool",
    "FunctionDefinition",
    "StreamOptions",
    "project_chat",
]

JSON = Any


@attrs.frozen
class FunctionDefinition:
    name: str
    description: str | None = None
    parameters: dict[str, JSON] | None = None
    strict: bool | None = None


@attrs.frozen
class ChatFunctionTool:
    function: FunctionDefinition
    type: str = "function"


@attrs.frozen
class CustomDefinition:
    name: str
    description: str | None = None
    format: dict[str, JSON] | None = None


@attrs.frozen
class ChatCustomTool:
    custom: CustomDefinition
    type: str = "custom"


@attrs.frozen
class ChatRawTool:
    """A tool type proxai does not know: kept as sent."""

    type: str
    data: dict[str, JSON]


ChatTool = ChatFunctionTool | ChatCustomTool | ChatRawTool


@attrs.frozen
class StreamOptions:
    include_usage: bool | None = None
    include_obfuscation: bool | None = None


@attrs.frozen
class ChatRequest:
    """Everything in a Chat Completions request but ``messages``."""

    model: str | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    tools: list[ChatTool] | None = None
    tool_choice: str | dict[str, JSON] | None = None
    parallel_tool_calls: bool | None = None
    functions: list[dict[str, JSON]] | None = None  # legacy
    function_call: str | dict[str, JSON] | None = None  # legacy
    n: int | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    stop: str | list[str] | None = None
    seed: int | None = None
    user: str | None = None
    response_format: dict[str, JSON] | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    metadata: dict[str, str] | None = None
    store: bool | None = None
    reasoning_effort: str | None = None
    service_tier: str | None = None
    modalities: list[str] | None = None
    audio: dict[str, JSON] | None = None
    prediction: dict[str, JSON] | None = None
    web_search_options: dict[str, JSON] | None = None
    verbosity: str | None = None
    prompt_cache_key: str | None = None
    safety_identifier: str | None = None

    def tool_names(self) -> list[str]:
        names: list[str] = []
        for tool in self.tools or ():
            if isinstance(tool, ChatFunctionTool):
                names.append(tool.function.name)
            elif isinstance(tool, ChatCustomTool):
                names.append(tool.custom.name)
            else:
                names.append(tool.type)
        return names


_converter = strict_converter(forbid_extra_keys=False)


def _structure_tool(value: Any, _: Any) -> ChatTool:
    if not isinstance(value, dict):
        raise TypeError("expected a tool object")
    kind = value.get("type")
    if not isinstance(kind, str):
        raise TypeError("a tool needs a string 'type'")
    if kind == "function":
        tool: ChatTool = _converter.structure(value, ChatFunctionTool)
    elif kind == "custom":
        tool = _converter.structure(value, ChatCustomTool)
    else:
        tool = ChatRawTool(kind, value)
    return tool


def _str_or_strings(value: Any, _: Any) -> str | list[str] | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value
    raise TypeError("expected a string or an array of strings")


_converter.register_structure_hook(ChatTool, _structure_tool)
_converter.register_structure_hook(str | dict[str, JSON] | None, structure_str_or_object)
_converter.register_structure_hook(str | list[str] | None, _str_or_strings)


def project_chat(data: dict[str, Any]) -> ChatRequest:
    """Project a parsed body, or raise :class:`ProxyError` (400) naming the bad path."""
    return project_body(_converter, data, ChatRequest, array="messages")
