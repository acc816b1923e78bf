"""Client requests as another API's requests (one module per pair, via Chat where composed).

:func:`translate_request` is the entry: it picks the pair's translator from
:data:`TRANSLATORS` and builds the :class:`~proxai.translate.ir.TranslationContext`
the response's decoder and encoder read. Four pairs are written out
(Responses⇄Chat, Messages⇄Chat); Responses→Messages and Messages→Responses go
through Chat, so each API's quirks live in one place. A request that cannot be
translated raises :class:`~proxai.errors.ProxyError` (400
``invalid_request_error`` naming the ``param``); the caller picks its shape.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import orjson

from ...config import TranslationOptions
from ...errors import ProxyError
from ...protocols.messages.count_tokens import count_tokens_body, estimate_input_tokens
from ...protocols.names import WireApi
from ...wire.json_body import too_deep
from ..ir import Clock, IdSource, TranslationContext, random_token
from .chat_to_messages import chat_to_messages
from .chat_to_responses import chat_to_responses
from .errors import translate_error_body
from .messages_to_chat import messages_to_chat
from .responses_to_chat import responses_to_chat

__all__ = [
    "TRANSLATORS",
    "Translator",
    "count_tokens_body",
    "estimate_input_tokens",
    "translate_error_body",
    "translate_request",
]

JSON = Any

#: A request body in, the upstream's body out; fills the context as it learns.
Translator = Callable[[dict[str, JSON], TranslationOptions, TranslationContext], dict[str, JSON]]


def _via_chat(first: Translator, second: Translator) -> Translator:
    def translate(
        body: dict[str, JSON], options: TranslationOptions, ctx: TranslationContext
    ) -> dict[str, JSON]:
        return second(first(body, options, ctx), options, ctx)

    translate.__doc__ = f"{first.__name__}, then {second.__name__}."
    return translate


#: (client API, upstream API) -> its translator.
TRANSLATORS: dict[tuple[WireApi, WireApi], Translator] = {
    (WireApi.RESPONSES, WireApi.CHAT): responses_to_chat,
    (WireApi.MESSAGES, WireApi.CHAT): messages_to_chat,
    (WireApi.CHAT, WireApi.RESPONSES): chat_to_responses,
    (WireApi.CHAT, WireApi.MESSAGES): chat_to_messages,
    (WireApi.RESPONSES, WireApi.MESSAGES): _via_chat(responses_to_chat, chat_to_messages),
    (WireApi.MESSAGES, WireApi.RESPONSES): _via_chat(messages_to_chat, chat_to_responses),
}


def translate_request(
    client: WireApi,
    upstream: WireApi,
    body: dict[str, JSON],
    options: TranslationOptions,
    *,
    clock: Clock = time.time,
    ids: IdSource = random_token,
) -> tuple[dict[str, JSON], TranslationContext]:
    """``body``, a ``client`` API request, as an ``upstream`` API request, and what the
    response's translators need to know about it (``clock`` and ``ids`` included: the
    response's encoder reads the time and makes up ids from them). ``body`` is not
    modified."""
    translator = TRANSLATORS.get((client, upstream))
    if translator is None:
        raise ProxyError(
            500, f"proxai cannot translate {client} requests to {upstream}", "server_error"
        )
    model = body.get("model")
    stream = bool(body.get("stream"))
    # Read here, from the client's own body: a composed pair's second half sees the first
    # half's request, which asks for usage whatever the client asked.
    stream_options = body.get("stream_options")
    ctx = TranslationContext(
        client=client,
        upstream=upstream,
        stream=stream,
        model=model if isinstance(model, str) else None,
        include_usage=(
            stream
            and isinstance(stream_options, dict)
            and bool(stream_options.get("include_usage"))
        ),
        clock=clock,
        ids=ids,
    )
    try:
        translated = translator(body, options, ctx)
        if ctx.echo:
            # The response objects echo these fields a level down: they must be writable.
            orjson.dumps([ctx.echo])
    except orjson.JSONEncodeError:
        # A part re-encoded on the way (a tool call's input as its arguments, the echoed
        # fields) nests deeper than orjson writes: the client's doing, in its terms.
        raise too_deep(body) from None
    ctx.translated()
    return translated, ctx
