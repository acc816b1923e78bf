"""Serving the ASGI app with hypercorn's trio worker, in one process or several.

Shutdown: on SIGINT/SIGTERM the app starts draining (``/readyz`` answers 503),
hypercorn stops accepting connections, in-flight streams get
``server.drain_timeout`` to finish, and the rest are ended with their
protocol's error (see :meth:`proxai.service.app.ProxaiApp.drain`). Hypercorn's own
graceful timeout is set just past that, as a backstop.
"""

from __future__ import annotations

import logging
import signal
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import ExitStack

import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.config import Sockets
from hypercorn.trio.run import worker_serve
from hypercorn.utils import wrap_app

from ..config import Config
from .app import OutcomeHook, ProxaiApp
from .gate import shutdown_budget

__all__ = ["hypercorn_config", "ignore_late_signals", "serve"]

log = logging.getLogger("proxai")

ShutdownTrigger = Callable[[], Awaitable[None]]


def hypercorn_config(config: Config) -> HypercornConfig:
    """Hypercorn settings derived from proxai's configuration."""
    server = config.server
    hc = HypercornConfig()
    host = server.host
    hc.bind = [f"[{host}]:{server.port}" if ":" in host else f"{host}:{server.port}"]
    # The upstream's Server header is relayed; proxai does not add its own.
    hc.include_server_header = False
    hc.accesslog = None
    hc.errorlog = logging.getLogger("hypercorn.error")
    hc.worker_class = "trio"
    hc.workers = server.workers
    hc.h11_max_incomplete_size = server.max_header_bytes
    hc.h2_max_header_list_size = server.max_header_bytes
    # proxai's drain ends every stream within the shutdown budget; this is a backstop.
    hc.graceful_timeout = shutdown_budget(server) + 1.0
    if server.certfile is not None:
        hc.certfile, hc.keyfile = server.certfile, server.keyfile
        if server.ca_certs is not None:
            hc.ca_certs = server.ca_certs
            hc.verify_mode = ssl.CERT_REQUIRED  # clients must present a certificate
    return hc


def ignore_late_signals() -> None:
    """Once the server has stopped, a signal must not turn a clean exit into a kill."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)


async def serve(
    config: Config,
    *,
    on_outcome: OutcomeHook | None = None,
    shutdown_trigger: ShutdownTrigger | None = None,
    handle_signals: bool = False,
    sockets: Sockets | None = None,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run proxai until ``shutdown_trigger`` returns (or forever), then drain.

    With ``handle_signals`` the first SIGINT/SIGTERM starts the drain too, and a
    second one ends it at once. ``task_status.started`` receives the bound URLs,
    e.g. ``["http://127.0.0.1:41234"]``, so ``await nursery.start(serve, config)``
    works with ``port = 0``. ``sockets`` are listening sockets shared by worker
    processes (see :mod:`proxai.service.workers`).
    """
    app = ProxaiApp(config, on_outcome=on_outcome)
    triggered = trio.Event()

    async def on_signals(signals: AsyncIterator[int]) -> None:
        async for signum in signals:
            if triggered.is_set():
                log.warning("%s again: ending open streams now", signal.Signals(signum).name)
                app.hurry()
            else:
                log.info("%s: draining", signal.Signals(signum).name)
                triggered.set()

    async def on_trigger() -> None:
        assert shutdown_trigger is not None
        await shutdown_trigger()
        triggered.set()

    async def trigger() -> None:
        await triggered.wait()
        app.begin_drain()  # the app's lifespan task runs the drain

    with ExitStack() as stack:
        # Held until serve returns, so that a signal during the last steps of the
        # shutdown is taken here rather than killing the process.
        signals = (
            stack.enter_context(trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM))
            if handle_signals
            else None
        )
        async with trio.open_nursery() as nursery:
            if signals is not None:
                nursery.start_soon(on_signals, signals)
            if shutdown_trigger is not None:
                nursery.start_soon(on_trigger)
            await worker_serve(
                wrap_app(app, 0, "asgi"),  # type: ignore[arg-type]
                hypercorn_config(config),
                sockets=sockets,
                shutdown_trigger=trigger,
                task_status=task_status,
            )
            nursery.cancel_scope.cancel()
