"""The streams of the per-event bench, as the writes an LLM upstream makes.

An LLM upstream writes every event as soon as the model produces it, so each event
reaches a proxy in its own read and the proxy pays its per-event costs once per
event. These builders give a stream as a list of :class:`Write` s: the bytes of one
event (one HTTP chunk) and the pause before it. Two shapes:

- ``responses``: Responses text deltas in the shape of the seed document's turn 2
  (``proxai/testing/seed.py``), with the events OpenAI sends around them;
- ``chat``: the same answer as Chat Completions ``chat.completion.chunk`` lines
  (role chunk, content chunks, finish chunk, usage chunk, ``[DONE]``), what a
  vLLM-style ``openai_chat`` upstream sends.

The stream a request gets is named by its ``model`` (``ev-<deltas>-<pause µs>``,
or ``ev-hold``), so one upstream and every proxy in front of it serve every variant
of the bench: the model travels unchanged through pass-through and translation.
The preamble and closing events go out back to back, each in its own write; only
the deltas are paced.
"""

from __future__ import annotations

import json
import re
from typing import Any

import attrs

from proxai.testing.seed import ANSWER_DELTAS
from proxai.testing.upstream import sse_event

HOLD = "ev-hold"
#: A held stream's events: the preamble, up to the first token (LiteLLM's proxy passes
#: nothing of a stream on before its output item has begun).
HELD_EVENTS = 4
_MODEL = re.compile(rb'"model"\s*:\s*"(ev-[^"]*)"')
# Two-character tokens of the seed's answer (6 bytes of UTF-8 each), cycled.
_ANSWER = "".join(ANSWER_DELTAS)
TOKENS = tuple(_ANSWER[i : i + 2] for i in range(0, len(_ANSWER), 2))
CREATED_AT = 1764460800


@attrs.frozen
class Write:
    """One write of the upstream: ``pause`` seconds after the previous one."""

    data: bytes
    pause: float = 0.0


@attrs.frozen
class Variant:
    """What a request asks the upstream for: ``deltas`` text deltas ``pause`` apart,
    or (``hold``) the preamble's events and then nothing until the client leaves."""

    deltas: int = 0
    pause: float = 0.0
    hold: bool = False

    @property
    def model(self) -> str:
        return HOLD if self.hold else f"ev-{self.deltas}-{round(self.pause * 1e6)}"


def variant_of(body: bytes) -> Variant:
    """The variant a request body names (a bench-less model gets 20 unpaced deltas)."""
    match = _MODEL.search(body)
    if match is None:
        return Variant(20, 0.0)
    name = match.group(1).decode()
    if name == HOLD:
        return Variant(hold=True)
    _, deltas, pause_us = name.split("-")
    return Variant(int(deltas), int(pause_us) / 1e6)


def request_body(variant: Variant, shape: str) -> bytes:
    """The client's request for ``variant``, in its API (``shape``)."""
    body: dict[str, Any] = {"model": variant.model, "stream": True}
    if shape == "chat":
        body["messages"] = [{"role": "user", "content": "hi"}]
        body["stream_options"] = {"include_usage": True}
    else:
        body["input"] = "hi"
    return json.dumps(body, separators=(",", ":")).encode()


def answer(deltas: int) -> list[str]:
    return [TOKENS[i % len(TOKENS)] for i in range(deltas)]


def _response(status: str, model: str, output: list[Any], usage: Any = None) -> dict[str, Any]:
    return {
        "id": "resp_01",
        "object": "response",
        "created_at": CREATED_AT,
        "status": status,
        "model": model,
        "output": output,
        "usage": usage,
    }


def responses_events(variant: Variant) -> list[bytes]:
    """The Responses stream: created, in_progress, item and part added, the deltas,
    text done, part done, item done, completed; one compact ``data:`` line each."""
    model = variant.model
    tokens = answer(variant.deltas)
    text = "".join(tokens)
    part = {"type": "output_text", "text": "", "annotations": []}
    message = {
        "type": "message",
        "id": "msg_01",
        "role": "assistant",
        "status": "in_progress",
        "content": [],
    }
    done_part = {**part, "text": text}
    done_message = {**message, "status": "completed", "content": [done_part]}
    where = {"item_id": "msg_01", "output_index": 0, "content_index": 0}
    usage = {
        "input_tokens": 12,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": variant.deltas,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 12 + variant.deltas,
    }
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": _response("in_progress", model, [])},
        {"type": "response.in_progress", "response": _response("in_progress", model, [])},
        {"type": "response.output_item.added", "output_index": 0, "item": message},
        {"type": "response.content_part.added", **where, "part": part},
    ]
    events += [{"type": "response.output_text.delta", **where, "delta": t} for t in tokens]
    events += [
        {"type": "response.output_text.done", **where, "text": text},
        {"type": "response.content_part.done", **where, "part": done_part},
        {"type": "response.output_item.done", "output_index": 0, "item": done_message},
        {
            "type": "response.completed",
            "response": _response("completed", model, [done_message], usage),
        },
    ]
    return [sse_event({**e, "sequence_number": i}) for i, e in enumerate(events)]


def _chunk(model: str, delta: dict[str, Any] | None, finish: str | None = None) -> bytes:
    body: dict[str, Any] = {
        "id": "chatcmpl-01",
        "object": "chat.completion.chunk",
        "created": CREATED_AT,
        "model": model,
        "choices": [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    if delta is None:
        body["usage"] = {
            "prompt_tokens": 12,
            "completion_tokens": 0,
            "total_tokens": 12,
            "prompt_tokens_details": {"cached_tokens": 0},
        }
    return sse_event(body, event="")


def chat_events(variant: Variant) -> list[bytes]:
    """The Chat Completions stream: role chunk, one chunk per delta, the finish chunk,
    the usage chunk (``choices: []``) and ``[DONE]``."""
    model = variant.model
    events = [_chunk(model, {"role": "assistant", "content": ""})]
    events += [_chunk(model, {"content": t}) for t in answer(variant.deltas)]
    events += [_chunk(model, {}, "stop"), _chunk(model, None), b"data: [DONE]\n\n"]
    return events


def events(variant: Variant, shape: str) -> list[bytes]:
    return chat_events(variant) if shape == "chat" else responses_events(variant)


def body(variant: Variant, shape: str) -> bytes:
    """Every byte of the stream's body, as the upstream sends it."""
    return b"".join(events(variant, shape))


def writes(variant: Variant, shape: str) -> list[Write]:
    """The stream as writes: each event its own write, the deltas ``pause`` apart.

    Responses: 4 preamble events and 4 closing ones; Chat: 1 and 3 (``[DONE]``
    included). A held stream is its first :data:`HELD_EVENTS` events: a Responses
    stream's preamble, all of it before the first token (LiteLLM's proxy sends nothing
    of a stream until its output item has begun).
    """
    all_events = events(variant, shape)
    if variant.hold:
        return [Write(data) for data in all_events[:HELD_EVENTS]]
    first_delta = 4 if shape == "responses" else 1
    out = []
    for i, data in enumerate(all_events):
        paced = first_delta <= i <= first_delta + variant.deltas  # the deltas and the end
        out.append(Write(data, variant.pause if paced and i else 0.0))
    return out
