"""Client APIs' streams and bodies, from neutral events (one module per API)."""

from __future__ import annotations

from ...protocols.names import WireApi
from ..ir import Encoder, TranslationContext
from .chat import ChatEncoder
from .messages import MessagesEncoder
from .responses import ResponsesEncoder

__all__ = ["ChatEncoder", "MessagesEncoder", "ResponsesEncoder", "encoder_for"]

_ENCODERS: dict[WireApi, type[ChatEncoder | MessagesEncoder | ResponsesEncoder]] = {
    WireApi.CHAT: ChatEncoder,
    WireApi.RESPONSES: ResponsesEncoder,
    WireApi.MESSAGES: MessagesEncoder,
}


def encoder_for(client: WireApi, context: TranslationContext) -> Encoder:
    """A fresh encoder for one response to a ``client`` of that API."""
    return _ENCODERS[client](context)
