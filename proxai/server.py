"""Serving the ASGI app with hypercorn's trio worker."""

from __future__ import annotations

import logging
import signal

import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve as hypercorn_serve

from .app import OutcomeHook, ProxaiApp
from .config import Config

__all__ = ["hypercorn_config", "serve", "wait_for_signal"]


def hypercorn_config(config: Config) -> HypercornConfig:
    """Hypercorn settings derived from proxai's configuration."""
    hc = HypercornConfig()
    host = config.server.host
    hc.bind = [f"[{host}]:{config.server.port}" if ":" in host else f"{host}:{config.server.port}"]
    # The upstream's Server header is relayed; proxai does not add its own.
    hc.include_server_header = False
    hc.accesslog = None
    hc.errorlog = logging.getLogger("hypercorn.error")
    return hc


async def wait_for_signal() -> None:
    """Return on SIGINT or SIGTERM: hypercorn then shuts down gracefully."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for _ in signals:
            return


async def serve(
    config: Config,
    *,
    on_outcome: OutcomeHook | None = None,
    shutdown_trigger: object = None,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run proxai until ``shutdown_trigger`` returns (or forever).

    ``task_status.started`` receives the bound URLs, e.g. ``["http://127.0.0.1:41234"]``,
    so ``await nursery.start(serve, config)`` works with ``port = 0``.
    """
    app = ProxaiApp(config, on_outcome=on_outcome)
    await hypercorn_serve(
        app,  # type: ignore[arg-type]
        hypercorn_config(config),
        shutdown_trigger=shutdown_trigger,  # type: ignore[arg-type]
        task_status=task_status,
        mode="asgi",
    )
