"""A scripted Chat Completions upstream for the real clients, as vLLM or llama.cpp stream.

Both client runners (``run_clients.py``, ``run_agents.py``) put proxai with an
``openai_chat`` upstream in front of these scripts: the client speaks Responses or
Messages, the upstream only Chat Completions, so every turn goes through proxai's
translation. A turn is either one tool call (``tool_calls`` deltas, the arguments
in small pieces) or a text answer; streams end with ``finish_reason``, a usage chunk
(``choices: []``) and ``[DONE]``, and non-streaming requests get the same turn as a
whole ``chat.completion`` body (Claude Code falls back to one after a broken stream).
"""

from __future__ import annotations

import json
from typing import Any

import attrs

from proxai.testing import RecordedRequest, Script, Stall, chat_chunk

__all__ = [
    "DONE",
    "USAGE",
    "ChatModel",
    "ToolCall",
    "chunk",
    "pieces",
    "reasoning_sent_with",
    "text_body",
    "text_stream",
    "tool_call_body",
    "tool_call_stream",
    "tool_messages",
]

MODEL = "qwen3-coder"
USAGE = {
    "prompt_tokens": 120,
    "completion_tokens": 12,
    "total_tokens": 132,
    "prompt_tokens_details": {"cached_tokens": 0},
    "completion_tokens_details": {"reasoning_tokens": 0},
}
DONE = b"data: [DONE]\n\n"


@attrs.frozen
class ToolCall:
    """The one tool call a scripted turn makes."""

    id: str
    name: str
    arguments: dict[str, Any]

    @property
    def arguments_json(self) -> str:
        return json.dumps(self.arguments, ensure_ascii=False)


def pieces(text: str, size: int = 7) -> list[str]:
    """``text`` in pieces of ``size`` characters: arguments arrive a few tokens at a time."""
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def chunk(delta: dict[str, Any] | None, finish: str | None = None, **extra: Any) -> bytes:
    """One data-only ``chat.completion.chunk`` line; ``delta=None`` is a ``choices: []`` chunk."""
    return chat_chunk(delta, finish, model=MODEL, id="chatcmpl-scripted", **extra)


def _ending(finish: str) -> list[bytes]:
    return [chunk({}, finish), chunk(None, usage=USAGE), DONE]


def tool_call_stream(
    call: ToolCall,
    *,
    reasoning: str | None = None,
    text: str | None = None,
    stall_after: int | None = None,
) -> Script:
    """A streamed turn that calls ``call``, after ``reasoning`` (DeepSeek's
    ``reasoning_content``) and ``text``, if any. With ``stall_after``, the upstream
    goes silent after that many arguments pieces, the call still open."""
    events = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"reasoning_content": p}) for p in pieces(reasoning)] if reasoning else []
    events += [chunk({"content": p}) for p in pieces(text)] if text else []
    opened = {"index": 0, "id": call.id, "type": "function"}
    events.append(
        chunk({"tool_calls": [{**opened, "function": {"name": call.name, "arguments": ""}}]})
    )
    args = [
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": p}}]})
        for p in pieces(call.arguments_json)
    ]
    if stall_after is not None:
        return Script.sse([*events, *args[:stall_after]], then=[Stall()])
    return Script.sse([*events, *args, *_ending("tool_calls")])


def text_stream(text: str) -> Script:
    """A streamed turn that answers ``text``."""
    events = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"content": p}) for p in pieces(text)]
    return Script.sse([*events, *_ending("stop")])


def _completion(message: dict[str, Any], finish: str) -> Script:
    return Script.json(
        {
            "id": "chatcmpl-scripted",
            "object": "chat.completion",
            "created": 1767225600,
            "model": MODEL,
            "choices": [
                {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
            ],
            "usage": USAGE,
        }
    )


def tool_call_body(call: ToolCall) -> Script:
    """The tool-call turn as one non-streaming ``chat.completion``."""
    function = {"name": call.name, "arguments": call.arguments_json}
    tool_calls = [{"id": call.id, "type": "function", "function": function}]
    return _completion(
        {"role": "assistant", "content": None, "tool_calls": tool_calls}, "tool_calls"
    )


def text_body(text: str) -> Script:
    """The answer turn as one non-streaming ``chat.completion``."""
    return _completion({"role": "assistant", "content": text}, "stop")


def _error(message: str) -> Script:
    error = {"message": message, "type": "invalid_request_error", "param": None, "code": None}
    return Script.json({"error": error}, status=400)


def tool_messages(body: dict[str, Any]) -> list[tuple[str | None, str]]:
    """Each ``role: tool`` message of a Chat request: its ``tool_call_id`` and its text."""
    found: list[tuple[str | None, str]] = []
    for message in body.get("messages") or []:
        if message.get("role") != "tool":
            continue
        content = message.get("content")
        if isinstance(content, list):
            content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        found.append((message.get("tool_call_id"), str(content)))
    return found


def reasoning_sent_with(body: dict[str, Any], call_id: str) -> list[object]:
    """The ``reasoning_content`` of each assistant message in a Chat request that calls
    ``call_id``: DeepSeek-style upstreams reject a history without it."""
    return [
        message.get("reasoning_content")
        for message in body.get("messages") or []
        if message.get("role") == "assistant"
        and any(c.get("id") == call_id for c in message.get("tool_calls") or [])
    ]


@attrs.define
class ChatModel:
    """A model behind a Chat Completions API that runs a two-turn tool loop.

    Until the request carries a tool result it calls ``call`` (streamed or not, as
    asked); then it answers ``answer``. The first ``stalls`` streamed tool-call turns
    go silent mid-arguments, so proxai's ``tool_arguments`` deadline has to end them.
    With ``summary``, a request that may call no tool (``tool_choice: "none"``, proxai's
    summarizing request for a compaction) gets it as the answer, and a request that
    holds it (the conversation after the compaction) gets ``answer``.
    """

    call: ToolCall
    answer: str
    reasoning: str | None = None  # streamed before the call
    text_before_call: str | None = None
    stalls: int = 0
    stalled: int = 0
    summary: str | None = None

    def __call__(self, request: RecordedRequest) -> Script:
        if request.method != "POST" or not request.target.endswith("/chat/completions"):
            return _error(f"the scripted Chat upstream has no {request.method} {request.target}")
        body = request.json()
        streaming = body.get("stream") is True
        messages = body.get("messages") or []
        if self.summary is not None and body.get("tool_choice") == "none":
            return text_stream(self.summary) if streaming else text_body(self.summary)
        compacted = self.summary is not None and self.summary in json.dumps(messages)
        if compacted or (messages and messages[-1].get("role") == "tool"):
            return text_stream(self.answer) if streaming else text_body(self.answer)
        offered = [(t.get("function") or {}).get("name") for t in body.get("tools") or []]
        if self.call.name not in offered:
            return _error(f"the scripted model wants tool {self.call.name}, offered {offered}")
        if not streaming:
            return tool_call_body(self.call)
        stall_after = None
        if self.stalled < self.stalls:
            self.stalled += 1
            stall_after = 2
        return tool_call_stream(
            self.call,
            reasoning=self.reasoning,
            text=self.text_before_call,
            stall_after=stall_after,
        )
