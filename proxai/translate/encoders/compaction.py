"""A compaction answered from a summary an upstream that does not compact wrote.

The summarizing request (:func:`~proxai.protocols.responses.compaction.summarizing_request`)
goes upstream translated like any other; its answer comes back through the upstream
API's decoder as usual, and this encoder writes it for the client as the compaction it
asked for: the summary's text is gathered (reasoning and anything else left out), and
once the upstream finished, one ``compaction`` item carries it in proxai's envelope. A
``compaction_trigger`` request gets a Responses stream (or body) whose output is that
one item, as Codex requires; ``POST /v1/responses/compact`` gets the
``response.compaction`` object, the client's user messages then the item. A stall or a
failure before the end is the Responses error as for any stream: no item is made from a
summary cut off.
"""

from __future__ import annotations

from typing import Any

import orjson

from ...protocols.aggregate import Aggregate
from ...protocols.responses.compaction import CompactionAnswer, CompactionForm, Summary, seal
from ...wire.sse import Frames
from ..ir import Finished, ItemDelta, ItemDone, ItemKind, ItemStarted, TranslationContext
from .responses import ResponsesEncoder

__all__ = ["CompactionEncoder", "EmptySummary"]


class EmptySummary(Exception):
    """The upstream finished without writing a summary (the translation fails)."""


class CompactionEncoder(ResponsesEncoder):
    """A compaction's stream or body from the events of the summarizing response."""

    def __init__(self, ctx: TranslationContext, answer: CompactionAnswer) -> None:
        super().__init__(ctx)
        self._answer = answer
        self._texts: dict[int, Aggregate] = {}  # the text items, by the decoder's key
        self._item: dict[str, Any] | None = None

    def _item_started(self, event: ItemStarted) -> Frames:
        if event.kind is ItemKind.TEXT and event.key not in self._texts:
            self._texts[event.key] = Aggregate()
        return []

    def _item_delta(self, event: ItemDelta) -> Frames:
        text = self._texts.get(event.key)
        if text is not None and event.text:
            text.append(event.text)
        return []

    def _item_done(self, event: ItemDone) -> Frames:
        return []

    def _finish(self, event: Finished) -> Frames:
        """The compaction item, then ``response.completed`` (a summary cut short by the
        output limit still completes: it is the summary there is)."""
        summary = "\n\n".join(t.value() for t in self._texts.values() if t.value().strip())
        if not summary:
            raise EmptySummary("the upstream's model wrote no summary of the conversation")
        self._item = {
            "id": self._ctx.new_id("cmp_"),
            "type": "compaction",
            "encrypted_content": seal(Summary(summary.strip(), self._model, self._ctx.now())),
        }
        where = {"output_index": 0, "item": self._item}
        out = self._emit("response.output_item.added", where)
        out += self._emit("response.output_item.done", where)
        self._status = "completed"
        self._finished = True
        return out + self._emit("response.completed", {"response": self._response(full=True)})

    def _response(self, *, full: bool) -> dict[str, Any]:
        response = super()._response(full=full)
        if full and self._item is not None:
            response["output"] = [self._item]
        return response

    def body(self) -> bytes:
        """The whole answer: the response (a trigger), or the ``response.compaction``
        object (the compact endpoint)."""
        if self._answer.form is CompactionForm.TRIGGER or self._item is None:
            return super().body()
        compacted = {
            "id": self._id,
            "object": "response.compaction",
            "created_at": self._created,
            "output": [*(orjson.Fragment(m) for m in self._answer.user_messages), self._item],
            "usage": self._usage_json(),
        }
        return orjson.dumps(compacted)
