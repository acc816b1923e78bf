"""A Responses request as a Chat Completions request (translation notes 3a).

Responses is stateful where Chat is not: ``previous_response_id``,
``conversation`` and ``item_reference`` point at history only OpenAI holds, so
they are refused (Codex sends the whole history with ``store: false`` and
never needs them). Hosted tools the upstream cannot run are dropped and listed
in ``ctx.dropped``, or refused when the upstream is configured strict.

Reasoning comes back statelessly as ``reasoning_content`` on the next
assistant message (DeepSeek-style upstreams refuse a conversation whose
reasoning was not sent back): from proxai's envelope in ``encrypted_content``
(behind :data:`~proxai.translate.ir.REASONING_ENVELOPE_PREFIX`), else from the
item's own ``reasoning_text`` parts, else from its ``summary``. A reasoning
item with no text is dropped, never turned into a user message.
"""

from __future__ import annotations

from typing import Any

from ...config import TranslationOptions
from ..ir import CUSTOM_TOOL_PARAMETER, TranslationContext, unwrap_reasoning
from ._common import (
    PARTS_JOINER,
    SECTIONS_JOINER,
    as_dict,
    as_list,
    custom_tool_description,
    custom_tool_schema,
    drop,
    drop_unhandled,
    dumps,
    each_object,
    object_schema,
    refuse,
    text_of,
)
from ._to_chat import SystemPrompts, stream_with_usage

__all__ = ["REASONING_INCLUDE", "responses_echo", "responses_to_chat"]

JSON = Any

#: The ``include`` value that asks for reasoning to come back next turn.
REASONING_INCLUDE = "reasoning.encrypted_content"

#: Request fields the Responses response object echoes, as the client sent them.
_ECHOED = (
    "instructions",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "text",
    "reasoning",
    "max_output_tokens",
    "max_tool_calls",
    "temperature",
    "top_p",
    "top_logprobs",
    "metadata",
    "truncation",
    "user",
    "safety_identifier",
    "prompt_cache_key",
    "service_tier",
    "background",
)

#: Fields read below (or deliberately not forwarded without a note); any other is listed as dropped.
_HANDLED = frozenset(
    {
        "model",
        "input",
        "instructions",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "text",
        "reasoning",
        "max_output_tokens",
        "temperature",
        "top_p",
        "user",
        "stream",
        "stream_options",  # only include_obfuscation, which means nothing to Chat
        "include",
        "store",  # nothing is stored upstream: not forwarded
        "metadata",  # echoed back to the client, not forwarded
        "previous_response_id",
        "conversation",
        "background",
        "prompt",
    }
)

#: Chat roles of Responses message roles: ``developer`` is OpenAI's newer name for ``system``,
#: which many Chat servers do not know.
_MESSAGE_ROLES = {
    "user": "user",
    "assistant": "assistant",
    "system": "system",
    "developer": "system",
}


def responses_echo(body: dict[str, JSON]) -> dict[str, JSON]:
    """What the Responses response object repeats from the request; nothing is stored."""
    echo = {key: body[key] for key in _ECHOED if body.get(key) is not None}
    echo["store"] = False
    return echo


def _blank(value: JSON) -> bool:
    if isinstance(value, str):
        return not value.strip()
    if isinstance(value, dict):
        return _blank(value.get("id"))
    return value is None


def _refuse_stateful(body: dict[str, JSON]) -> None:
    for key in ("previous_response_id", "conversation"):
        if not _blank(body.get(key)):
            refuse(
                f"`{key}` needs conversation state that only OpenAI keeps, and this upstream "
                "is reached through proxai's stateless translation: send the whole "
                "conversation in `input` (with `store: false`) instead",
                key,
            )
    if body.get("background"):
        refuse("background responses need OpenAI's storage; this upstream has none", "background")
    if body.get("prompt") is not None:
        refuse("stored prompt templates live on OpenAI; this upstream has none", "prompt")


def responses_to_chat(
    body: dict[str, JSON], options: TranslationOptions, ctx: TranslationContext
) -> dict[str, JSON]:
    """The Chat Completions request for a Responses request ``body``; fills ``ctx``."""
    _refuse_stateful(body)
    include = [v for v in as_list(body.get("include"), "include") if isinstance(v, str)]
    ctx.reasoning_envelope = REASONING_INCLUDE in include
    for value in include:
        if value != REASONING_INCLUDE:
            drop(ctx, f"include.{value}")
    ctx.echo.update(responses_echo(body))

    out: dict[str, JSON] = {}
    if body.get("model") is not None:
        out["model"] = body["model"]
    history = _History(ctx)
    instructions = text_of(body.get("instructions"), "instructions")
    if instructions:
        history.system(instructions)
    items = body.get("input")
    if isinstance(items, str):
        history.user(items)
    else:
        for path, item in each_object(items, "input"):
            history.add(item, path)
    out["messages"] = history.finish()

    tools = _tools(body.get("tools"), options, ctx)
    if tools:
        out["tools"] = tools
        choice = _tool_choice(body.get("tool_choice"), ctx)
        if choice is not None:
            out["tool_choice"] = choice
        if body.get("parallel_tool_calls") is not None:
            out["parallel_tool_calls"] = body["parallel_tool_calls"]
    _text(body.get("text"), out, ctx)
    if body.get("max_output_tokens") is not None:
        out[options.max_tokens_field.value] = body["max_output_tokens"]
    _reasoning(body.get("reasoning"), out, ctx)
    for key in ("temperature", "top_p", "user"):
        if body.get(key) is not None:
            out[key] = body[key]
    stream_with_usage(body, out)
    drop_unhandled(ctx, body, _HANDLED)
    return out


class _History:
    """Responses input items, folded into Chat messages.

    Consecutive assistant text and function calls become one assistant message;
    restored reasoning attaches to the assistant message of its turn; images a
    tool returned follow its tool messages in a user message (Chat tool messages
    carry text only).
    """

    def __init__(self, ctx: TranslationContext) -> None:
        self.ctx = ctx
        self.messages: list[dict[str, JSON]] = []
        self._system = SystemPrompts(self.messages)
        self._assistant: dict[str, JSON] | None = None  # open: later calls and text join it
        # The open assistant message's texts and reasoning, joined when it closes (joining
        # them one by one would copy what came before each time).
        self._assistant_texts: list[str] = []
        self._assistant_reasoning: list[str] = []
        self._reasoning: list[str] = []  # restored, waiting for its assistant message
        self._tool_images: list[dict[str, JSON]] = []  # waiting for the tool run to end

    # -- messages of each role --

    def system(self, text: str) -> None:
        if not text:
            return
        self._close()
        self._system.add(text)

    def user(self, content: str | list[dict[str, JSON]]) -> None:
        self._close()
        self.messages.append({"role": "user", "content": content})

    def _open_assistant(self) -> dict[str, JSON]:
        self._end_tools()
        if self._assistant is None:
            self._assistant = {"role": "assistant", "content": None}
            self.messages.append(self._assistant)
        if self._reasoning:
            self._assistant.setdefault("reasoning_content", "")  # its place among the keys
            self._assistant_reasoning += self._reasoning
            self._reasoning = []
        return self._assistant

    def _close(self) -> None:
        """A turn ended: reasoning that found no assistant message is dropped."""
        self._end_tools()
        self._close_assistant()
        if self._reasoning:
            drop(self.ctx, "input.reasoning")
            self._reasoning = []

    def _close_assistant(self) -> None:
        """The open assistant message is complete: its texts and reasoning joined, once."""
        message = self._assistant
        if message is None:
            return
        if self._assistant_texts:
            message["content"] = PARTS_JOINER.join(self._assistant_texts)
            self._assistant_texts = []
        if self._assistant_reasoning:
            message["reasoning_content"] = "".join(self._assistant_reasoning)
            self._assistant_reasoning = []
        self._assistant = None

    def _end_tools(self) -> None:
        if self._tool_images:
            self.messages.append({"role": "user", "content": self._tool_images})
            self._tool_images = []

    def finish(self) -> list[dict[str, JSON]]:
        self._close()
        self._system.finish()
        return self.messages

    # -- items --

    def add(self, item: dict[str, JSON], path: str) -> None:
        kind = item.get("type") or "message"
        if kind == "message":
            self._message(item, path)
        elif kind in ("function_call", "custom_tool_call"):
            self._call(item, path)
        elif kind in ("function_call_output", "custom_tool_call_output"):
            self._output(item, path)
        elif kind == "reasoning":
            self._reasoning_item(item)
        elif kind == "item_reference":
            refuse(
                "`item_reference` points at an item only OpenAI keeps; send the item itself",
                path,
            )
        else:
            # Hosted tools' calls and outputs (web_search_call, local_shell_call_output...),
            # compaction items: nothing a Chat upstream can read.
            drop(self.ctx, f"input.{kind}")

    def _message(self, item: dict[str, JSON], path: str) -> None:
        sent = item.get("role")
        role = _MESSAGE_ROLES.get(sent) if isinstance(sent, str) else None
        if role is None:
            refuse(f"invalid request: {path}.role: unknown role {item.get('role')!r}", path)
        content = item.get("content")
        if role == "system":
            self.system(_plain_text(content, f"{path}.content"))
        elif role == "user":
            self.user(_user_content(content, f"{path}.content"))
        else:
            self._assistant_text(content, f"{path}.content")

    def _assistant_text(self, content: JSON, path: str) -> None:
        texts: list[str] = []
        refusals: list[str] = []
        if isinstance(content, str):
            texts.append(content)
        else:
            for here, part in each_object(content, path):
                if part.get("type") == "refusal":
                    refusals.append(text_of(part.get("refusal"), f"{here}.refusal"))
                else:
                    texts.append(text_of(part.get("text"), f"{here}.text"))
        if self._assistant is not None and self._assistant.get("tool_calls"):
            self._close()  # text after calls: a new message, as Chat cannot order them
        message = self._open_assistant()
        if texts:
            self._assistant_texts.append(PARTS_JOINER.join(texts))
        if refusals:
            message["refusal"] = PARTS_JOINER.join(refusals)

    def _call(self, item: dict[str, JSON], path: str) -> None:
        name = text_of(item.get("name"), f"{path}.name")
        call_id = text_of(item.get("call_id") or item.get("id"), f"{path}.call_id")
        if item["type"] == "custom_tool_call":
            value = text_of(item.get("input"), f"{path}.input")
            arguments = dumps({CUSTOM_TOOL_PARAMETER: value})
        else:
            arguments = text_of(item.get("arguments"), f"{path}.arguments") or "{}"
        message = self._open_assistant()
        call = {
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": arguments},
        }
        message.setdefault("tool_calls", []).append(call)

    def _output(self, item: dict[str, JSON], path: str) -> None:
        if self._assistant is not None or self._reasoning:
            self._close()
        output = item.get("output")
        if isinstance(output, str) or output is None:
            text = text_of(output, f"{path}.output")
        else:
            parts = _user_parts(output, f"{path}.output")
            texts = [p["text"] for p in parts if p["type"] == "text"]
            self._tool_images += [p for p in parts if p["type"] != "text"]
            text = PARTS_JOINER.join(texts)
        call_id = text_of(item.get("call_id"), f"{path}.call_id")
        self.messages.append({"role": "tool", "tool_call_id": call_id, "content": text})

    def _reasoning_item(self, item: dict[str, JSON]) -> None:
        text = _reasoning_text(item)
        if not text:
            drop(self.ctx, "input.reasoning")
            return
        self._reasoning.append(text)
        if self._assistant is not None:  # reasoning within a turn already under way
            self._open_assistant()


def _reasoning_text(item: dict[str, JSON]) -> str | None:
    """The text a reasoning item carries, as a Chat upstream takes it back: proxai's envelope,
    else the item's own ``reasoning_text`` parts (what proxai streamed, which clients send
    back as they got it), else its ``summary_text`` parts (all an OpenAI item shows). Parts
    of another shape are skipped: a reasoning item is never worth a refusal."""
    envelope = item.get("encrypted_content")
    text = unwrap_reasoning(envelope if isinstance(envelope, str) else None)
    if text is not None:
        return text
    text = "".join(_part_texts(item.get("content"), "reasoning_text"))
    return text or SECTIONS_JOINER.join(_part_texts(item.get("summary"), "summary_text"))


def _part_texts(parts: JSON, kind: str) -> list[str]:
    if not isinstance(parts, list):
        return []
    return [
        part["text"]
        for part in parts
        if isinstance(part, dict) and part.get("type") == kind and isinstance(part.get("text"), str)
    ]


def _plain_text(content: JSON, path: str) -> str:
    """A system or developer message's text (Chat servers want a string there)."""
    if isinstance(content, str):
        return content
    texts = []
    for here, part in each_object(content, path):
        if part.get("type") not in ("input_text", "output_text", "text"):
            refuse(f"{here}: a system message can only hold text", here)
        texts.append(text_of(part.get("text"), f"{here}.text"))
    return PARTS_JOINER.join(texts)


def _user_content(content: JSON, path: str) -> str | list[dict[str, JSON]]:
    """A user message's content: one string when it is all text (what every Chat server
    reads), else Chat content parts."""
    if isinstance(content, str):
        return content
    parts = _user_parts(content, path)
    if all(part["type"] == "text" for part in parts):
        return PARTS_JOINER.join(part["text"] for part in parts)
    return parts


def _user_parts(content: JSON, path: str) -> list[dict[str, JSON]]:
    return [_user_part(part, here) for here, part in each_object(content, path)]


def _user_part(part: dict[str, JSON], path: str) -> dict[str, JSON]:
    kind = part.get("type")
    if kind in ("input_text", "output_text", "text"):
        return {"type": "text", "text": text_of(part.get("text"), f"{path}.text")}
    if kind == "input_image":
        url = part.get("image_url")
        if not isinstance(url, str) or not url:
            refuse(f"{path}: only images given by `image_url` can be sent to this upstream", path)
        image: dict[str, JSON] = {"url": url}
        if part.get("detail") in ("low", "high", "auto", "original"):
            image["detail"] = part["detail"]
        return {"type": "image_url", "image_url": image}
    if kind == "input_file":
        file = {k: part[k] for k in ("file_data", "file_id", "filename") if part.get(k)}
        if not ("file_data" in file or "file_id" in file):
            refuse(f"{path}: only files given by `file_data` or `file_id` can be sent", path)
        return {"type": "file", "file": file}
    if kind == "input_audio":
        audio = as_dict(part.get("input_audio"), f"{path}.input_audio")
        return {"type": "input_audio", "input_audio": audio}
    refuse(f"{path}: content of type {kind!r} cannot be sent to this upstream", path)


def _tools(tools: JSON, options: TranslationOptions, ctx: TranslationContext) -> list[JSON]:
    out: list[JSON] = []
    custom: set[str] = set()
    for path, tool in each_object(tools, "tools"):
        kind = tool.get("type")
        if kind == "function":
            out.append(_function_tool(tool, path, ctx))
        elif kind == "custom":
            name = text_of(tool.get("name"), f"{path}.name")
            custom.add(name)
            out.append(_custom_tool(tool, path))
        elif options.strict:
            refuse(f"{path}: the upstream cannot run the hosted tool {kind!r}", path)
        else:
            drop(ctx, f"tools.{kind}")
    ctx.custom_tools = ctx.custom_tools | custom
    return out


def _function_tool(tool: dict[str, JSON], path: str, ctx: TranslationContext) -> dict[str, JSON]:
    function: dict[str, JSON] = {"name": text_of(tool.get("name"), f"{path}.name")}
    if tool.get("description"):
        function["description"] = tool["description"]
    function["parameters"] = object_schema(tool.get("parameters"))
    if isinstance(tool.get("strict"), bool):
        function["strict"] = tool["strict"]
    for key in ("defer_loading", "output_schema", "allowed_callers"):
        if tool.get(key) is not None:
            drop(ctx, f"tools.{key}")
    return {"type": "function", "function": function}


def _custom_tool(tool: dict[str, JSON], path: str) -> dict[str, JSON]:
    """A free-form tool as a function of one string, its grammar told in the description."""
    description = text_of(tool.get("description"), f"{path}.description")
    form = tool.get("format")
    if isinstance(form, dict) and form.get("type") == "grammar":
        rules = text_of(form.get("definition"), f"{path}.format.definition")
        syntax = form.get("syntax", "grammar")
        description = custom_tool_description(description, syntax, rules)
    function: dict[str, JSON] = {"name": tool["name"]}
    if description:
        function["description"] = description
    function["parameters"] = custom_tool_schema() | {"additionalProperties": False}
    return {"type": "function", "function": function}


def _named(name: JSON) -> dict[str, JSON]:
    return {"type": "function", "function": {"name": name}}


def _tool_choice(choice: JSON, ctx: TranslationContext) -> JSON:
    if choice is None or isinstance(choice, str):
        return choice
    choice = as_dict(choice, "tool_choice")
    kind = choice.get("type")
    if kind in ("function", "custom"):
        return _named(choice.get("name"))
    if kind == "allowed_tools":
        allowed = []
        for tool in as_list(choice.get("tools"), "tool_choice.tools"):
            if isinstance(tool, dict) and tool.get("type") in ("function", "custom"):
                allowed.append(_named(tool.get("name")))
            else:
                drop(ctx, "tool_choice.tools")
        if not allowed:
            drop(ctx, "tool_choice")
            return None
        mode = choice.get("mode", "auto")
        return {"type": "allowed_tools", "allowed_tools": {"mode": mode, "tools": allowed}}
    drop(ctx, "tool_choice")  # a hosted tool's choice: that tool was dropped
    return None


def _text(text: JSON, out: dict[str, JSON], ctx: TranslationContext) -> None:
    if text is None:
        return
    text = as_dict(text, "text")
    form = text.get("format")
    if isinstance(form, dict):
        kind = form.get("type")
        if kind == "json_object":
            out["response_format"] = {"type": "json_object"}
        elif kind == "json_schema":
            keys = ("name", "schema", "strict", "description")
            schema = {k: form[k] for k in keys if form.get(k) is not None}
            out["response_format"] = {"type": "json_schema", "json_schema": schema}
        elif kind != "text":
            drop(ctx, "text.format")
    if text.get("verbosity") is not None:
        out["verbosity"] = text["verbosity"]


def _reasoning(reasoning: JSON, out: dict[str, JSON], ctx: TranslationContext) -> None:
    if reasoning is None:
        return
    for key, value in as_dict(reasoning, "reasoning").items():
        if key == "effort" and isinstance(value, str):
            out["reasoning_effort"] = value
        elif value is not None:
            drop(ctx, f"reasoning.{key}")
