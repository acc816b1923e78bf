"""A scripted Responses API upstream for Codex: the same two-turn tool loop as
``chat_upstream.ChatModel``, spoken as ``POST /v1/responses`` event streams.

``run_agents.py``'s WebSocket scenarios put proxai with an ``openai_responses``
upstream in front of it: Codex's socket turns reach it as streaming POSTs, each
self-contained (proxai keeps the socket's conversation and expands
``previous_response_id``). Until a request's input carries a
``function_call_output``, a turn streams a reasoning item (a summary and an
``encrypted_content``, as OpenAI sends with ``include: reasoning.encrypted_content``)
and then the call, its arguments in 7-character deltas; after that it answers in
text. Every stream ends with ``response.completed`` whose ``output`` is empty, as the
seed's turn 1 is: a client (or proxai) must build the output from
``response.output_item.done``.
"""

from __future__ import annotations

import itertools
from typing import Any

import attrs
from chat_upstream import ToolCall, pieces

from proxai.testing import RecordedRequest, Script, Stall

__all__ = ["RETRY_AFTER", "ResponsesModel", "function_outputs", "rate_limited"]

MODEL = "gpt-5.5"
USAGE = {
    "input_tokens": 120,
    "input_tokens_details": {"cached_tokens": 0},
    "output_tokens": 12,
    "output_tokens_details": {"reasoning_tokens": 4},
    "total_tokens": 132,
}


def _response(response_id: str, status: str) -> dict[str, Any]:
    done = status == "completed"
    return {
        "id": response_id,
        "object": "response",
        "created_at": 1767225600,
        "status": status,
        "error": None,
        "incomplete_details": None,
        "model": MODEL,
        "output": [],
        "usage": USAGE if done else None,
    }


class _Events:
    """A stream's events, numbered as they are added."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def add(self, kind: str, **fields: Any) -> None:
        self.events.append({"type": kind, "sequence_number": len(self.events), **fields})


def function_outputs(body: dict[str, Any]) -> list[tuple[str | None, str]]:
    """Each ``function_call_output`` item of a Responses request: its ``call_id`` and text."""
    found: list[tuple[str | None, str]] = []
    for item in body.get("input") or []:
        if isinstance(item, dict) and item.get("type") == "function_call_output":
            output = item.get("output")
            if isinstance(output, list):
                output = "".join(str(p.get("text", "")) for p in output if isinstance(p, dict))
            found.append((item.get("call_id"), str(output)))
    return found


#: The ``retry-after`` (seconds) of :func:`rate_limited`.
RETRY_AFTER = 1


def rate_limited() -> Script:
    """A 429 as OpenAI answers one, with ``retry-after``."""
    error = {
        "message": "Rate limit reached for gpt-5.5 (scripted). Please try again in 1s.",
        "type": "requests",
        "param": None,
        "code": "rate_limit_exceeded",
    }
    return Script.json({"error": error}, status=429, headers=[("retry-after", str(RETRY_AFTER))])


def _error(message: str) -> Script:
    error = {"message": message, "type": "invalid_request_error", "param": None, "code": None}
    return Script.json({"error": error}, status=400)


@attrs.define
class ResponsesModel:
    """A model behind a Responses API (HTTP) that runs a two-turn tool loop.

    The first ``stalls`` tool-call turns go silent after two argument deltas, so
    proxai's ``tool_arguments`` deadline has to end them; the first ``rate_limits``
    requests get a 429 (:func:`rate_limited`).
    """

    call: ToolCall
    answer: str
    reasoning: str
    stalls: int = 0
    stalled: int = 0
    rate_limits: int = 0
    _ids: itertools.count[int] = attrs.field(factory=lambda: itertools.count(1))

    def __call__(self, request: RecordedRequest) -> Script:
        if request.method != "POST" or not request.target.endswith("/responses"):
            return _error(f"the scripted upstream has no {request.method} {request.target}")
        if self.rate_limits > 0:
            self.rate_limits -= 1
            return rate_limited()
        body = request.json()
        if body.get("stream") is not True:
            return _error("the scripted Responses upstream streams only")
        n = next(self._ids)
        if function_outputs(body):
            return self._answer(f"resp_up_{n}")
        offered = [t.get("name") for t in body.get("tools") or [] if isinstance(t, dict)]
        if self.call.name not in offered:
            return _error(f"the scripted model wants tool {self.call.name}, offered {offered}")
        stall = self.stalled < self.stalls
        self.stalled += stall
        return self._tool_call(f"resp_up_{n}", stall)

    def _tool_call(self, response_id: str, stall: bool) -> Script:
        s = _Events()
        s.add("response.created", response=_response(response_id, "in_progress"))
        s.add("response.in_progress", response=_response(response_id, "in_progress"))
        reasoning: dict[str, Any] = {
            "type": "reasoning",
            "id": f"rs_{response_id}",
            "summary": [],
            "encrypted_content": f"enc:{self.reasoning}",
        }
        s.add("response.output_item.added", output_index=0, item=reasoning)
        summary = {"type": "summary_text", "text": self.reasoning}
        s.add(
            "response.reasoning_summary_part.added",
            item_id=reasoning["id"],
            output_index=0,
            summary_index=0,
            part={"type": "summary_text", "text": ""},
        )
        s.add(
            "response.reasoning_summary_text.delta",
            item_id=reasoning["id"],
            output_index=0,
            summary_index=0,
            delta=self.reasoning,
        )
        s.add(
            "response.reasoning_summary_text.done",
            item_id=reasoning["id"],
            output_index=0,
            summary_index=0,
            text=self.reasoning,
        )
        s.add(
            "response.reasoning_summary_part.done",
            item_id=reasoning["id"],
            output_index=0,
            summary_index=0,
            part=summary,
        )
        s.add("response.output_item.done", output_index=0, item={**reasoning, "summary": [summary]})
        call: dict[str, Any] = {
            "type": "function_call",
            "id": f"fc_{response_id}",
            "call_id": self.call.id,
            "name": self.call.name,
            "arguments": "",
            "status": "in_progress",
        }
        s.add("response.output_item.added", output_index=1, item=call)
        arguments = self.call.arguments_json
        deltas = pieces(arguments)
        for delta in deltas[:2] if stall else deltas:
            s.add(
                "response.function_call_arguments.delta",
                item_id=call["id"],
                output_index=1,
                delta=delta,
            )
        if stall:
            return Script.sse(s.events, then=[Stall()])
        s.add(
            "response.function_call_arguments.done",
            item_id=call["id"],
            output_index=1,
            arguments=arguments,
        )
        done = {**call, "arguments": arguments, "status": "completed"}
        s.add("response.output_item.done", output_index=1, item=done)
        s.add("response.completed", response=_response(response_id, "completed"))
        return Script.sse(s.events)

    def _answer(self, response_id: str) -> Script:
        s = _Events()
        s.add("response.created", response=_response(response_id, "in_progress"))
        message: dict[str, Any] = {
            "type": "message",
            "id": f"msg_{response_id}",
            "role": "assistant",
            "status": "in_progress",
            "content": [],
        }
        s.add("response.output_item.added", output_index=0, item=message)
        part = {"type": "output_text", "text": "", "annotations": []}
        where = {"item_id": message["id"], "output_index": 0, "content_index": 0}
        s.add("response.content_part.added", **where, part=part)
        for delta in pieces(self.answer):
            s.add("response.output_text.delta", **where, delta=delta)
        s.add("response.output_text.done", **where, text=self.answer)
        s.add("response.content_part.done", **where, part={**part, "text": self.answer})
        content = [{**part, "text": self.answer}]
        done = {**message, "status": "completed", "content": content}
        s.add("response.output_item.done", output_index=0, item=done)
        s.add("response.completed", response=_response(response_id, "completed"))
        return Script.sse(s.events)
