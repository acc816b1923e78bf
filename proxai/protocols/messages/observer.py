"""The Messages observer: the tracking observer over a :class:`~.reader.MessagesReader`."""

from __future__ import annotations

from ...config import TimeoutsConfig
from ..tracking import StreamLimits, TrackingObserver
from .reader import MAX_USAGE_KEYS, MessagesReader, synthesized_error

__all__ = ["MAX_USAGE_KEYS", "MessagesObserver", "synthesized_error"]


class MessagesObserver(TrackingObserver):
    """Watches one Anthropic Messages stream (see :mod:`.reader`); adds a view for tests."""

    __slots__ = ()

    reader: MessagesReader

    def __init__(self, timeouts: TimeoutsConfig, limits: StreamLimits | None = None) -> None:
        super().__init__(timeouts, limits, reader=MessagesReader)

    @property
    def blocks(self) -> dict[int, dict[str, str | None]]:
        """Each block's ``{type, name, id, text}`` (text: the aggregated deltas)."""
        return {
            index: {
                "type": item.type,
                "name": item.name,
                "id": item.call_id,
                "text": item.aggregate,
            }
            for index, item in sorted(self.reader.blocks.items())
        }
