"""The Chat Completions observer: the tracking observer over a :class:`~.reader.ChatReader`."""

from __future__ import annotations

from ...config import TimeoutsConfig
from ..tracking import StreamLimits, TrackingObserver
from .reader import ChatReader, synthesized_error

__all__ = ["ChatObserver", "synthesized_error"]


class ChatObserver(TrackingObserver):
    """Watches one Chat Completions stream (see :mod:`.reader`); adds views for tests."""

    __slots__ = ()

    reader: ChatReader

    def __init__(self, timeouts: TimeoutsConfig, limits: StreamLimits | None = None) -> None:
        super().__init__(timeouts, limits, reader=ChatReader)

    @property
    def tool_calls(self) -> dict[tuple[int, int | str], dict[str, str | None]]:
        """Each call's ``{id, name, arguments}`` by (choice index, tool call index)."""
        return {
            key: {"id": item.call_id, "name": item.name, "arguments": item.aggregate}
            for key, item in self.reader.calls.items()
        }

    @property
    def texts(self) -> dict[int, str]:
        """Each choice's text."""
        return {choice: text.value() for choice, text in self.reader.texts.items()}
