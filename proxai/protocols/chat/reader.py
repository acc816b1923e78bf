"""The Chat Completions reader: each ``chat.completion.chunk`` line parsed once.

Each ``data:`` line is a chunk (or ``[DONE]``). The reader reports to its observer

- tool calls per (choice index, ``tool_calls[].index``): the first fragment
  carries ``id``, ``type`` and ``function.name``, later ones only
  ``function.arguments``; a new index is a parallel call. A choice's latest call
  is guarded by ``tool_arguments``; a choice's ``finish_reason`` closes all of its
  calls (and its text). The legacy ``delta.function_call`` is one more call;
- the text of each choice, and each call's arguments, aggregated from the deltas;
- the terminal: ``data: [DONE]``, or the usage chunk (``choices: []``, the last one
  OpenAI sends before ``[DONE]``) once every choice seen has its ``finish_reason``:
  an upstream silent or gone after it has nothing left to say, so the client's body
  gets the ``[DONE]`` it was owed (after the after-terminal grace, or at the body's
  end) instead of an error chunk; a payload with an
  ``error`` member (with or without ``event: error``) is terminal too.

A stream proxai ends itself gets ``data: {"error": {...}}`` then
``data: [DONE]``: the official openai SDK raises ``APIError`` on the first.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from ...errors import ending_code
from ...outcome import OutcomeKind, Usage
from ...wire.json_values import count_or_none, field_of, str_or_none
from ...wire.sse import Frames, SSEFrame, sse_frame
from ..aggregate import Aggregate
from ..observer import UNREAD
from ..tracking import TrackedItem, TrackingObserver

__all__ = ["DONE_FRAME", "ChatReader", "synthesized_error"]

DONE = b"[DONE]"
DONE_LINE = b"data: [DONE]\n\n"
DONE_FRAME = SSEFrame(DONE_LINE, None, DONE)
#: Finish reasons that mean the answer was cut short.
_INCOMPLETE_REASONS = frozenset({"length", "content_filter"})

#: Choices tracked for the usage chunk's end; a stream with more ends only at [DONE].
_MAX_UNFINISHED = 1024

CallKey = tuple[int, int | str]


def synthesized_error(message: str, *, code: str = "server_error") -> Frames:
    """The error chunk and ``[DONE]`` proxai ends a broken Chat Completions stream with."""
    error = {"message": message, "type": "server_error", "param": None, "code": code}
    return [sse_frame(None, {"error": error}), DONE_FRAME]


def chat_usage(usage: Mapping[str, Any]) -> Usage:
    """Chat's ``usage`` (``prompt_tokens``, ``completion_tokens`` and their details) in
    proxai's one shape; OpenAI's other endpoints (embeddings, completions) report the same."""
    return Usage(
        input_tokens=count_or_none(usage.get("prompt_tokens")),
        cached_tokens=count_or_none(field_of(usage.get("prompt_tokens_details"), "cached_tokens")),
        output_tokens=count_or_none(usage.get("completion_tokens")),
        reasoning_tokens=count_or_none(
            field_of(usage.get("completion_tokens_details"), "reasoning_tokens")
        ),
        total_tokens=count_or_none(usage.get("total_tokens")),
    )


class ChatReader:
    """Reads one Chat Completions stream for its observer; see the module docstring."""

    __slots__ = (
        "_finished_any",
        "_guarded_call",
        "_incomplete",
        "_incomplete_unkept",
        "_open",
        "_open_of_choice",
        "_tracker",
        "_unfinished",
        "_unfinished_overflow",
        "_unkept",
        "calls",
        "texts",
    )  # one reader per stream: no instance dict

    def __init__(self, tracker: TrackingObserver) -> None:
        self._tracker = tracker
        self._open = tracker.open_by_key  # the items open now (the observer's)
        # Calls by (choice, tool call index): open ones, and closed ones while kept.
        self.calls: dict[CallKey, TrackedItem] = {}
        self._open_of_choice: dict[int, dict[CallKey, None]] = {}
        self._guarded_call: dict[int, CallKey] = {}  # per choice, at most one
        self.texts: dict[int, Aggregate] = {}
        self._incomplete: set[int] = set()  # choices whose last finish_reason cut them short
        self._incomplete_unkept = False  # one that could not be kept did (past max_kept)
        self._unfinished: set[int] = set()  # choices seen without their finish_reason
        self._finished_any = False
        self._unfinished_overflow = False
        #: Open calls whose record was not kept (past max_kept): forgotten once closed.
        self._unkept: set[CallKey] = set()

    def read(self, event: str | None, data: bytes) -> object:
        tracker = self._tracker
        if data[:1] != b"{" and data.strip() == DONE:
            self._finish(())
            return UNREAD
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError:
            chunk = None
        if event == "error" and not (isinstance(chunk, dict) and chunk.get("error")):
            # Groq and others name their in-band error: terminal whatever the data says.
            tracker.finish(OutcomeKind.FAILED, data.decode("utf-8", "replace")[:200])
            return chunk if isinstance(chunk, dict) else None
        if chunk is None:
            tracker.note("data is not JSON")
            return None
        if not isinstance(chunk, dict):
            tracker.note("data is not a JSON object")
            return None
        error = chunk.get("error")
        if error:
            message = error.get("message") if isinstance(error, dict) else None
            tracker.finish(OutcomeKind.FAILED, str(message or error))
            return chunk
        self.read_chunk(chunk)
        return chunk

    def read_chunk(self, chunk: dict[str, Any]) -> None:
        """A chunk's usage and choices (a decoder's whole body is read as one chunk)."""
        tracker = self._tracker
        if tracker.response_id is None:
            tracker.named(chunk.get("id"), chunk.get("model"))
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            tracker.usage = usage
        choices = chunk.get("choices")
        if not isinstance(choices, list):
            tracker.note("chunk without a choices array")
            return
        if not choices and isinstance(usage, dict) and self._finished_any and not self._unfinished:
            self._finish((DONE_FRAME,))  # owed if the upstream stops here
            return
        for position, choice in enumerate(choices):
            if isinstance(choice, dict):
                self._choice(choice, position)

    def _finish(self, closing: tuple[SSEFrame, ...]) -> None:
        incomplete = self._incomplete or self._incomplete_unkept
        kind = OutcomeKind.INCOMPLETE if incomplete else OutcomeKind.COMPLETED
        self._tracker.finish(kind, closing=closing)

    def _choice(self, choice: dict[str, Any], position: int) -> None:
        index = choice.get("index")
        if not isinstance(index, int):
            index = position
        delta = choice.get("delta")
        if isinstance(delta, dict):
            content = delta.get("content")
            if isinstance(content, str) and content:
                self._guard_only(index, None)  # the calls before this text are complete
                self._text(index, content)
            tool_calls = delta.get("tool_calls")
            if isinstance(tool_calls, list):
                for slot, call in enumerate(tool_calls):
                    if isinstance(call, dict):
                        call_index = call.get("index")
                        key = (index, call_index if isinstance(call_index, int) else slot)
                        self._call_fragment(key, call, call.get("function"))
            function_call = delta.get("function_call")
            if isinstance(function_call, dict):
                self._call_fragment((index, "function_call"), {}, function_call)
        finish_reason = choice.get("finish_reason")
        if not isinstance(finish_reason, str):
            if len(self._unfinished) < _MAX_UNFINISHED:
                self._unfinished.add(index)
            else:  # past the bound only [DONE] ends the stream
                self._finished_any = False
                self._unfinished_overflow = True
        else:
            self._unfinished.discard(index)
            self._finished_any = not self._unfinished_overflow
            self._tracker.stopped_because(finish_reason)
            if finish_reason not in _INCOMPLETE_REASONS:
                self._incomplete.discard(index)
            elif index in self._incomplete or self._tracker.keep_item():
                self._incomplete.add(index)
            else:
                self._incomplete_unkept = True
            for open_key in self._open_of_choice.pop(index, {}):
                self._close_call(open_key)

    # Open items by choice, so that a choice's finish_reason closes its own at once.

    def _open_item(self, item: TrackedItem) -> bool:
        key = item.key
        assert isinstance(key, tuple)
        if not self._tracker.open_item(item):
            return False
        self._open_of_choice.setdefault(key[0], {})[key] = None
        return True

    def _close_call(self, key: CallKey) -> None:
        """Close an open item of a choice (its text, or a call); a call's record goes
        unless it was kept when it opened (within max_kept)."""
        item = self._tracker.close_item(key)
        self._open_of_choice.get(key[0], {}).pop(key, None)
        if item is not None and key in self._unkept:
            self._unkept.discard(key)
            self.calls.pop(key, None)

    def _guard_only(self, choice: int, key: CallKey | None) -> None:
        """Guard call ``key`` and no other open call of ``choice``."""
        tracker = self._tracker
        previous = self._guarded_call.pop(choice, None)
        if previous is not None and previous != key:
            other = self._open.get(previous)
            if other is not None:
                tracker.guard(other, False)
        if key is None:
            return
        item = self._open.get(key)
        if item is not None:
            self._guarded_call[choice] = key
            tracker.guard(item)

    def _text(self, choice: int, content: str) -> None:
        tracker = self._tracker
        key = (choice, "text")
        if key not in self._open:
            item = TrackedItem(key, "text", f"choice {choice}", False, "text", tracker.now)
            if not self._open_item(item):
                return
        text = self.texts.get(choice)
        if text is None:
            if not tracker.keep_item():
                return
            text = self.texts[choice] = Aggregate()
        tracker.grow(text, content)

    def _call_fragment(self, key: CallKey, call: dict[str, Any], function: Any) -> None:
        tracker = self._tracker
        function = function if isinstance(function, dict) else {}
        item = self.calls.get(key)
        call_id = str_or_none(call.get("id"))
        carried: object = None
        if item is not None and call_id and item.call_id and call_id != item.call_id:
            # Some servers reuse an index for the next call; a new id means a new call.
            # A translator's state of the index goes on: its decoder has its own rules
            # for when a call is new (and must close the one before).
            self._close_call(key)
            carried, item = item.translation, None
        if item is None:
            name = str_or_none(function.get("name"))
            label = (
                "tool call" + (f" {name}" if name else "") + (f" ({call_id})" if call_id else "")
            )
            item = TrackedItem(
                key, "tool_call", label, True, "arguments", tracker.now, name, call_id
            )
            item.translation = carried
            if not self._open_item(item):
                return
            self.calls[key] = item  # while open, whatever was kept: the decoder reads it
            # Counted as it opens, as the other APIs' items are: a stream's calls open
            # together and close together, and a translated one holds them from the start.
            if not tracker.keep_item():
                self._unkept.add(key)
        elif key not in self._open:
            tracker.note(f"a fragment for {item.label} after its choice finished")
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
            tracker.progress(item, arguments)

    def usage_of(self, usage: Mapping[str, Any]) -> Usage:
        return chat_usage(usage)

    def closing(self, kind: OutcomeKind, message: str) -> Frames:
        return synthesized_error(message, code=ending_code(kind))
