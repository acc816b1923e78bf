"""``create_app()``: proxai as a plain ASGI app, for running it under hypercorn directly.

    PROXAI_CONFIG=proxai.toml hypercorn --worker-class trio 'proxai.asgi:create_app()'

``proxai serve`` is the supported way (it adds the drain on SIGTERM and worker
supervision); this is for setups that must own the hypercorn command line.
"""

from __future__ import annotations

import os

from .config_file import load_config
from .service.app import ProxaiApp

__all__ = ["create_app"]


def create_app() -> ProxaiApp:
    """The app for the config file named by ``$PROXAI_CONFIG`` (required)."""
    path = os.environ.get("PROXAI_CONFIG")
    if not path:
        raise RuntimeError("set PROXAI_CONFIG to the path of proxai's TOML configuration")
    return ProxaiApp(load_config(path))
