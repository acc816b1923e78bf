"""The Responses observer: the tracking observer over a :class:`~.reader.ResponsesReader`.

Times are on the relay's *upstream clock*, which only runs while proxai waits
for the upstream: a client that reads slowly never makes the upstream look
silent. ``total`` is a wall-clock limit and lives in the relay.
"""

from __future__ import annotations

import functools
from collections.abc import Hashable

from ...config import TimeoutsConfig
from ..tracking import StreamLimits, TrackingObserver
from .reader import GUARDED_ITEM_TYPES, ResponsesReader, synthesized_error

__all__ = ["GUARDED_ITEM_TYPES", "ResponsesObserver", "synthesized_error"]


class ResponsesObserver(TrackingObserver):
    """Watches one Responses stream (see :mod:`.reader`); adds views for tests."""

    __slots__ = ()

    reader: ResponsesReader

    def __init__(
        self,
        timeouts: TimeoutsConfig,
        *,
        model: str | None = None,
        limits: StreamLimits | None = None,
    ) -> None:
        """``model``, the one the client asked for, names it in a synthesized failure
        when the upstream sent no snapshot of its own."""
        super().__init__(timeouts, limits, reader=functools.partial(ResponsesReader, model=model))

    @property
    def function_calls(self) -> dict[Hashable, dict[str, str | None]]:
        """The seed's ``function_calls[item] = {call_id, name, arguments}``, by output_index."""
        return {
            index: {"call_id": item.call_id, "name": item.name, "arguments": item.aggregate}
            for index, item in self.reader.items.items()
            if item.type == "function_call"
        }

    @property
    def texts(self) -> dict[tuple[Hashable, int], str]:
        """The seed's ``text[(output_index, content_index)]``."""
        return {key: text.value() for key, text in self.reader.texts.items()}
