"""A Chat Completions request as a Responses request (the inverse of notes 3a).

Leading system and developer messages become ``instructions``, the rest of
the conversation ``input`` items: assistant ``tool_calls`` one
``function_call`` (or ``custom_tool_call``) item each, ``tool`` messages their
outputs. Two defaults differ between the APIs and are set explicitly: function
tools are strict by default in Responses (``strict: false`` unless the client
said otherwise) and responses are stored by default (``store: false`` unless
the client asked to store). Chat-only sampling controls with no Responses
counterpart (``stop``, ``seed``, penalties, ``logprobs``...) are dropped and
listed; ``n`` above 1 and the legacy ``functions`` are refused.
"""

from __future__ import annotations

from typing import Any

from ...config import TranslationOptions
from ..ir import TranslationContext
from ._common import (
    SECTIONS_JOINER,
    as_dict,
    as_list,
    drop,
    drop_unhandled,
    each_object,
    refuse,
    text_of,
)
from ._from_chat import assistant_text, refuse_role, refuse_untranslatable, text_content

__all__ = ["MIN_OUTPUT_TOKENS", "chat_to_responses"]

JSON = Any

#: The smallest ``max_output_tokens`` Responses accepts; smaller Chat limits are raised to it.
MIN_OUTPUT_TOKENS = 16

#: Chat fields forwarded under the same name.
_SAME = (
    "model",
    "temperature",
    "top_p",
    "parallel_tool_calls",
    "user",
    "safety_identifier",
    "prompt_cache_key",
    "prompt_cache_retention",
    "service_tier",
    "metadata",
)
#: Fields read below; any other is listed as dropped.
_HANDLED = frozenset(
    {
        *_SAME,
        "messages",
        "tools",
        "tool_choice",
        "max_tokens",
        "max_completion_tokens",
        "response_format",
        "verbosity",
        "reasoning_effort",
        "stream",
        "stream_options",
        "store",
        "n",
        "web_search_options",
    }
)


def chat_to_responses(
    body: dict[str, JSON], options: TranslationOptions, ctx: TranslationContext
) -> dict[str, JSON]:
    """The Responses request for a Chat Completions request ``body``; fills ``ctx``."""
    refuse_untranslatable(body, "Responses")
    out: dict[str, JSON] = {key: body[key] for key in _SAME if body.get(key) is not None}
    instructions, items = _Input(ctx).build(body.get("messages"))
    if instructions:
        out["instructions"] = instructions
    out["input"] = items

    tools = _tools(body.get("tools"), options, ctx)
    if isinstance(body.get("web_search_options"), dict):
        tools.append(_web_search(body["web_search_options"]))
    if tools:
        out["tools"] = tools
        if body.get("tool_choice") is not None:
            out["tool_choice"] = _tool_choice(body["tool_choice"], ctx)
    else:
        out.pop("parallel_tool_calls", None)
    limit = body.get("max_completion_tokens", body.get("max_tokens"))
    if isinstance(limit, int):
        out["max_output_tokens"] = max(limit, MIN_OUTPUT_TOKENS)
    text = _text(body.get("response_format"), ctx)
    if body.get("verbosity") is not None:
        text["verbosity"] = body["verbosity"]
    if text:
        out["text"] = text
    if body.get("reasoning_effort") is not None:
        out["reasoning"] = {"effort": body["reasoning_effort"]}
    out["store"] = bool(body.get("store", False))
    stream_options = body.get("stream_options")
    if body.get("stream"):
        out["stream"] = True
        obfuscation = (
            stream_options.get("include_obfuscation") if isinstance(stream_options, dict) else None
        )
        if obfuscation is not None:
            out["stream_options"] = {"include_obfuscation": obfuscation}
    drop_unhandled(ctx, body, _HANDLED, false_is_unset=True)
    return out


class _Input:
    """Chat messages as ``instructions`` and Responses input items."""

    def __init__(self, ctx: TranslationContext) -> None:
        self.ctx = ctx
        self.instructions: list[str] = []
        self.items: list[dict[str, JSON]] = []
        self._custom_calls: set[str] = set()  # call ids whose outputs are custom outputs

    def build(self, messages: JSON) -> tuple[str, list[dict[str, JSON]]]:
        for path, message in each_object(messages, "messages"):
            self._message(message, path)
        return SECTIONS_JOINER.join(self.instructions), self.items

    def _message(self, message: dict[str, JSON], path: str) -> None:
        role = message.get("role")
        content = message.get("content")
        if role in ("system", "developer"):
            text = text_content(content, f"{path}.content")
            if not self.items:
                self.instructions.append(text)
            else:
                self.items.append({"type": "message", "role": role, "content": text})
        elif role == "user":
            parts = _input_parts(content, f"{path}.content")
            self.items.append({"type": "message", "role": "user", "content": parts})
        elif role == "assistant":
            self._assistant(message, path)
        elif role == "tool":
            call_id = text_of(message.get("tool_call_id"), f"{path}.tool_call_id")
            kind = "custom_tool_call_output" if call_id in self._custom_calls else None
            output = text_content(content, f"{path}.content")
            item = {"type": kind or "function_call_output", "call_id": call_id, "output": output}
            self.items.append(item)
        else:
            refuse_role(role, path)

    def _assistant(self, message: dict[str, JSON], path: str) -> None:
        text = assistant_text(message, path, self.ctx)
        if text:
            self.items.append({"type": "message", "role": "assistant", "content": text})
        for here, call in each_object(message.get("tool_calls"), f"{path}.tool_calls"):
            self.items.append(self._call(call, here))

    def _call(self, call: dict[str, JSON], path: str) -> dict[str, JSON]:
        call_id = text_of(call.get("id"), f"{path}.id")
        if call.get("type") == "custom":
            custom = as_dict(call.get("custom"), f"{path}.custom")
            self._custom_calls.add(call_id)
            return {
                "type": "custom_tool_call",
                "call_id": call_id,
                "name": text_of(custom.get("name"), f"{path}.custom.name"),
                "input": text_of(custom.get("input"), f"{path}.custom.input"),
            }
        function = as_dict(call.get("function"), f"{path}.function")
        return {
            "type": "function_call",
            "call_id": call_id,
            "name": text_of(function.get("name"), f"{path}.function.name"),
            "arguments": text_of(function.get("arguments"), f"{path}.function.arguments"),
        }


def _input_parts(content: JSON, path: str) -> list[dict[str, JSON]]:
    if isinstance(content, str):
        return [{"type": "input_text", "text": content}]
    parts: list[dict[str, JSON]] = []
    for here, part in each_object(content, path):
        kind = part.get("type")
        if kind == "text":
            parts.append({"type": "input_text", "text": text_of(part.get("text"), f"{here}.text")})
        elif kind == "image_url":
            image = as_dict(part.get("image_url"), f"{here}.image_url")
            url = text_of(image.get("url"), f"{here}.image_url.url")
            detail = image.get("detail") or "auto"
            parts.append({"type": "input_image", "image_url": url, "detail": detail})
        elif kind == "input_audio":
            audio = as_dict(part.get("input_audio"), f"{here}.input_audio")
            parts.append({"type": "input_audio", "input_audio": audio})
        elif kind == "file":
            file = as_dict(part.get("file"), f"{here}.file")
            keys = ("file_data", "file_id", "filename")
            parts.append({"type": "input_file", **{k: file[k] for k in keys if file.get(k)}})
        else:
            refuse(f"{here}: content of type {kind!r} cannot be translated", here)
    return parts


def _tools(tools: JSON, options: TranslationOptions, ctx: TranslationContext) -> list[JSON]:
    out: list[JSON] = []
    for path, tool in each_object(tools, "tools"):
        kind = tool.get("type")
        if kind == "function":
            function = as_dict(tool.get("function"), f"{path}.function")
            out.append(
                {
                    "type": "function",
                    "name": text_of(function.get("name"), f"{path}.function.name"),
                    "description": function.get("description"),
                    "parameters": function.get("parameters")
                    or {"type": "object", "properties": {}},
                    "strict": bool(function.get("strict", False)),
                }
            )
            if out[-1]["description"] is None:
                del out[-1]["description"]
        elif kind == "custom":
            custom = as_dict(tool.get("custom"), f"{path}.custom")
            keys = ("name", "description", "format")
            out.append({"type": "custom", **{k: custom[k] for k in keys if custom.get(k)}})
        elif options.strict:
            refuse(f"{path}: tools of type {kind!r} cannot be translated", path)
        else:
            drop(ctx, f"tools.{kind}")
    return out


def _web_search(options: dict[str, JSON]) -> dict[str, JSON]:
    """Chat's ``web_search_options`` as the Responses ``web_search`` tool."""
    tool: dict[str, JSON] = {"type": "web_search"}
    if options.get("search_context_size") is not None:
        tool["search_context_size"] = options["search_context_size"]
    location = options.get("user_location")
    if isinstance(location, dict) and isinstance(location.get("approximate"), dict):
        tool["user_location"] = {"type": "approximate", **location["approximate"]}
    return tool


def _tool_choice(choice: JSON, ctx: TranslationContext) -> JSON:
    if isinstance(choice, str):
        return choice
    choice = as_dict(choice, "tool_choice")
    kind = choice.get("type")
    if kind in ("function", "custom"):
        named = as_dict(choice.get(kind), f"tool_choice.{kind}")
        return {"type": kind, "name": named.get("name")}
    if kind == "allowed_tools":
        allowed = as_dict(choice.get("allowed_tools"), "tool_choice.allowed_tools")
        tools = []
        for tool in as_list(allowed.get("tools"), "tool_choice.allowed_tools.tools"):
            tool = as_dict(tool, "tool_choice.allowed_tools.tools")
            kind = tool.get("type")
            inner = tool.get(kind) if isinstance(kind, str) else None
            name = inner.get("name") if isinstance(inner, dict) else tool.get("name")
            tools.append({"type": kind, "name": name})
        return {"type": "allowed_tools", "mode": allowed.get("mode", "auto"), "tools": tools}
    drop(ctx, "tool_choice")
    return "auto"


def _text(response_format: JSON, ctx: TranslationContext) -> dict[str, JSON]:
    if response_format is None:
        return {}
    form = as_dict(response_format, "response_format")
    kind = form.get("type")
    if kind == "json_object":
        return {"format": {"type": "json_object"}}
    if kind == "json_schema":
        schema = as_dict(form.get("json_schema"), "response_format.json_schema")
        keys = ("name", "schema", "strict", "description")
        return {"format": {"type": "json_schema", **{k: schema[k] for k in keys if k in schema}}}
    if kind != "text":
        drop(ctx, "response_format")
    return {}
