"""Upstream APIs' streams and bodies, as neutral events (one module per API).

Every decoder is built with no arguments, one per response; :mod:`._base` says
what shape of event stream all three promise.
"""

from __future__ import annotations

from ...protocols.names import WireApi
from ..ir import Decoder
from .chat import ChatDecoder
from .messages import MessagesDecoder
from .responses import ResponsesDecoder

__all__ = ["ChatDecoder", "MessagesDecoder", "ResponsesDecoder", "decoder_for"]

_DECODERS: dict[WireApi, type[Decoder]] = {
    WireApi.CHAT: ChatDecoder,
    WireApi.RESPONSES: ResponsesDecoder,
    WireApi.MESSAGES: MessagesDecoder,
}


def decoder_for(upstream: WireApi) -> Decoder:
    """A fresh decoder for one response of an ``upstream`` speaking that API."""
    return _DECODERS[upstream]()
