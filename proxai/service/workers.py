"""``proxai serve --workers N``: N processes serving one listening socket.

The parent binds the socket (:func:`proxai.service.server.bind_sockets`), starts
N worker processes (spawned, as hypercorn's own multi-process mode does) that
each run :func:`proxai.service.server.serve` on it, and the kernel spreads connections
among them. On SIGINT/SIGTERM the parent closes its end of each worker's pipe;
each worker then drains like a single process would, and the parent waits for
them. A worker whose parent dies sees the same end of its pipe and stops too. A worker
that dies on its own is replaced. Workers share nothing a client could notice:
each has its own connection pools and its own ``server.max_concurrent_streams`` count.
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.connection
import os
import shutil
import signal
import socket
import tempfile
import time
from functools import partial
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess

import trio
from hypercorn.config import Sockets
from prometheus_client import multiprocess as prometheus_multiprocess

from ..config import Config
from ..ops.metrics import MULTIPROCESS_ENV
from ..ops.request_log import configure as configure_logging
from .gate import shutdown_budget
from .server import bind_sockets, hypercorn_config, ignore_late_signals, serve

__all__ = ["run_workers"]

log = logging.getLogger("proxai")
_POLL = 0.1  # seconds between the parent's looks at its workers
_RESTART_BACKOFF = 1.0  # seconds before trying again to start a worker that failed to start


def _worker_main(
    config: Config, sockets: Sockets, parent: Connection, log_level: str | None
) -> None:
    configure_logging(config.logging, log_level)

    async def parent_gone() -> None:
        """The parent closed its end of our pipe (to stop us, or because it died)."""
        await trio.lowlevel.wait_readable(parent.fileno())

    trio.run(
        partial(
            serve,
            config,
            shutdown_trigger=parent_gone,
            handle_signals=True,  # a process group or cgroup gets SIGTERM all at once
            sockets=sockets,
        )
    )
    ignore_late_signals()


def _url(scheme: str, sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"


def run_workers(config: Config, log_level: str | None = None) -> int:
    """Serve with ``config.server.workers`` processes until SIGINT/SIGTERM; the exit code."""
    sockets = bind_sockets(config, hypercorn_config(config))
    ctx = multiprocessing.get_context("spawn")
    processes: dict[BaseProcess, Connection] = {}  # each worker and our end of its pipe
    stopping = False

    def start() -> None:
        theirs, ours = ctx.Pipe(duplex=False)
        process = ctx.Process(
            target=_worker_main, args=(config, sockets, theirs, log_level), name="proxai-worker"
        )
        process.start()
        theirs.close()  # the worker holds its own copy
        processes[process] = ours

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stopping
        if stopping:  # a second signal: the workers end their drain at once
            for process in processes:
                if process.pid is not None and process.exitcode is None:
                    os.kill(process.pid, signal.SIGINT)
        stopping = True

    # Installed for the rest of the process: a late signal must not kill a clean exit.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, on_signal)
    # Metrics: each worker counts into files here; /metrics on any of them sums them all.
    metrics_dir = tempfile.mkdtemp(prefix="proxai-metrics-")
    os.environ[MULTIPROCESS_ENV] = metrics_dir  # inherited by the spawned workers
    try:
        for _ in range(config.server.workers):
            start()
        urls = [_url("http", s) for s in sockets.insecure_sockets]
        urls += [_url("https", s) for s in sockets.secure_sockets]
        log.info("proxai listening on %s, %d workers", ", ".join(urls), config.server.workers)
        missing = 0  # workers that died and could not be replaced yet
        retry_at = 0.0
        while not stopping:
            sentinels = [p.sentinel for p in processes]
            if sentinels:
                multiprocessing.connection.wait(sentinels, timeout=_POLL)
            else:
                time.sleep(_POLL)
            for process in [p for p in processes if p.exitcode is not None]:
                processes.pop(process).close()
                if process.pid is not None:
                    try:
                        prometheus_multiprocess.mark_process_dead(process.pid)  # type: ignore[no-untyped-call]
                    except OSError:
                        log.exception("could not clear the metrics of worker %s", process.pid)
                if not stopping:
                    log.error(
                        "worker %s exited with %s; starting another", process.pid, process.exitcode
                    )
                    missing += 1
            # A worker that cannot be started now (out of memory, of processes) is
            # retried every _RESTART_BACKOFF seconds: the others serve on meanwhile.
            while missing and not stopping and time.monotonic() >= retry_at:
                try:
                    start()
                except Exception:
                    log.exception("could not start a worker; retrying in %.0f s", _RESTART_BACKOFF)
                    retry_at = time.monotonic() + _RESTART_BACKOFF
                else:
                    missing -= 1
        for pipe in processes.values():
            pipe.close()  # each worker sees EOF and drains
        # The workers drain within the budget; a spawned process then needs a moment to exit.
        deadline = time.monotonic() + shutdown_budget(config.server) + 5.0
        for process in processes:
            process.join(max(0.0, deadline - time.monotonic()))
        stuck = [p for p in processes if p.exitcode is None]
        for process in stuck:
            log.error("worker %s did not stop in time; terminating it", process.pid)
            process.terminate()
            process.join()
        log.info("proxai stopped")
        return 1 if stuck or any(p.exitcode for p in processes) else 0
    finally:
        for sock in sockets.secure_sockets + sockets.insecure_sockets:
            sock.close()
        shutil.rmtree(metrics_dir, ignore_errors=True)
