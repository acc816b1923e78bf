"""Test helpers for proxai and for code that runs behind it (like ``trio.testing``).

:class:`ScriptedUpstream` is a real HTTP server on loopback that plays
:class:`Script` s, :class:`ScriptedSocketUpstream` a Responses WebSocket server that
plays :class:`SocketScript` s; :func:`open_proxai` runs a proxai server in a nursery;
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
from .ws_upstream import (
    Binary,
    CloseFrame,
    Ping,
    RecordedFrame,
    RecordedSocket,
    Refuse,
    ScriptedSocketUpstream,
    SocketScript,
    socket_frame,
)

__all__ = [
    "Binary",
    "Close",
    "CloseFrame",
    "Ping",
    "RecordedFrame",
    "RecordedRequest",
    "RecordedSocket",
    "Refuse",
    "Reset",
    "Script",
    "ScriptedSocketUpstream",
    "ScriptedUpstream",
    "Send",
    "Sleep",
    "SocketScript",
    "Stall",
    "chat_chunk",
    "open_proxai",
    "socket_frame",
    "sse_event",
]
