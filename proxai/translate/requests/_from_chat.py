"""Reading a Chat Completions request, as both translators from Chat must (to Messages, to
Responses): the same refusals and the same text out of the same message shapes."""

from __future__ import annotations

from typing import Any, NoReturn

from ..ir import TranslationContext
from ._common import PARTS_JOINER, drop, each_object, refuse, text_of

__all__ = ["assistant_text", "refuse_role", "refuse_untranslatable", "text_content"]

JSON = Any


def refuse_untranslatable(body: dict[str, JSON], upstream: str) -> None:
    """400 for what no other API has: several choices (``n``), the legacy ``functions``."""
    n = body.get("n")
    if isinstance(n, int) and n > 1:
        refuse(f"this upstream ({upstream}) returns one choice per request: `n` must be 1", "n")
    for key in ("functions", "function_call"):
        if body.get(key) is not None:
            refuse(f"the legacy `{key}` cannot be translated: use `tools`", key)


def refuse_role(role: JSON, path: str) -> NoReturn:
    """400 for a message of a role neither translator reads (the legacy ``function``, or none)."""
    if role == "function":
        refuse("legacy `function` messages cannot be translated: use tool calls", path)
    refuse(f"invalid request: {path}.role: unknown role {role!r}", f"{path}.role")


def text_content(content: JSON, path: str) -> str:
    """Text-only content (system, developer, tool messages) as one string."""
    if content is None or isinstance(content, str):
        return text_of(content, path)
    texts = [text_of(part.get("text"), f"{here}.text") for here, part in each_object(content, path)]
    return PARTS_JOINER.join(texts)


def assistant_text(message: dict[str, JSON], path: str, ctx: TranslationContext) -> str:
    """An assistant message's text and refusal as one string. Its reasoning is dropped
    (Anthropic and Responses read only reasoning they signed or stored themselves)."""
    content = message.get("content")
    texts: list[str] = []
    if isinstance(content, str):
        texts.append(content)
    else:
        for here, part in each_object(content, f"{path}.content"):
            key = "refusal" if part.get("type") == "refusal" else "text"
            texts.append(text_of(part.get(key), f"{here}.{key}"))
    if message.get("refusal"):
        texts.append(text_of(message["refusal"], f"{path}.refusal"))
    if message.get("reasoning_content") or message.get("reasoning"):
        drop(ctx, "messages.reasoning_content")
    if message.get("function_call") is not None:
        refuse("a legacy `function_call` cannot be translated: use tool calls", path)
    return PARTS_JOINER.join(t for t in texts if t)
