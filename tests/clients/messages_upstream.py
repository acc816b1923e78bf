"""A scripted Anthropic Messages upstream for the real clients: the same two-turn tool
loop as ``chat_upstream.ChatModel``, streamed as the Messages API streams it.

proxai runs with ``upstream.protocol = "anthropic_messages"``: a Responses client's
turns reach it through proxai's translation (Responses → Chat → Messages). Until a
request carries a ``tool_result`` it streams a sentence of text and a ``tool_use``
(its input in small pieces), after a signed ``thinking`` block when the request turns
thinking on; then it answers. Like the real API, it refuses a tool loop whose last
assistant message does not start with the thinking block it signed while thinking is
on (proxai's Responses → Messages translation sends no thinking back: see
``chat_to_messages``).
"""

from __future__ import annotations

from typing import Any

import attrs
from chat_upstream import ToolCall, pieces

from proxai.testing import RecordedRequest, Script

__all__ = ["MessagesModel", "assistant_text_with", "thinking_sent_with", "tool_results"]

MODEL = "claude-scripted"
#: The signature the scripted model puts on its thinking block: it must come back.
SIGNATURE = "sig-scripted-0123456789"
USAGE = {"input_tokens": 120, "output_tokens": 12}


def _event(kind: str, **fields: Any) -> dict[str, Any]:
    return {"type": kind, **fields}


def _block(index: int, start: dict[str, Any], deltas: list[dict[str, Any]]) -> list[Any]:
    return [
        _event("content_block_start", index=index, content_block=start),
        *(_event("content_block_delta", index=index, delta=d) for d in deltas),
        _event("content_block_stop", index=index),
    ]


def _stream(blocks: list[Any], stop: str) -> Script:
    message = {
        "id": "msg_scripted",
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": MODEL,
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": USAGE["input_tokens"], "output_tokens": 1},
    }
    return Script.sse(
        [
            _event("message_start", message=message),
            *blocks,
            _event(
                "message_delta",
                delta={"stop_reason": stop, "stop_sequence": None},
                usage={"output_tokens": USAGE["output_tokens"]},
            ),
            _event("message_stop"),
        ]
    )


def _error(message: str) -> Script:
    error = {"type": "invalid_request_error", "message": message}
    return Script.json({"type": "error", "error": error}, status=400)


def tool_results(body: dict[str, Any]) -> list[tuple[str | None, str]]:
    """Each ``tool_result`` block of a Messages request: its ``tool_use_id`` and its text."""
    found: list[tuple[str | None, str]] = []
    for message in body.get("messages") or []:
        content = message.get("content")
        for block in content if isinstance(content, list) else ():
            if block.get("type") != "tool_result":
                continue
            inner = block.get("content")
            if isinstance(inner, list):
                inner = "".join(str(p.get("text", "")) for p in inner if isinstance(p, dict))
            found.append((block.get("tool_use_id"), str(inner)))
    return found


def _blocks_with(body: dict[str, Any], call_id: str, kind: str) -> list[dict[str, Any]]:
    """The ``kind`` blocks of the assistant message in a Messages request that calls
    ``call_id``."""
    for message in body.get("messages") or []:
        content = message.get("content")
        if message.get("role") != "assistant" or not isinstance(content, list):
            continue
        if any(b.get("type") == "tool_use" and b.get("id") == call_id for b in content):
            return [b for b in content if b.get("type") == kind]
    return []


def thinking_sent_with(body: dict[str, Any], call_id: str) -> list[dict[str, Any]]:
    """The thinking blocks of the assistant message that calls ``call_id``."""
    return _blocks_with(body, call_id, "thinking")


def assistant_text_with(body: dict[str, Any], call_id: str) -> list[str]:
    """The text blocks of the assistant message that calls ``call_id``."""
    return [str(b.get("text")) for b in _blocks_with(body, call_id, "text")]


@attrs.define
class MessagesModel:
    """A model behind the Messages API that runs a two-turn tool loop (streamed only)."""

    call: ToolCall
    answer: str
    thinking: str
    text_before_call: str

    def __call__(self, request: RecordedRequest) -> Script:
        if request.method != "POST" or not request.target.endswith("/messages"):
            return _error(
                f"the scripted Messages upstream has no {request.method} {request.target}"
            )
        body = request.json()
        if body.get("stream") is not True:
            return _error("the scripted Messages upstream streams only")
        thinking_on = (body.get("thinking") or {}).get("type") in ("enabled", "adaptive")
        if tool_results(body):
            blocks = thinking_sent_with(body, self.call.id)
            if thinking_on and [b.get("signature") for b in blocks] != [SIGNATURE]:
                return _error(
                    "messages: the final assistant message must start with a thinking block"
                )
            text = [{"type": "text_delta", "text": p} for p in pieces(self.answer)]
            return _stream(_block(0, {"type": "text", "text": ""}, text), "end_turn")
        offered = [t.get("name") for t in body.get("tools") or []]
        if self.call.name not in offered:
            return _error(f"the scripted model wants tool {self.call.name}, offered {offered}")
        blocks: list[Any] = []
        first = 1 if thinking_on else 0  # the text block's index
        if thinking_on:
            thinking = [{"type": "thinking_delta", "thinking": p} for p in pieces(self.thinking)]
            thinking.append({"type": "signature_delta", "signature": SIGNATURE})
            start = {"type": "thinking", "thinking": "", "signature": ""}
            blocks += _block(0, start, thinking)
        text = [{"type": "text_delta", "text": p} for p in pieces(self.text_before_call)]
        blocks += _block(first, {"type": "text", "text": ""}, text)
        arguments = [
            {"type": "input_json_delta", "partial_json": p}
            for p in pieces(self.call.arguments_json)
        ]
        tool_use = {"type": "tool_use", "id": self.call.id, "name": self.call.name, "input": {}}
        blocks += _block(first + 1, tool_use, arguments)
        return _stream(blocks, "tool_use")
