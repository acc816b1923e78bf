"""Upstream APIs' streams and bodies, as neutral events (one module per API)."""

from .chat import ChatDecoder
from .messages import MessagesDecoder
from .responses import ResponsesDecoder

__all__ = ["ChatDecoder", "MessagesDecoder", "ResponsesDecoder"]
