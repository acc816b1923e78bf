"""``create_app()``: proxai as a plain ASGI app, for running it under hypercorn directly.

    PROXAI_CONFIG=proxai.toml hypercorn --worker-class trio 'proxai.asgi:create_app()'

``proxai serve`` is the supported way (it adds the drain on SIGTERM and worker
supervision); this is for setups that must own the hypercorn command line.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from typing import Any

from .config_file import load_config
from .service.app import ProxaiApp
from .service.asgi_io import ASGIReceive, ASGISend

__all__ = ["create_app"]

ASGIApp = Callable[[dict[str, Any], ASGIReceive, ASGISend], Awaitable[None]]


def create_app() -> ASGIApp:
    """The app for the config file named by ``$PROXAI_CONFIG`` (required).

    An ``async def``: hypercorn's command line tells an ASGI app from a WSGI one by
    whether it is a coroutine function, and :class:`ProxaiApp` returns its handlers'
    coroutines instead (``proxai serve`` tells hypercorn it is ASGI)."""
    path = os.environ.get("PROXAI_CONFIG")
    if not path:
        raise RuntimeError("set PROXAI_CONFIG to the path of proxai's TOML configuration")
    app = ProxaiApp(load_config(path))

    async def asgi(scope: dict[str, Any], receive: ASGIReceive, send: ASGISend) -> None:
        await app(scope, receive, send)

    return asgi
