"""proxai's own reasoning envelopes, kept from the native upstreams that would refuse them.

A conversation can move between a translated upstream and a native one (a
route's fail-over: turn 1 answered by a Chat upstream, turn 2 by OpenAI or
Anthropic itself). Its history then holds what proxai wrote for itself to
carry reasoning statelessly: a Responses ``reasoning`` item whose
``encrypted_content`` is proxai's envelope, an Anthropic ``thinking`` block
signed with proxai's :data:`~proxai.translate.ir.THINKING_SIGNATURE`. The real
APIs refuse both (an item id they never issued, a signature that is not
theirs), and the conversation would stay stuck, so they are dropped on the
way to a native upstream:

- Responses: the whole reasoning item. Its id is proxai's, so OpenAI would
  look it up and answer "Item with id 'rs_...' not found" without the
  envelope, and its text (``content``) is nothing OpenAI takes back.
- Messages: the thinking block (Anthropic lets a request leave out thinking
  from earlier turns), and an assistant message it leaves empty (Anthropic
  joins the consecutive turns around it). Anthropic insists only that the last
  assistant message of an open tool loop start with a thinking block while
  thinking is on; when that message loses its block, thinking is turned off
  for the request (``thinking: {"type": "disabled"}``, which is what the API's
  own error suggests), with the ``clear_thinking`` context edits that need it.

The caller looks for :data:`REASONING_ENVELOPE_MARK` in the request's bytes first
(:func:`carries_proxai_reasoning`): a request without it is never parsed here,
and one where nothing is dropped is forwarded as the client sent it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..protocols.names import WireApi
from .ir import REASONING_ENVELOPE_PREFIX

__all__ = [
    "REASONING_ENVELOPE_MARK",
    "STRIPPERS",
    "carries_proxai_reasoning",
    "strip_proxai_reasoning",
]

JSON = Any

#: The bytes every envelope of proxai's starts with (JSON escapes none of them).
REASONING_ENVELOPE_MARK = REASONING_ENVELOPE_PREFIX.encode()
#: Blocks that satisfy Anthropic's "a final assistant message must start with a thinking block".
_THINKING_BLOCKS = frozenset({"thinking", "redacted_thinking"})
#: Context-management edits Anthropic accepts only while thinking is on.
_THINKING_EDIT_PREFIX = "clear_thinking"


def carries_proxai_reasoning(body: bytes, wire: WireApi | None) -> bool:
    """Whether a request of ``wire``'s API may carry proxai's reasoning envelopes: one bytes
    search, so a request without them costs nothing more."""
    return wire in STRIPPERS and REASONING_ENVELOPE_MARK in body


def strip_proxai_reasoning(data: dict[str, JSON], wire: WireApi | None) -> list[str]:
    """Drop proxai's envelopes from ``data``, a ``wire`` request, in place (see the module
    docstring); the request fields dropped, as dotted paths (empty: ``data`` untouched)."""
    strip = STRIPPERS.get(wire) if wire is not None else None
    return strip(data) if strip is not None else []


def _is_envelope(value: JSON) -> bool:
    return isinstance(value, str) and value.startswith(REASONING_ENVELOPE_PREFIX)


def _strip_responses(data: dict[str, JSON]) -> list[str]:
    items = data.get("input")
    if not isinstance(items, list):
        return []
    kept = [item for item in items if not _proxai_reasoning_item(item)]
    if len(kept) == len(items):
        return []
    data["input"] = kept
    return ["input.reasoning"]


def _proxai_reasoning_item(item: JSON) -> bool:
    return (
        isinstance(item, dict)
        and item.get("type") == "reasoning"
        and _is_envelope(item.get("encrypted_content"))
    )


def _strip_messages(data: dict[str, JSON]) -> list[str]:
    messages = data.get("messages")
    if not isinstance(messages, list):
        return []
    kept: list[JSON] = []
    stripped: set[int] = set()  # indexes in ``kept`` of messages that lost a block
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if _role(message) != "assistant" or not isinstance(content, list):
            kept.append(message)
            continue
        blocks = [block for block in content if not _proxai_thinking(block)]
        if len(blocks) == len(content):
            kept.append(message)
        elif blocks:
            stripped.add(len(kept))
            kept.append({**message, "content": blocks})
    if len(kept) == len(messages) and not stripped:
        return []
    data["messages"] = kept
    dropped = ["messages.thinking"]
    if _thinking_on(data) and _open_loop_lost_its_thinking(kept, stripped):
        dropped += _turn_thinking_off(data)
    return dropped


def _role(message: JSON) -> JSON:
    return message.get("role") if isinstance(message, dict) else None


def _proxai_thinking(block: JSON) -> bool:
    return (
        isinstance(block, dict)
        and block.get("type") == "thinking"
        and _is_envelope(block.get("signature"))
    )


def _thinking_on(data: dict[str, JSON]) -> bool:
    thinking = data.get("thinking")
    return isinstance(thinking, dict) and thinking.get("type") in ("enabled", "adaptive")


def _open_loop_lost_its_thinking(messages: list[JSON], stripped: set[int]) -> bool:
    """Whether the last assistant message lost a thinking block and no longer starts with one
    while it is still being answered: it is the last message (a prefill) or tool results
    follow it (an open tool loop), where Anthropic requires thinking first."""
    last = next(
        (i for i in range(len(messages) - 1, -1, -1) if _role(messages[i]) == "assistant"),
        None,
    )
    if last is None or last not in stripped:
        return False
    first = messages[last]["content"][0]
    if isinstance(first, dict) and first.get("type") in _THINKING_BLOCKS:
        return False
    return last == len(messages) - 1 or any(_has_tool_result(m) for m in messages[last + 1 :])


def _has_tool_result(message: JSON) -> bool:
    content = message.get("content") if isinstance(message, dict) else None
    return isinstance(content, list) and any(
        isinstance(block, dict) and block.get("type") == "tool_result" for block in content
    )


def _turn_thinking_off(data: dict[str, JSON]) -> list[str]:
    data["thinking"] = {"type": "disabled"}
    dropped = ["thinking"]
    management = data.get("context_management")
    edits = management.get("edits") if isinstance(management, dict) else None
    if isinstance(management, dict) and isinstance(edits, list):
        kept = [edit for edit in edits if not _thinking_edit(edit)]
        if len(kept) != len(edits):
            dropped.append("context_management.edits.clear_thinking")
            if kept:
                data["context_management"] = {**management, "edits": kept}
            else:
                del data["context_management"]
    return dropped


def _thinking_edit(edit: JSON) -> bool:
    kind = edit.get("type") if isinstance(edit, dict) else None
    return isinstance(kind, str) and kind.startswith(_THINKING_EDIT_PREFIX)


#: The APIs whose requests can hold proxai's envelopes (those whose encoders write them),
#: each with what drops them from a request.
STRIPPERS: dict[WireApi, Callable[[dict[str, JSON]], list[str]]] = {
    WireApi.RESPONSES: _strip_responses,
    WireApi.MESSAGES: _strip_messages,
}
