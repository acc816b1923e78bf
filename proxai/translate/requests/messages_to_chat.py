"""An Anthropic Messages request as a Chat Completions request (translation notes 3c).

Built to take what Claude Code sends (``POST /v1/messages?beta=true``):
``role: "system"`` entries inside ``messages``, ``thinking: {type: "adaptive"}``,
``output_config``, ``context_management``, ``cache_control`` on blocks, tools
with ``defer_loading``. Anthropic-only fields are dropped and listed in
``ctx.dropped``, never refused: a Claude Code session must not fail on a field
a Chat upstream has no use for. ``cache_control`` is dropped without a note
(it only tells Anthropic where to cache).

Tool ids go back as the upstream issued them: the ids proxai escaped for
Anthropic's alphabet (:func:`~proxai.translate.ir.escape_tool_id`) are unescaped.

Thinking in the history is never refused either: its text goes back as
``reasoning_content`` (DeepSeek-style upstreams want it) when proxai wrote it
(its signature is proxai's envelope, or empty), and a real Anthropic thinking
block, which only Anthropic can read, is dropped.
"""

from __future__ import annotations

from typing import Any

from ...config import TranslationOptions
from ..ir import REASONING_ENVELOPE_PREFIX, TranslationContext, unescape_tool_id
from ._common import (
    PARTS_JOINER,
    SECTIONS_JOINER,
    as_dict,
    as_list,
    drop,
    drop_unhandled,
    dumps,
    each_object,
    object_schema,
    refuse,
    shorten_tool_name,
    text_of,
)
from ._to_chat import SystemPrompts, stream_with_usage

__all__ = ["effort_of_budget", "messages_to_chat"]

JSON = Any

#: Fields read below, or dropped without a note; any other is listed as dropped.
_HANDLED = frozenset(
    {
        "model",
        "messages",
        "system",
        "max_tokens",
        "tools",
        "tool_choice",
        "stop_sequences",
        "temperature",
        "top_p",
        "metadata",
        "thinking",
        "output_config",
        "stream",
        "cache_control",  # where Anthropic should cache: meaningless elsewhere
    }
)

#: Reasoning effort for a thinking budget: up to each bound, that effort.
_BUDGET_EFFORTS = ((2048, "low"), (8192, "medium"))
_TOP_EFFORT = "high"


def effort_of_budget(budget_tokens: int) -> str:
    """The Chat ``reasoning_effort`` bucket of an Anthropic thinking budget:
    up to 2048 tokens ``low``, up to 8192 ``medium``, above that ``high``."""
    for bound, effort in _BUDGET_EFFORTS:
        if budget_tokens <= bound:
            return effort
    return _TOP_EFFORT


def messages_to_chat(
    body: dict[str, JSON], options: TranslationOptions, ctx: TranslationContext
) -> dict[str, JSON]:
    """The Chat Completions request for a Messages request ``body``; fills ``ctx``."""
    out: dict[str, JSON] = {}
    if body.get("model") is not None:
        out["model"] = body["model"]
    tools = _tools(body.get("tools"), options, ctx)
    history = _History(ctx)
    history.system.add(_system_text(body.get("system"), "system"))
    for path, message in each_object(body.get("messages"), "messages"):
        history.add(message, path)
    out["messages"] = history.finish()
    if tools:
        out["tools"] = tools
        _tool_choice(body.get("tool_choice"), out, ctx)
    elif body.get("tool_choice") is not None:
        drop(ctx, "tool_choice")
    if body.get("max_tokens") is not None:
        out[options.max_tokens_field.value] = body["max_tokens"]
    if body.get("stop_sequences"):
        out["stop"] = body["stop_sequences"]
    for key in ("temperature", "top_p"):
        if body.get(key) is not None:
            out[key] = body[key]
    _metadata(body.get("metadata"), out, ctx)
    _reasoning(body.get("thinking"), body.get("output_config"), out, ctx)
    stream_with_usage(body, out)
    drop_unhandled(ctx, body, _HANDLED)
    return out


class _History:
    """Anthropic messages, as Chat messages.

    A user message's ``tool_result`` blocks become ``tool`` messages placed
    first (they must directly follow the assistant's ``tool_calls``), then the
    rest of the message, with any images the tools returned (Chat tool messages
    carry text only).
    """

    def __init__(self, ctx: TranslationContext) -> None:
        self.ctx = ctx
        self.messages: list[dict[str, JSON]] = []
        self.system = SystemPrompts(self.messages)

    def finish(self) -> list[dict[str, JSON]]:
        self.system.finish()
        return self.messages

    def add(self, message: dict[str, JSON], path: str) -> None:
        role = message.get("role")
        content = message.get("content")
        if role == "system":
            self.system.add(_system_text(content, f"{path}.content"))
        elif role == "user":
            self._user(content, f"{path}.content")
        elif role == "assistant":
            self._assistant(content, f"{path}.content")
        else:
            refuse(f"invalid request: {path}.role: unknown role {role!r}", f"{path}.role")

    def _user(self, content: JSON, path: str) -> None:
        if isinstance(content, str):
            self.messages.append({"role": "user", "content": content})
            return
        parts: list[dict[str, JSON]] = []
        tool_images: list[dict[str, JSON]] = []
        for here, block in each_object(content, path):
            if block.get("type") == "tool_result":
                self.messages.append(self._tool_result(block, here, tool_images))
            else:
                parts += _user_parts(block, here, self.ctx)
        parts = tool_images + parts
        if not parts:
            return
        if all(part["type"] == "text" for part in parts):
            text = PARTS_JOINER.join(part["text"] for part in parts)
            self.messages.append({"role": "user", "content": text})
        else:
            self.messages.append({"role": "user", "content": parts})

    def _tool_result(
        self, block: dict[str, JSON], path: str, images: list[dict[str, JSON]]
    ) -> dict[str, JSON]:
        content = block.get("content")
        if isinstance(content, str) or content is None:
            text = text_of(content, f"{path}.content")
        else:
            texts = []
            found = 0
            for here, inner in each_object(content, f"{path}.content"):
                for part in _user_parts(inner, here, self.ctx):
                    if part["type"] == "text":
                        texts.append(part["text"])
                    else:
                        images.append(part)
                        found += 1
            if found:
                texts.append(f"[{found} image(s) attached in the next user message]")
            text = PARTS_JOINER.join(texts)
        if block.get("is_error"):
            text = f"Error: {text}"
        tool_call_id = unescape_tool_id(text_of(block.get("tool_use_id"), f"{path}.tool_use_id"))
        return {"role": "tool", "tool_call_id": tool_call_id, "content": text}

    def _assistant(self, content: JSON, path: str) -> None:
        if isinstance(content, str):
            self.messages.append({"role": "assistant", "content": content})
            return
        texts: list[str] = []
        reasoning: list[str] = []
        calls: list[dict[str, JSON]] = []
        for here, block in each_object(content, path):
            kind = block.get("type")
            if kind == "text":
                texts.append(text_of(block.get("text"), f"{here}.text"))
            elif kind == "tool_use":
                name = shorten_tool_name(text_of(block.get("name"), f"{here}.name"), self.ctx)
                arguments = dumps(block.get("input") or {})
                function = {"name": name, "arguments": arguments}
                call_id = unescape_tool_id(text_of(block.get("id"), f"{here}.id"))
                calls.append({"id": call_id, "type": "function", "function": function})
            elif kind == "thinking":
                signature = block.get("signature")
                if not signature or str(signature).startswith(REASONING_ENVELOPE_PREFIX):
                    reasoning.append(text_of(block.get("thinking"), f"{here}.thinking"))
                else:
                    drop(self.ctx, "messages.thinking")
            else:
                # redacted_thinking, server tools' blocks (server_tool_use, ..._tool_result)
                drop(self.ctx, f"messages.{kind}")
        if not (texts or calls or reasoning):
            return
        text = PARTS_JOINER.join(texts)
        message: dict[str, JSON] = {"role": "assistant", "content": text or None}
        if calls:
            message["tool_calls"] = calls
        if reasoning:
            message["reasoning_content"] = "".join(reasoning)
            if message["content"] is None and not calls:
                message["content"] = ""
        self.messages.append(message)


def _system_text(system: JSON, path: str) -> str:
    """A system prompt, string or text blocks, as one string (blocks' cache_control dropped)."""
    if system is None or isinstance(system, str):
        return text_of(system, path)
    texts = [
        text_of(block.get("text"), f"{here}.text") for here, block in each_object(system, path)
    ]
    return SECTIONS_JOINER.join(text for text in texts if text)


def _user_parts(
    block: dict[str, JSON], path: str, ctx: TranslationContext
) -> list[dict[str, JSON]]:
    """Chat content parts for one user (or tool result) block."""
    kind = block.get("type")
    if kind == "text":
        return [{"type": "text", "text": text_of(block.get("text"), f"{path}.text")}]
    if kind == "image":
        return [{"type": "image_url", "image_url": {"url": _image_url(block, path)}}]
    if kind == "document":
        return _document(block, path)
    # thinking in a user turn, search results, server tools' blocks: nothing Chat reads
    drop(ctx, f"messages.{kind}")
    return []


def _image_url(block: dict[str, JSON], path: str) -> str:
    source = as_dict(block.get("source"), f"{path}.source")
    if source.get("type") == "base64":
        media = text_of(source.get("media_type"), f"{path}.source.media_type")
        data = text_of(source.get("data"), f"{path}.source.data")
        return f"data:{media};base64,{data}"
    if source.get("type") == "url":
        return text_of(source.get("url"), f"{path}.source.url")
    refuse(f"{path}.source: only base64 and url images can be sent to this upstream", path)


def _document(block: dict[str, JSON], path: str) -> list[dict[str, JSON]]:
    source = as_dict(block.get("source"), f"{path}.source")
    kind = source.get("type")
    if kind == "base64":
        media = text_of(source.get("media_type"), f"{path}.source.media_type")
        data = text_of(source.get("data"), f"{path}.source.data")
        name = text_of(block.get("title"), f"{path}.title") or "document.pdf"
        file = {"file_data": f"data:{media};base64,{data}", "filename": name}
        return [{"type": "file", "file": file}]
    if kind == "text":
        return [{"type": "text", "text": text_of(source.get("data"), f"{path}.source.data")}]
    if kind == "content":
        inner = source.get("content")
        if isinstance(inner, str):
            return [{"type": "text", "text": inner}]
        texts = [b.get("text", "") for b in as_list(inner, f"{path}.source.content")]
        return [{"type": "text", "text": PARTS_JOINER.join(t for t in texts if t)}]
    refuse(f"{path}.source: documents of source {kind!r} cannot be sent to this upstream", path)


#: A tool's fields a function has room for (``cache_control`` dropped without a note).
_TOOL_FIELDS = frozenset({"type", "name", "description", "input_schema", "cache_control"})


def _tools(tools: JSON, options: TranslationOptions, ctx: TranslationContext) -> list[JSON]:
    out: list[JSON] = []
    for path, tool in each_object(tools, "tools"):
        kind = tool.get("type")
        if kind not in (None, "custom"):  # a server tool: web_search_20250305, bash_...
            if options.strict:
                refuse(f"{path}: the upstream cannot run the server tool {kind!r}", path)
            drop(ctx, f"tools.{kind}")
            continue
        name = shorten_tool_name(text_of(tool.get("name"), f"{path}.name"), ctx)
        function: dict[str, JSON] = {"name": name}
        if tool.get("description"):
            function["description"] = tool["description"]
        function["parameters"] = object_schema(tool.get("input_schema"))
        out.append({"type": "function", "function": function})
        for key, value in tool.items():
            if key not in _TOOL_FIELDS and value is not None:
                drop(ctx, f"tools.{key}")
    return out


def _tool_choice(choice: JSON, out: dict[str, JSON], ctx: TranslationContext) -> None:
    if choice is None:
        return
    choice = as_dict(choice, "tool_choice")
    kind = choice.get("type")
    if kind == "auto":
        out["tool_choice"] = "auto"
    elif kind == "any":
        out["tool_choice"] = "required"
    elif kind == "none":
        out["tool_choice"] = "none"
    elif kind == "tool":
        name = shorten_tool_name(text_of(choice.get("name"), "tool_choice.name"), ctx)
        out["tool_choice"] = {"type": "function", "function": {"name": name}}
    else:
        drop(ctx, "tool_choice")
    if choice.get("disable_parallel_tool_use"):
        out["parallel_tool_calls"] = False


def _metadata(metadata: JSON, out: dict[str, JSON], ctx: TranslationContext) -> None:
    if metadata is None:
        return
    for key, value in as_dict(metadata, "metadata").items():
        if key == "user_id" and isinstance(value, str) and value:
            out["user"] = value
        elif value is not None:
            drop(ctx, f"metadata.{key}")


def _reasoning(
    thinking: JSON, output_config: JSON, out: dict[str, JSON], ctx: TranslationContext
) -> None:
    """``reasoning_effort`` from ``thinking`` and ``output_config.effort``: a budget becomes
    its bucket, an explicit effort wins, ``disabled`` sends none."""
    thinking = as_dict(thinking, "thinking") if thinking is not None else {}
    config = as_dict(output_config, "output_config") if output_config is not None else {}
    effort = config.get("effort")
    kind = thinking.get("type")
    if kind == "disabled":
        if effort is not None:
            drop(ctx, "output_config.effort")
    elif isinstance(effort, str):
        out["reasoning_effort"] = effort
    elif kind == "enabled" and isinstance(thinking.get("budget_tokens"), int):
        out["reasoning_effort"] = effort_of_budget(thinking["budget_tokens"])
    if kind not in (None, "enabled", "disabled", "adaptive"):
        drop(ctx, "thinking")
    if thinking.get("display") is not None:
        drop(ctx, "thinking.display")
    form = config.get("format")
    if isinstance(form, dict) and form.get("type") == "json_schema":
        schema = {"name": "output", "schema": form.get("schema") or {}}
        out["response_format"] = {"type": "json_schema", "json_schema": schema}
    elif form is not None:
        drop(ctx, "output_config.format")
    for key, value in config.items():
        if key not in ("effort", "format") and value is not None:
            drop(ctx, f"output_config.{key}")
