"""The Chat Completions observer: a sans-io state machine over ``chat.completion.chunk`` lines.

Each ``data:`` line is a chunk (or ``[DONE]``). The observer tracks

- tool calls per (choice index, ``tool_calls[].index``): the first fragment
  carries ``id``, ``type`` and ``function.name``, later ones only
  ``function.arguments``; a new index is a parallel call. Every open call is
  guarded by ``tool_arguments``; a choice's ``finish_reason`` closes all of its
  calls (and its text). The legacy ``delta.function_call`` is one more call;
- the text of each choice, and each call's arguments, aggregated from the deltas;
- the terminal: the stream is complete only at ``data: [DONE]``; a payload with
  an ``error`` member (with or without ``event: error``) is terminal too.

A stream proxai ends itself gets ``data: {"error": {...}}`` then
``data: [DONE]``: the official openai SDK raises ``APIError`` on the first.
"""

from __future__ import annotations

from typing import Any

import orjson

from ...config import TimeoutsConfig
from ...errors import ending_code
from ...outcome import OutcomeKind
from ...wire.sse import SSEFrame
from ..tracking import TrackedItem, TrackingObserver

__all__ = ["ChatObserver", "synthesized_error"]

DONE = b"[DONE]"
#: Finish reasons that mean the answer was cut short.
_INCOMPLETE_REASONS = frozenset({"length", "content_filter"})


def synthesized_error(message: str, *, code: str = "server_error") -> bytes:
    """The error chunk and ``[DONE]`` proxai ends a broken Chat Completions stream with."""
    error = {"message": message, "type": "server_error", "param": None, "code": code}
    return b"data: " + orjson.dumps({"error": error}) + b"\n\ndata: [DONE]\n\n"


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


class ChatObserver(TrackingObserver):
    """Watches one Chat Completions stream; see the module docstring."""

    def __init__(self, timeouts: TimeoutsConfig) -> None:
        super().__init__(timeouts)
        self._calls_by_key: dict[tuple[int, int | str], TrackedItem] = {}
        self._texts: dict[int, list[str]] = {}
        self._finish_reasons: dict[int, str] = {}

    def _apply(self, frame: SSEFrame, now: float) -> None:
        assert frame.data is not None
        if frame.data.strip() == DONE:
            incomplete = _INCOMPLETE_REASONS.intersection(self._finish_reasons.values())
            self._finish(OutcomeKind.INCOMPLETE if incomplete else OutcomeKind.COMPLETED)
            return
        try:
            chunk = orjson.loads(frame.data)
        except orjson.JSONDecodeError:
            chunk = None
        if frame.event == "error" and not (isinstance(chunk, dict) and chunk.get("error")):
            # Groq and others name their in-band error: terminal whatever the data says.
            self._finish(OutcomeKind.FAILED, frame.data.decode("utf-8", "replace")[:200])
            return
        if chunk is None:
            self._note("data is not JSON")
            return
        if not isinstance(chunk, dict):
            self._note("data is not a JSON object")
            return
        error = chunk.get("error")
        if error:
            message = error.get("message") if isinstance(error, dict) else None
            self._finish(OutcomeKind.FAILED, str(message or error))
            return
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self._usage = usage
        choices = chunk.get("choices")
        if not isinstance(choices, list):
            self._note("chunk without a choices array")
            return
        for position, choice in enumerate(choices):
            if isinstance(choice, dict):
                self._choice(choice, position, now)

    def _choice(self, choice: dict[str, Any], position: int, now: float) -> None:
        index = choice.get("index")
        if not isinstance(index, int):
            index = position
        delta = choice.get("delta")
        if isinstance(delta, dict):
            content = delta.get("content")
            if isinstance(content, str) and content:
                self._guard_only(index, None)  # the calls before this text are complete
                self._text(index, content, now)
            tool_calls = delta.get("tool_calls")
            if isinstance(tool_calls, list):
                for slot, call in enumerate(tool_calls):
                    if isinstance(call, dict):
                        call_index = call.get("index")
                        key = (index, call_index if isinstance(call_index, int) else slot)
                        self._call_fragment(key, call, call.get("function"), now)
            function_call = delta.get("function_call")
            if isinstance(function_call, dict):
                self._call_fragment((index, "function_call"), {}, function_call, now)
        finish_reason = choice.get("finish_reason")
        if isinstance(finish_reason, str):
            self._finish_reasons[index] = finish_reason
            for key in [k for k in self._open if isinstance(k, tuple) and k[0] == index]:
                self._close_item(key)

    def _guard_only(self, choice: int, key: tuple[int, int | str] | None) -> None:
        """Guard call ``key`` and no other open call of ``choice``."""
        for other_key, other in self._calls_by_key.items():
            if other_key[0] == choice and other_key in self._open:
                other.guarded = other_key == key

    def _text(self, choice: int, content: str, now: float) -> None:
        key = (choice, "text")
        if key not in self._open:
            self._open_item(TrackedItem(key, "text", f"choice {choice}", False, "text", now))
        self._texts.setdefault(choice, []).append(content)

    def _call_fragment(
        self, key: tuple[int, int | str], call: dict[str, Any], function: Any, now: float
    ) -> None:
        function = function if isinstance(function, dict) else {}
        item = self._calls_by_key.get(key)
        call_id = _str(call.get("id"))
        if item is not None and call_id and item.call_id and call_id != item.call_id:
            # Some servers reuse an index for the next call; a new id means a new call.
            self._close_item(key)
            item = None
        if item is None:
            name = _str(function.get("name"))
            label = (
                "tool call" + (f" {name}" if name else "") + (f" ({call_id})" if call_id else "")
            )
            item = TrackedItem(key, "tool_call", label, True, "arguments", now, name, call_id)
            self._calls_by_key[key] = item
            self._open_item(item)
        elif key not in self._open:
            self._note(f"a fragment for {item.label} after its choice finished")
            return
        elif call_id and not item.call_id:
            item.call_id = call_id
            item.label += f" ({call_id})"
        # Chat Completions streams a choice's calls one after another: a fragment of
        # this call means the others of its choice are complete (still open, though,
        # for a server that interleaves them).
        self._guard_only(key[0], key)
        arguments = function.get("arguments")
        if isinstance(arguments, str) and arguments:
            item.parts.append(arguments)
            item.last_progress = now

    def _closing(self, kind: OutcomeKind, message: str) -> bytes:
        return synthesized_error(message, code=ending_code(kind))

    @property
    def tool_calls(self) -> dict[tuple[int, int | str], dict[str, str | None]]:
        """Each call's ``{id, name, arguments}`` by (choice index, tool call index)."""
        return {
            key: {"id": item.call_id, "name": item.name, "arguments": item.aggregate}
            for key, item in self._calls_by_key.items()
        }

    @property
    def texts(self) -> dict[int, str]:
        """Each choice's text."""
        return {choice: "".join(parts) for choice, parts in self._texts.items()}
