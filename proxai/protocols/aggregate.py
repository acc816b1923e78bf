"""Text a stream spells delta by delta (a call's arguments, a message's text), joined as
it grows.

A stream's deltas are a few characters each; kept one ``str`` apiece they cost some 60
bytes each beside their text, and joined by ``+=`` they cost time quadratic in their
number. An :class:`Aggregate` joins them in batches as they come (each character is
copied about twice, and a kept delta costs about one byte beside its text), knows its
length without joining, and compares by length first: an upstream that repeats a short
``.done`` after every delta cannot make each comparison join everything so far.
"""

from __future__ import annotations

__all__ = ["Aggregate"]

#: Deltas held apart before they are joined into one piece.
_BATCH = 64


class Aggregate:
    """Text spelled by deltas; see the module docstring."""

    __slots__ = ("_pending", "_pieces", "length", "partial")

    def __init__(self, text: str = "") -> None:
        self._pieces: list[str] = [text] if text else []
        self._pending: list[str] = []
        #: Characters the deltas spelled, kept or not.
        self.length = len(text)
        #: Some deltas were counted but not kept (:meth:`skip`): the text is not whole.
        self.partial = False

    def append(self, text: str) -> None:
        self.length += len(text)
        pending = self._pending
        pending.append(text)
        if len(pending) >= _BATCH:
            self._pieces.append("".join(pending))
            pending.clear()

    def skip(self, text: str) -> None:
        """Count ``text`` without keeping it (a stream past what proxai keeps of it)."""
        self.length += len(text)
        self.partial = True

    def value(self) -> str:
        """The text kept so far (joined once, then kept joined)."""
        if self._pending:
            self._pieces.append("".join(self._pending))
            self._pending.clear()
        if len(self._pieces) > 1:
            self._pieces[:] = ["".join(self._pieces)]
        return self._pieces[0] if self._pieces else ""

    def matches(self, text: str) -> bool:
        """Whether the deltas spelled exactly ``text``."""
        return len(text) == self.length and self.value() == text

    def begins(self, text: str) -> bool:
        """Whether ``text`` starts with what the deltas spelled."""
        return len(text) >= self.length and text.startswith(self.value())
