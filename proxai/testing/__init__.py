"""Test helpers for proxai and for code that runs behind it (like ``trio.testing``).

:class:`ScriptedUpstream` is a real HTTP server on loopback that plays
:class:`Script` s; :func:`open_proxai` runs a proxai server in a nursery;
:mod:`proxai.testing.seed` holds the seed document's two Responses turns.
"""

from .server import open_proxai
from .upstream import (
    Close,
    RecordedRequest,
    Reset,
    Script,
    ScriptedUpstream,
    Send,
    Sleep,
    Stall,
    chat_chunk,
    sse_event,
)

__all__ = [
    "Close",
    "RecordedRequest",
    "Reset",
    "Script",
    "ScriptedUpstream",
    "Send",
    "Sleep",
    "Stall",
    "chat_chunk",
    "open_proxai",
    "sse_event",
]
