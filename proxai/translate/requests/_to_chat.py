"""Writing a Chat Completions request, as both translators to Chat must (from Messages, from
Responses): where system prompts go, and a stream's usage."""

from __future__ import annotations

from typing import Any

from ._common import SECTIONS_JOINER

__all__ = ["SystemPrompts", "stream_with_usage"]

JSON = Any


class SystemPrompts:
    """Where the system prompts of a Chat request being written go.

    A prompt joins the leading system message while nothing else came yet (many Chat
    servers read only one system message, first); later, it is a message of its own. An
    empty one adds nothing. The leading message's prompts are joined once, by
    :meth:`finish`, so a request of many costs time linear in their length.
    """

    def __init__(self, messages: list[dict[str, JSON]]) -> None:
        self._messages = messages
        self._lead: list[str] | None = None  # the leading message's prompts, while it leads

    def add(self, text: str) -> None:
        if not text:
            return
        messages = self._messages
        if not messages:
            self._lead = [text]
            messages.append({"role": "system", "content": text})
        elif self._lead is not None and len(messages) == 1:
            self._lead.append(text)
        else:
            messages.append({"role": "system", "content": text})

    def finish(self) -> None:
        """The messages are complete: the leading system message gets its whole text."""
        if self._lead is not None and len(self._lead) > 1:
            self._messages[0]["content"] = SECTIONS_JOINER.join(self._lead)
        self._lead = None


def stream_with_usage(body: dict[str, JSON], out: dict[str, JSON]) -> None:
    """A streamed request asks for usage: the client's API reports it at the end, and a Chat
    stream brings it only when asked."""
    if body.get("stream"):
        out["stream"] = True
        out["stream_options"] = {"include_usage": True}
