"""Chat Completions upstreams (OpenAI, vLLM, llama.cpp, Ollama, DeepSeek, OpenRouter...).

A stream is ``data: {chat.completion.chunk}`` lines and ``data: [DONE]``. What
the servers disagree on, and what this decoder does about it:

- the first chunk may be role-only or carry no choices at all: any chunk starts
  the response;
- only choice 0 is read (``n > 1`` is not translatable); other choices are noted;
- reasoning comes as ``delta.reasoning_content`` (DeepSeek, llama.cpp) or
  ``delta.reasoning`` (vLLM, Ollama, Groq, OpenRouter); inline ``<think>`` tags
  in the text are left as text;
- tool calls are keyed by ``index``, but some servers give every call index 0
  (a different ``id``, or with no ids a different name, means a new call), omit
  the index (the position in the chunk's array stands in), send several calls in
  one chunk, all arguments in one fragment, or none (the call gets ``"{}"``);
  a missing or empty ``id`` is synthesized, stable for the response. A call
  opens once its name is known: fragments before that wait for it;
- ``finish_reason`` closes every item but :class:`Finished` waits for the usage
  chunk (``choices: []``), ``[DONE]`` or the end of the stream. ``stop`` with
  tool calls made is reported as ``TOOL_CALLS`` (Ollama says ``stop``), and a
  vLLM ``stop_reason`` string as the matched stop sequence;
- ``[DONE]`` with no ``finish_reason`` before it still ends the response (as
  ``stop``, or ``tool_calls`` if calls were made): it is the server's own
  statement that the stream is complete. An end of stream with neither gives no
  :class:`Finished`;
- an ``{"error": ...}`` chunk, an ``event: error`` frame, or ``finish_reason``
  ``error`` / ``abort`` is :class:`Failed`. Other unknown reasons count as ``stop``.
"""

from __future__ import annotations

import hashlib
from typing import Any

import attrs
import orjson

from ...protocols.chat.reader import ChatReader
from ...protocols.observer import UNSEEN
from ...wire.json_values import str_or_none
from ...wire.sse import SSEFrame
from ..ir import Event, FinishReason, ItemKind, Usage
from ._base import DecoderBase, as_int, object_of

__all__ = ["ChatDecoder", "chat_usage"]

DONE = b"[DONE]"

_FINISH_REASONS = {
    "stop": FinishReason.STOP,
    "tool_calls": FinishReason.TOOL_CALLS,
    "function_call": FinishReason.TOOL_CALLS,
    "length": FinishReason.LENGTH,
    "content_filter": FinishReason.CONTENT_FILTER,
}
#: Finish reasons that say the generation failed (vLLM ``abort``, OpenRouter ``error``).
_FAILED_REASONS = frozenset({"error", "abort"})
_CONTENT_FIELDS = ("content", "reasoning_content", "reasoning", "refusal", "tool_calls")


def chat_usage(usage: Any) -> Usage | None:
    """A Chat ``usage`` object in neutral terms (DeepSeek's cache counts included)."""
    if not isinstance(usage, dict):
        return None
    prompt = usage.get("prompt_tokens_details")
    completion = usage.get("completion_tokens_details")
    cached = as_int(prompt.get("cached_tokens")) if isinstance(prompt, dict) else None
    if cached is None:
        cached = as_int(usage.get("prompt_cache_hit_tokens"))
    reasoning = as_int(completion.get("reasoning_tokens")) if isinstance(completion, dict) else None
    return Usage(
        input_tokens=as_int(usage.get("prompt_tokens")),
        output_tokens=as_int(usage.get("completion_tokens")),
        cached_tokens=cached,
        reasoning_tokens=reasoning,
    )


def _text(value: Any) -> str | None:
    """Delta or message text: a string, or a list of ``{"type": "text"}`` parts."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        parts = [p.get("text") for p in value if isinstance(p, dict)]
        return "".join(p for p in parts if isinstance(p, str))
    return None


def _arguments(value: Any) -> str | None:
    """Argument text; a server that sends the arguments as an object gets them re-encoded."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return orjson.dumps(value).decode()
    return None


@attrs.define
class _Call:
    """One tool call of choice 0, from its first fragment on."""

    id: str | None  # as the upstream gave it (None: not yet, or never)
    name: str | None
    key: int | None = None  # the item's key once it opened
    waiting: list[str] = attrs.field(factory=list)  # argument text before the name came


class ChatDecoder(DecoderBase[ChatReader]):
    """A Chat Completions stream or body, as neutral events; see the module docstring."""

    reader_type = ChatReader

    def __init__(self) -> None:
        super().__init__()
        self._response_id: str | None = None
        self._content: tuple[ItemKind, int] | None = None  # the open text/reasoning/refusal
        self._called = False  # any tool call was opened
        self._finish_reason: str | None = None  # choice 0 finished, as the upstream said it
        self._stop_sequence: str | None = None
        self._usage: Usage | None = None

    # -- streams ------------------------------------------------------------------

    def feed(self, frame: SSEFrame, payload: object = UNSEEN) -> list[Event]:
        data = frame.data
        if data is None or self._ended:
            return []
        payload = self._seen(frame, payload)
        if data[:1] != b"{" and data.strip() == DONE:
            return self._done()
        chunk = object_of(data, payload)
        if frame.event == "error" and (chunk is None or not chunk.get("error")):
            # Groq and others name their in-band error: it ends the stream whatever it says.
            message = str_or_none(chunk.get("message")) if chunk else None
            return self._fail(message or data.decode("utf-8", "replace")[:500])
        if chunk is None:
            self._note("a data line that is not a JSON object was ignored")
            return []
        return self._chunk(chunk)

    def close(self) -> list[Event]:
        if self._ended or self._finish_reason is None:
            return []
        return self._end()

    def decode_body(self, body: dict[str, Any]) -> list[Event]:
        """A whole ``chat.completion``: its first choice's message as one big delta."""
        if body.get("error"):
            return self._chunk(body)
        choices = body.get("choices")
        chunk: dict[str, Any] = {k: body.get(k) for k in ("id", "model", "created", "usage")}
        chunk["choices"] = []
        if isinstance(choices, list) and choices:
            choice = choices[0]
            if isinstance(choice, dict):
                message = choice.get("message")
                chunk["choices"] = [
                    {
                        "index": 0,
                        "delta": message if isinstance(message, dict) else {},
                        "finish_reason": choice.get("finish_reason") or "stop",
                        "stop_reason": choice.get("stop_reason"),
                    }
                ]
            if len(choices) > 1:
                self._note(f"{len(choices) - 1} choice(s) besides the first were ignored")
        self.reader.read_chunk(chunk)  # the reader's items are the calls' records
        events = self._chunk(chunk)
        if self._finish_reason is None:
            self._finish_reason = "stop"
        return events + self._done()

    # -- one chunk ----------------------------------------------------------------

    def _chunk(self, chunk: dict[str, Any]) -> list[Event]:
        error = chunk.get("error")
        if error:
            return self._error(error)
        events: list[Event] = []
        if not self._started:
            self._response_id = str_or_none(chunk.get("id"))
            model, created = str_or_none(chunk.get("model")), as_int(chunk.get("created"))
            events = self._start(self._response_id, model, created)
        finished_before = self._finish_reason is not None
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self._usage = chat_usage(usage)
        choices = chunk.get("choices")
        first = None
        if not isinstance(choices, list):
            pass
        elif len(choices) == 1 and isinstance(choices[0], dict) and not choices[0].get("index"):
            first = choices[0]  # the usual chunk: one choice, index 0 (or none)
        else:
            for position, choice in enumerate(choices):
                if not isinstance(choice, dict):
                    continue
                index = as_int(choice.get("index"))
                if (index if index is not None else position) == 0:
                    first = choice
                else:
                    self._note("choices other than index 0 were ignored")
        if first is not None:
            events += self._choice(first, finished_before)
        if finished_before and (not choices or isinstance(usage, dict)):
            # The usage chunk after finish_reason: nothing else will come.
            events += self._end()
        return events

    def _choice(self, choice: dict[str, Any], finished_before: bool) -> list[Event]:
        delta = choice.get("delta")
        reason = str_or_none(choice.get("finish_reason"))
        if finished_before:
            if (isinstance(delta, dict) and any(delta.get(k) for k in _CONTENT_FIELDS)) or reason:
                self._note("choice 0 went on after its finish_reason; ignored")
            return []
        events: list[Event] = []
        if isinstance(delta, dict):
            events += self._delta_fields(delta)
        if reason:
            self._finish_reason = reason
            stop_reason = choice.get("stop_reason")
            if reason == "stop" and isinstance(stop_reason, str) and stop_reason:
                self._stop_sequence = stop_reason  # vLLM: the stop string that matched
            events += self._close_all()
            self._content = None
            if reason in _FAILED_REASONS:
                return events + self._fail(f"the upstream ended the response with {reason!r}")
        return events

    def _delta_fields(self, delta: dict[str, Any]) -> list[Event]:
        # Most deltas carry one short string: each field is looked at only if present.
        events: list[Event] = []
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if reasoning:
            events += self._content_delta(ItemKind.REASONING, _text(reasoning))
        content = delta.get("content")
        if content:
            events += self._content_delta(ItemKind.TEXT, _text(content))
        refusal = delta.get("refusal")
        if refusal:
            events += self._content_delta(ItemKind.REFUSAL, str_or_none(refusal))
        tool_calls = delta.get("tool_calls")
        if tool_calls and isinstance(tool_calls, list):
            for position, call in enumerate(tool_calls):
                if isinstance(call, dict):
                    index = as_int(call.get("index"))
                    slot = index if index is not None else position
                    events += self._fragment(slot, call, call.get("function"))
        function_call = delta.get("function_call")
        if function_call and isinstance(function_call, dict):  # the deprecated single-function form
            events += self._fragment("function_call", {}, function_call)
        return events

    def _content_delta(self, kind: ItemKind, text: str | None) -> list[Event]:
        if not text:
            return []
        content = self._content
        if content is not None and content[0] is kind and content[1] in self._open:
            return self._delta(content[1], text)
        key, events = self._open_item(kind)
        self._content = (kind, key)
        return events + self._delta(key, text)

    def _fragment(self, slot: int | str, call: dict[str, Any], function: Any) -> list[Event]:
        function = function if isinstance(function, dict) else {}
        call_id = str_or_none(call.get("id")) or None
        name = str_or_none(function.get("name")) or None
        arguments = _arguments(function.get("arguments"))
        events: list[Event] = []
        tracked = self.reader.calls.get((0, slot))
        if tracked is None:
            return events  # a call past the reader's limits: the stream is ending
        state = tracked.translation
        current = state if isinstance(state, _Call) else None
        if current is not None and (
            (call_id and current.id and call_id != current.id)
            or (not call_id and name and current.name and name != current.name)
        ):
            # A reused index (Ollama, Dynamo send every call as index 0): a new call.
            events += self._settle(current)
            current = None
        if current is not None and current.key is not None and not self._is_open(current.key):
            if (call_id and call_id != current.id) or name:
                current = None  # the old call was closed by text; this starts another
            else:
                self._note("a tool call fragment after its call was closed was ignored")
                return events
        if current is None:
            current = _Call(call_id, name)
            tracked.translation = current
        else:
            current.id = current.id or call_id
            current.name = current.name or name
        if current.key is None:
            if current.name is None:
                if arguments:
                    current.waiting.append(arguments)
                return events
            events += self._open_call(current)
        return events + self._delta(current.key, arguments)

    def _open_call(self, call: _Call) -> list[Event]:
        call_id = call.id or self._synthesized_id(self._next_key)
        key, events = self._open_item(ItemKind.TOOL_CALL, call_id=call_id, name=call.name)
        call.key = key
        self._called = True
        events += self._delta(key, "".join(call.waiting))
        call.waiting.clear()
        return events

    def _settle(self, call: _Call) -> list[Event]:
        """Close a call that can get no more fragments."""
        if call.key is None:
            if call.waiting or call.id:
                self._note("a tool call that never got a name was dropped")
            return []
        return self._close(call.key)

    def _synthesized_id(self, key: int) -> str:
        """A call id for a server that gave none: stable for this response, and
        distinct across responses when the upstream gave a response id (ids that
        restart at ``call_0`` every turn confuse clients that keep a history)."""
        if self._response_id:
            digest = hashlib.blake2b(self._response_id.encode(), digest_size=6).hexdigest()
            return f"call_{digest}_{key}"
        return f"call_{key}"

    def _error(self, error: Any) -> list[Event]:
        if isinstance(error, dict):
            code = error.get("code")
            return self._fail(
                str(error.get("message") or error),
                code=None if code is None else str(code),
                type=str_or_none(error.get("type")),
            )
        return self._fail(str(error))

    # -- the end ------------------------------------------------------------------

    def _done(self) -> list[Event]:
        """``[DONE]``: the server says the stream is complete."""
        if self._ended:
            return []
        events = self._start()
        if self._finish_reason is None:
            events += self._close_all()
            self._finish_reason = "stop"
        return events + self._end()

    def _end(self) -> list[Event]:
        events: list[Event] = []
        for (choice, _), tracked in self.reader.calls.items():
            call = tracked.translation
            if choice == 0 and isinstance(call, _Call) and call.key is None:
                events += self._settle(call)
        reason = _FINISH_REASONS.get(self._finish_reason or "stop", FinishReason.STOP)
        if reason is FinishReason.STOP and self._called:
            reason = FinishReason.TOOL_CALLS
        stop_sequence = None
        if reason is FinishReason.STOP and self._stop_sequence is not None:
            reason = FinishReason.STOP_SEQUENCE
            stop_sequence = self._stop_sequence
        return events + self._finish(reason, self._usage, stop_sequence)
