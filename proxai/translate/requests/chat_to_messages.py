"""A Chat Completions request as an Anthropic Messages request (the inverse of notes 3c).

System and developer messages, wherever they are, become the top-level
``system`` (joined in order: Anthropic-compatible servers read no other).
Consecutive ``tool`` messages become ``tool_result`` blocks of one user
message, which the next user message's content joins (Anthropic wants the
roles to alternate). Tool call arguments must be a JSON object, as Anthropic's
``tool_use.input`` is; anything else is refused. Tool ids outside Anthropic's
alphabet (Kimi K2's ``functions.get_weather:0``) are escaped reversibly, the
same way in ``tool_use.id`` and ``tool_result.tool_use_id``.

Anthropic requires ``max_tokens``: without one the request gets
:data:`DEFAULT_MAX_TOKENS` (plus the thinking budget, if any).
``reasoning_effort`` becomes ``thinking`` with a budget per effort
(:data:`EFFORT_BUDGETS`; half of ``max_tokens`` when it would not fit below
it, none when that half is under Anthropic's minimum); ``none`` disables
thinking. Thinking excludes forced tool use on Anthropic, so a forced
``tool_choice`` drops the thinking (listed in ``ctx.dropped``).

``temperature`` and ``top_p`` are dropped and listed: Anthropic's API version
2026-10-21 (what its current SDKs send) refuses any sampling parameter, even
at its default, and its newest models refuse them on every version.
Reasoning text in the history (``reasoning_content``) cannot go back either:
Anthropic wants its own signature on thinking blocks.
"""

from __future__ import annotations

import binascii
import re
from typing import Any

import orjson

from ...config import TranslationOptions
from ...wire.json_body import MAX_WRITTEN_DEPTH, json_depth
from ..ir import CUSTOM_TOOL_PARAMETER, TranslationContext, escape_tool_id
from ._common import (
    SECTIONS_JOINER,
    as_dict,
    as_list,
    custom_tool_description,
    custom_tool_schema,
    drop,
    drop_unhandled,
    each_object,
    object_schema,
    refuse,
    text_of,
)
from ._from_chat import assistant_text, refuse_role, refuse_untranslatable, text_content

__all__ = ["DEFAULT_MAX_TOKENS", "EFFORT_BUDGETS", "chat_to_messages"]

JSON = Any

#: ``max_tokens`` for a Chat request that set no limit (Anthropic requires one).
DEFAULT_MAX_TOKENS = 8192
#: Thinking budget per ``reasoning_effort`` (``none`` disables thinking).
EFFORT_BUDGETS = {
    "minimal": 1024,
    "low": 2048,
    "medium": 8192,
    "high": 16384,
    "xhigh": 32768,
    "max": 32768,
}
#: The smallest thinking budget Anthropic accepts.
MIN_THINKING_BUDGET = 1024

#: How deep a tool call's arguments may nest once they are a ``tool_use.input`` (the body,
#: ``messages``, a message, its ``content`` and the block take five of the levels orjson
#: writes).
_MAX_INPUT_DEPTH = MAX_WRITTEN_DEPTH - 5

_DATA_URL = re.compile(r"data:(?P<media>[\w.+-]+/[\w.+-]+);base64,(?P<data>.*)", re.DOTALL)

#: Fields read below; any other is listed as dropped.
_HANDLED = frozenset(
    {
        "model",
        "messages",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "max_tokens",
        "max_completion_tokens",
        "reasoning_effort",
        "stop",
        "user",
        "safety_identifier",
        "response_format",
        "stream",
        "stream_options",
        "n",
    }
)


def chat_to_messages(
    body: dict[str, JSON], options: TranslationOptions, ctx: TranslationContext
) -> dict[str, JSON]:
    """The Messages request for a Chat Completions request ``body``; fills ``ctx``."""
    refuse_untranslatable(body, "Anthropic Messages")
    out: dict[str, JSON] = {}
    if body.get("model") is not None:
        out["model"] = body["model"]
    history = _History(ctx)
    for path, message in each_object(body.get("messages"), "messages"):
        history.add(message, path)
    if history.system:
        out["system"] = SECTIONS_JOINER.join(history.system)
    out["messages"] = history.messages

    tools = _tools(body.get("tools"), options, ctx)
    choice = _tool_choice(body.get("tool_choice"), tools, ctx) if tools else None
    if tools:
        out["tools"] = tools
        if body.get("parallel_tool_calls") is False and (choice or {}).get("type") != "none":
            choice = {"type": "auto", **(choice or {}), "disable_parallel_tool_use": True}
        if choice is not None:
            out["tool_choice"] = choice
    _limits(body, choice, out, ctx)
    stop = body.get("stop")
    if stop:
        out["stop_sequences"] = [stop] if isinstance(stop, str) else stop
    user = body.get("user") or body.get("safety_identifier")
    if isinstance(user, str):
        out["metadata"] = {"user_id": user}
    _response_format(body.get("response_format"), out, ctx)
    if body.get("stream"):
        out["stream"] = True
    drop_unhandled(ctx, body, _HANDLED, false_is_unset=True)
    return out


class _History:
    """Chat messages as Anthropic messages of content blocks, same roles merged."""

    def __init__(self, ctx: TranslationContext) -> None:
        self.ctx = ctx
        self.system: list[str] = []
        self.messages: list[dict[str, JSON]] = []

    def _append(self, role: str, blocks: list[dict[str, JSON]]) -> None:
        if not blocks:
            return
        if self.messages and self.messages[-1]["role"] == role:
            self.messages[-1]["content"] += blocks
        else:
            self.messages.append({"role": role, "content": blocks})

    def add(self, message: dict[str, JSON], path: str) -> None:
        role = message.get("role")
        content = message.get("content")
        if role in ("system", "developer"):
            text = text_content(content, f"{path}.content")
            if text:
                self.system.append(text)
        elif role == "user":
            self._append("user", _user_blocks(content, f"{path}.content"))
        elif role == "assistant":
            self._append("assistant", self._assistant(message, path))
        elif role == "tool":
            result = {
                "type": "tool_result",
                "tool_use_id": escape_tool_id(
                    text_of(message.get("tool_call_id"), f"{path}.tool_call_id")
                ),
                "content": text_content(content, f"{path}.content"),
            }
            self._append("user", [result])
        else:
            refuse_role(role, path)

    def _assistant(self, message: dict[str, JSON], path: str) -> list[dict[str, JSON]]:
        text = assistant_text(message, path, self.ctx)
        blocks: list[dict[str, JSON]] = [{"type": "text", "text": text}] if text else []
        for here, call in each_object(message.get("tool_calls"), f"{path}.tool_calls"):
            blocks.append(_tool_use(call, here))
        return blocks


def _tool_use(call: dict[str, JSON], path: str) -> dict[str, JSON]:
    call_id = text_of(call.get("id"), f"{path}.id")
    if call.get("type") == "custom":
        custom = as_dict(call.get("custom"), f"{path}.custom")
        name = text_of(custom.get("name"), f"{path}.custom.name")
        value: JSON = {CUSTOM_TOOL_PARAMETER: text_of(custom.get("input"), f"{path}.custom.input")}
    else:
        function = as_dict(call.get("function"), f"{path}.function")
        name = text_of(function.get("name"), f"{path}.function.name")
        arguments = text_of(function.get("arguments"), f"{path}.function.arguments")
        try:
            value = orjson.loads(arguments) if arguments.strip() else {}
        except orjson.JSONDecodeError:
            value = None
        if not isinstance(value, dict):
            refuse(
                f"{path}.function.arguments must be a JSON object to become Anthropic's "
                "`tool_use.input`",
                f"{path}.function.arguments",
            )
        if json_depth(value) > _MAX_INPUT_DEPTH:
            refuse(
                f"{path}.function.arguments nests {json_depth(value)} levels deep: as "
                f"Anthropic's `tool_use.input` it may nest at most {_MAX_INPUT_DEPTH}",
                f"{path}.function.arguments",
            )
    return {"type": "tool_use", "id": escape_tool_id(call_id), "name": name, "input": value}


def _user_blocks(content: JSON, path: str) -> list[dict[str, JSON]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    blocks: list[dict[str, JSON]] = []
    for here, part in each_object(content, path):
        kind = part.get("type")
        if kind == "text":
            text = text_of(part.get("text"), f"{here}.text")
            if text:  # Anthropic refuses empty text blocks
                blocks.append({"type": "text", "text": text})
        elif kind == "image_url":
            image = as_dict(part.get("image_url"), f"{here}.image_url")
            url = text_of(image.get("url"), f"{here}.image_url.url")
            blocks.append({"type": "image", "source": _image_source(url)})
        elif kind == "file":
            blocks.append(_document(as_dict(part.get("file"), f"{here}.file"), f"{here}.file"))
        else:
            refuse(f"{here}: content of type {kind!r} cannot be sent to Anthropic", here)
    return blocks


def _image_source(url: str) -> dict[str, JSON]:
    match = _DATA_URL.fullmatch(url)
    if match:
        return {"type": "base64", "media_type": match["media"], "data": match["data"]}
    return {"type": "url", "url": url}


def _document(file: dict[str, JSON], path: str) -> dict[str, JSON]:
    match = _DATA_URL.fullmatch(text_of(file.get("file_data"), f"{path}.file_data"))
    if match is None:
        refuse(f"{path}: only files sent inline as a base64 data URL can go to Anthropic", path)
    media, data = match["media"], match["data"]
    block: dict[str, JSON]
    if media == "text/plain":
        try:
            text = binascii.a2b_base64(data).decode()
        except (binascii.Error, UnicodeDecodeError):
            refuse(f"{path}.file_data: not base64 UTF-8 text", f"{path}.file_data")
        block = {"type": "document", "source": {"type": "text", "media_type": media, "data": text}}
    else:
        source = {"type": "base64", "media_type": media, "data": data}
        block = {"type": "document", "source": source}
    if file.get("filename"):
        block["title"] = file["filename"]
    return block


def _tools(tools: JSON, options: TranslationOptions, ctx: TranslationContext) -> list[JSON]:
    out: list[JSON] = []
    custom: set[str] = set()
    for path, tool in each_object(tools, "tools"):
        kind = tool.get("type")
        if kind == "function":
            function = as_dict(tool.get("function"), f"{path}.function")
            converted: dict[str, JSON] = {
                "name": text_of(function.get("name"), f"{path}.function.name")
            }
            if function.get("description"):
                converted["description"] = function["description"]
            converted["input_schema"] = object_schema(function.get("parameters"))
            if function.get("strict"):
                drop(ctx, "tools.strict")
            out.append(converted)
        elif kind == "custom":
            definition = as_dict(tool.get("custom"), f"{path}.custom")
            name = text_of(definition.get("name"), f"{path}.custom.name")
            custom.add(name)
            out.append(_custom_tool(name, definition, f"{path}.custom"))
        elif options.strict:
            refuse(f"{path}: tools of type {kind!r} cannot be translated", path)
        else:
            drop(ctx, f"tools.{kind}")
    ctx.custom_tools = ctx.custom_tools | custom
    return out


def _custom_tool(name: str, definition: dict[str, JSON], path: str) -> dict[str, JSON]:
    """A free-form tool as a tool of one string, its grammar told in the description."""
    description = text_of(definition.get("description"), f"{path}.description")
    form = definition.get("format")
    if isinstance(form, dict) and form.get("type") == "grammar":
        grammar = as_dict(form.get("grammar"), f"{path}.format.grammar")
        rules = text_of(grammar.get("definition"), f"{path}.format.grammar.definition")
        syntax = grammar.get("syntax", "grammar")
        description = custom_tool_description(description, syntax, rules)
    tool: dict[str, JSON] = {"name": name}
    if description:
        tool["description"] = description
    tool["input_schema"] = custom_tool_schema()
    return tool


def _tool_choice(
    choice: JSON, tools: list[JSON], ctx: TranslationContext
) -> dict[str, JSON] | None:
    if choice is None:
        return None
    if isinstance(choice, str):
        kinds = {"auto": "auto", "required": "any", "none": "none"}
        if choice not in kinds:
            refuse(f"invalid request: tool_choice: unknown value {choice!r}", "tool_choice")
        return {"type": kinds[choice]}
    choice = as_dict(choice, "tool_choice")
    kind = choice.get("type")
    if kind in ("function", "custom"):
        named = as_dict(choice.get(kind), f"tool_choice.{kind}")
        return {"type": "tool", "name": text_of(named.get("name"), f"tool_choice.{kind}.name")}
    if kind == "allowed_tools":
        # No subset in Anthropic's tool_choice: the tools not allowed are not offered.
        allowed = as_dict(choice.get("allowed_tools"), "tool_choice.allowed_tools")
        names = set()
        for tool in as_list(allowed.get("tools"), "tool_choice.allowed_tools.tools"):
            if isinstance(tool, dict):
                inner = tool.get(tool.get("type") or "function")
                names.add(inner.get("name") if isinstance(inner, dict) else tool.get("name"))
        tools[:] = [tool for tool in tools if tool["name"] in names]
        return {"type": "any" if allowed.get("mode") == "required" else "auto"}
    drop(ctx, "tool_choice")
    return None


def _limits(
    body: dict[str, JSON],
    choice: dict[str, JSON] | None,
    out: dict[str, JSON],
    ctx: TranslationContext,
) -> None:
    """``max_tokens`` and ``thinking``."""
    limit = body.get("max_completion_tokens", body.get("max_tokens"))
    limit = limit if isinstance(limit, int) else None
    effort = body.get("reasoning_effort")
    budget: int | None = None
    if effort == "none":
        out["thinking"] = {"type": "disabled"}
    elif isinstance(effort, str):
        budget = EFFORT_BUDGETS.get(effort)
        if budget is None or (choice or {}).get("type") in ("any", "tool"):
            drop(ctx, "reasoning_effort")
            budget = None
    if limit is None:
        limit = DEFAULT_MAX_TOKENS + (budget or 0)
    elif budget is not None and budget >= limit:
        budget = limit // 2 if limit // 2 >= MIN_THINKING_BUDGET else None  # room for an answer
        if budget is None:
            drop(ctx, "reasoning_effort")
    out["max_tokens"] = limit
    if budget is not None:
        out["thinking"] = {"type": "enabled", "budget_tokens": budget}


def _response_format(form: JSON, out: dict[str, JSON], ctx: TranslationContext) -> None:
    if form is None:
        return
    form = as_dict(form, "response_format")
    kind = form.get("type")
    if kind == "json_schema":
        schema = as_dict(form.get("json_schema"), "response_format.json_schema")
        out["output_config"] = {"format": {"type": "json_schema", "schema": schema.get("schema")}}
    elif kind != "text":
        drop(ctx, "response_format")  # json_object: Anthropic has no schema-less JSON mode
