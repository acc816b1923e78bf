"""A typed projection of a ``POST /v1/responses`` body.

The projection keeps every documented field except ``input``, which can be
huge and which proxai never needs: the body is forwarded as the bytes the
client sent, and this model exists to check the request's shape before any
upstream call and to tell the observer what was asked for (model, tools).

Unknown fields are ignored (the API grows faster than proxai), and so are
unknown tool types, which are kept as :class:`RawTool`. A known field of the
wrong type fails with the path of the offending value (``tools[1].name``),
which becomes the ``param`` of the 400 answer. Blank strings where an id is
expected (``previous_response_id``, ``conversation``, ``prompt.id``) become
``None``: some clients send ``""`` for "none".
"""

from __future__ import annotations

from typing import Any

import attrs

from ...converters import strict_converter
from ...wire.json_body import project_body, structure_str_or_object

__all__ = [
    "ApplyPatchTool",
    "CodeInterpreterTool",
    "ComputerUsePreviewTool",
    "ConversationRef",
    "CustomTool",
    "FileSearchTool",
    "FunctionTool",
    "ImageGenerationTool",
    "LocalShellTool",
    "McpTool",
    "NamespaceTool",
    "PromptRef",
    "RawTool",
    "Reasoning",
    "ResponsesRequest",
    "ShellTool",
    "StreamOptions",
    "TextConfig",
    "Tool",
    "ToolSearchTool",
    "WebSearchFilters",
    "WebSearchTool",
    "project_responses",
]

JSON = Any


def _blank_to_none(value: str | None) -> str | None:
    return None if value is not None and not value.strip() else value


# --- tools ------------------------------------------------------------------------------


@attrs.frozen
class FunctionTool:
    name: str
    parameters: dict[str, JSON] | None = None
    strict: bool | None = None
    description: str | None = None
    defer_loading: bool | None = None
    type: str = "function"


@attrs.frozen
class CustomTool:
    name: str
    description: str | None = None
    format: dict[str, JSON] | None = None
    type: str = "custom"


@attrs.frozen
class WebSearchFilters:
    allowed_domains: list[str] | None = None


@attrs.frozen
class WebSearchTool:
    """``web_search`` and its dated and preview variants (``type`` tells which)."""

    type: str = "web_search"
    filters: WebSearchFilters | None = None
    search_context_size: str | None = None
    user_location: dict[str, JSON] | None = None


@attrs.frozen
class FileSearchTool:
    vector_store_ids: list[str]
    filters: dict[str, JSON] | None = None
    max_num_results: int | None = None
    ranking_options: dict[str, JSON] | None = None
    type: str = "file_search"


@attrs.frozen
class McpTool:
    server_label: str
    server_url: str | None = None
    connector_id: str | None = None
    server_description: str | None = None
    headers: dict[str, str] | None = attrs.field(default=None, repr=False)
    authorization: str | None = attrs.field(default=None, repr=False)
    allowed_tools: JSON = None
    require_approval: JSON = None
    type: str = "mcp"


@attrs.frozen
class CodeInterpreterTool:
    container: JSON = None  # a container id, or {"type": "auto", ...}
    type: str = "code_interpreter"


@attrs.frozen
class ImageGenerationTool:
    model: str | None = None
    quality: str | None = None
    size: str | None = None
    output_format: str | None = None
    partial_images: int | None = None
    background: str | None = None
    type: str = "image_generation"


@attrs.frozen
class ComputerUsePreviewTool:
    display_width: int | None = None
    display_height: int | None = None
    environment: str | None = None
    type: str = "computer_use_preview"


@attrs.frozen
class LocalShellTool:
    type: str = "local_shell"


@attrs.frozen
class ShellTool:
    environment: dict[str, JSON] | None = None
    type: str = "shell"


@attrs.frozen
class ApplyPatchTool:
    type: str = "apply_patch"


@attrs.frozen
class NamespaceTool:
    name: str
    description: str | None = None
    tools: list[Tool] | None = None
    type: str = "namespace"


@attrs.frozen
class ToolSearchTool:
    execution: str | None = None
    type: str = "tool_search"


@attrs.frozen
class RawTool:
    """A tool type proxai does not know: kept as sent."""

    type: str
    data: dict[str, JSON]


Tool = (
    FunctionTool
    | CustomTool
    | WebSearchTool
    | FileSearchTool
    | McpTool
    | CodeInterpreterTool
    | ImageGenerationTool
    | ComputerUsePreviewTool
    | LocalShellTool
    | ShellTool
    | ApplyPatchTool
    | NamespaceTool
    | ToolSearchTool
    | RawTool
)

TOOL_CLASSES: dict[str, type[Any]] = {
    "function": FunctionTool,
    "custom": CustomTool,
    "web_search": WebSearchTool,
    "web_search_2025_08_26": WebSearchTool,
    "web_search_preview": WebSearchTool,
    "web_search_preview_2025_03_11": WebSearchTool,
    "file_search": FileSearchTool,
    "mcp": McpTool,
    "code_interpreter": CodeInterpreterTool,
    "image_generation": ImageGenerationTool,
    "computer_use_preview": ComputerUsePreviewTool,
    "computer": ComputerUsePreviewTool,
    "local_shell": LocalShellTool,
    "shell": ShellTool,
    "apply_patch": ApplyPatchTool,
    "namespace": NamespaceTool,
    "tool_search": ToolSearchTool,
}


# --- the rest of the body ---------------------------------------------------------------


@attrs.frozen
class StreamOptions:
    include_obfuscation: bool | None = None


@attrs.frozen
class ConversationRef:
    id: str | None = attrs.field(default=None, converter=_blank_to_none)


@attrs.frozen
class PromptRef:
    id: str | None = attrs.field(default=None, converter=_blank_to_none)
    version: str | None = None
    variables: dict[str, JSON] | None = None


@attrs.frozen
class Reasoning:
    effort: str | None = None
    summary: str | None = None
    generate_summary: str | None = None


@attrs.frozen
class TextConfig:
    format: dict[str, JSON] | None = None
    verbosity: str | None = None


@attrs.frozen
class ResponsesRequest:
    """Everything in a Responses request but ``input``."""

    model: str | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    instructions: str | None = None
    tools: list[Tool] | None = None
    tool_choice: str | dict[str, JSON] | None = None
    parallel_tool_calls: bool | None = None
    previous_response_id: str | None = attrs.field(default=None, converter=_blank_to_none)
    conversation: str | ConversationRef | None = None
    store: bool | None = None
    background: bool | None = None
    include: list[str] | None = None
    max_output_tokens: int | None = None
    max_tool_calls: int | None = None
    metadata: dict[str, str] | None = None
    prompt: PromptRef | None = None
    prompt_cache_key: str | None = None
    reasoning: Reasoning | None = None
    safety_identifier: str | None = None
    service_tier: str | None = None
    temperature: float | None = None
    text: TextConfig | None = None
    top_logprobs: int | None = None
    top_p: float | None = None
    truncation: str | None = None
    user: str | None = None

    def tool_names(self) -> list[str]:
        """Names of the declared tools (hosted tools by their type)."""
        names: list[str] = []
        for tool in self.tools or ():
            names.append(getattr(tool, "name", None) or tool.type)
        return names


# --- structuring ------------------------------------------------------------------------

_converter = strict_converter(forbid_extra_keys=False)


def _structure_tool(value: Any, _: Any) -> Tool:
    if not isinstance(value, dict):
        raise TypeError(f"expected a tool object, got {type(value).__name__}")
    kind = value.get("type")
    if not isinstance(kind, str):
        raise TypeError("a tool needs a string 'type'")
    cls = TOOL_CLASSES.get(kind)
    if cls is None:
        return RawTool(kind, value)
    tool: Tool = _converter.structure(value, cls)
    return tool


def _structure_conversation(value: Any, _: Any) -> str | ConversationRef | None:
    if value is None:
        return None
    if isinstance(value, str):
        return _blank_to_none(value)
    if isinstance(value, dict):
        return _converter.structure(value, ConversationRef)
    raise TypeError("expected a conversation id or an object with an id")


_converter.register_structure_hook(Tool, _structure_tool)
_converter.register_structure_hook(str | dict[str, JSON] | None, structure_str_or_object)
_converter.register_structure_hook(str | ConversationRef | None, _structure_conversation)


def project_responses(data: dict[str, Any]) -> ResponsesRequest:
    """Project a parsed body, or raise :class:`ProxyError` (400) naming the bad path."""
    return project_body(_converter, data, ResponsesRequest)
