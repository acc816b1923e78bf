"""Serving the ASGI app with hypercorn's trio worker, in one process or several.

Shutdown: on SIGINT/SIGTERM the app starts draining (``/readyz`` answers 503),
hypercorn stops accepting connections, in-flight streams get
``server.drain_timeout`` to finish, and the rest are ended with their
protocol's error (see :meth:`proxai.service.app.ProxaiApp.drain`). Hypercorn's own
graceful timeout is set just past that, as a backstop.
"""

from __future__ import annotations

import logging
import math
import signal
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import ExitStack

import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.config import Sockets
from hypercorn.trio.run import worker_serve
from hypercorn.utils import wrap_app

from ..config import Config
from ..ops.capture import CaptureHook
from . import ws_deflate
from .app import OutcomeHook, ProxaiApp
from .gate import shutdown_budget

__all__ = [
    "bind_sockets",
    "drop_stalled_clients",
    "hypercorn_config",
    "ignore_late_signals",
    "serve",
]

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
    # A client WebSocket's message is a request body: the same bound, after inflation
    # for a permessage-deflate socket (ws_deflate), and 1009 over it.
    hc.websocket_max_message_size = server.max_request_body_bytes
    ws_deflate.install(server.max_request_body_bytes)
    # proxai's drain ends every stream within the shutdown budget; this is a backstop.
    hc.graceful_timeout = shutdown_budget(server) + 1.0
    # Hypercorn's default listen backlog (100) drops the SYNs of a burst of new
    # connections past it, and each of those clients waits 1 s (then 3 s) to retry: take
    # as many as the kernel allows (net.core.somaxconn caps it), as trio's listeners do.
    hc.backlog = socket.SOMAXCONN
    if server.certfile is not None:
        hc.certfile, hc.keyfile = server.certfile, server.keyfile
        if server.ca_certs is not None:
            hc.ca_certs = server.ca_certs
            hc.verify_mode = ssl.CERT_REQUIRED  # clients must present a certificate
    return hc


#: The largest TCP_USER_TIMEOUT the kernel takes (an int, in milliseconds).
_MAX_USER_TIMEOUT_MS = 2**31 - 1


def drop_stalled_clients(sock: socket.socket, seconds: float) -> bool:
    """Have the kernel close every connection accepted on ``sock`` whose client
    acknowledges no byte sent to it for ``seconds``; whether it could.

    Hypercorn shields its socket writes from cancellation, so a client that stops
    reading (a zero receive window) would keep its request's slot and tasks for as
    long as it stays connected. ``TCP_USER_TIMEOUT`` (Linux) bounds how long sent data
    may stay unacknowledged, zero-window probes included; accepted sockets inherit it
    from the listening one. The write then fails, hypercorn reports the disconnect and
    the request ends. It changes nothing for idle keep-alive connections (nothing is
    unacknowledged on them), nor for clients that read however slowly.
    """
    if not hasattr(socket, "TCP_USER_TIMEOUT") or sock.family not in (
        socket.AF_INET,
        socket.AF_INET6,
    ):
        return False
    milliseconds = min(_MAX_USER_TIMEOUT_MS, max(1, math.ceil(seconds * 1000)))
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, milliseconds)
    except OSError:
        return False
    return True


def bind_sockets(config: Config, hc: HypercornConfig) -> Sockets:
    """proxai's listening sockets, bound and listening, each set to drop a client that
    accepts nothing for ``timeouts.client_write`` (:func:`drop_stalled_clients`)."""
    sockets = hc.create_sockets()
    for sock in sockets.secure_sockets + sockets.insecure_sockets:
        if not drop_stalled_clients(sock, config.timeouts.client_write):
            log.info(
                "TCP_USER_TIMEOUT is not available here: a client that stops reading "
                "keeps its connection and its slot until it leaves (the upstream is "
                "still released after timeouts.client_write)"
            )
        # Listening from the start: connections made while proxai is still starting
        # wait in the backlog instead of being refused.
        sock.listen(hc.backlog)
    return sockets


def ignore_late_signals() -> None:
    """Once the server has stopped, a signal must not turn a clean exit into a kill."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)


async def serve(
    config: Config,
    *,
    on_outcome: OutcomeHook | None = None,
    on_capture_saved: CaptureHook | None = None,
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
    processes (see :mod:`proxai.service.workers`); without them, :func:`bind_sockets`
    makes them. ``on_outcome`` and ``on_capture_saved`` are :class:`ProxaiApp`'s hooks.
    """
    hc = hypercorn_config(config)
    app = ProxaiApp(config, on_outcome=on_outcome, on_capture_saved=on_capture_saved)
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
        try:
            await shutdown_trigger()
        except Exception:
            # A trigger that fails must not stop the serving: signals still stop it.
            log.exception("the shutdown trigger failed; serving on (SIGTERM still stops)")
            return
        triggered.set()

    async def trigger() -> None:
        await triggered.wait()
        app.begin_drain()  # the app's lifespan task runs the drain

    with ExitStack() as stack:
        if sockets is None:
            sockets = bind_sockets(config, hc)
            for sock in sockets.secure_sockets + sockets.insecure_sockets:
                stack.callback(sock.close)  # hypercorn closes them too; this covers a failed start
        # Held until serve returns, so that a signal during the last steps of the
        # shutdown is taken here rather than killing the process. The receiver puts back
        # the handlers it found when it closes: ignoring first means a signal between
        # serve's return and the process's exit is ignored too, not a kill.
        signals = None
        if handle_signals:
            ignore_late_signals()
            signals = stack.enter_context(trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM))
        async with trio.open_nursery() as nursery:
            if signals is not None:
                nursery.start_soon(on_signals, signals)
            if shutdown_trigger is not None:
                nursery.start_soon(on_trigger)
            await worker_serve(
                wrap_app(app, 0, "asgi"),  # type: ignore[arg-type]
                hc,
                sockets=sockets,
                shutdown_trigger=trigger,
                task_status=task_status,
            )
            nursery.cancel_scope.cancel()
