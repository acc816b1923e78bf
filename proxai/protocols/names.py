"""The names of the APIs proxai speaks, apart from everything that speaks them."""

from __future__ import annotations

import enum

__all__ = ["WireApi"]


class WireApi(enum.StrEnum):
    """An API as spoken on the wire, by a client or by an upstream."""

    RESPONSES = "responses"
    CHAT = "chat"
    MESSAGES = "messages"
