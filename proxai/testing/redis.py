"""A real ``redis-server`` for tests: on loopback, on a free port, stopped on exit.

No fake Redis stands in for it: the Redis backend is tested against the server it will
run against (Debian's ``redis-server``; ``make redis`` installs it). Redis takes no
port 0 for TCP, so the port is one the OS just handed out (bound, then released) and
a start that loses the port to another process tries another. The server keeps
nothing on disk. :meth:`RunningRedis.stop` and :meth:`RunningRedis.start` take it down
and bring it back on the same port, :meth:`RunningRedis.freeze` makes it a Redis that
accepts connections but never answers (``SIGSTOP``).
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio
import trio.lowlevel

__all__ = ["REDIS_SERVER", "RunningRedis", "open_redis"]

#: The ``redis-server`` on ``PATH``, or ``None``: tests that need it skip without it.
REDIS_SERVER = shutil.which("redis-server")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class RunningRedis:
    """One ``redis-server`` process on ``127.0.0.1:port`` (see the module's docstring)."""

    def __init__(self, directory: str, options: tuple[str, ...] = ()) -> None:
        self.port = 0
        self._directory = directory
        self._options = options
        self._process: trio.Process | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    async def start(self) -> None:
        """Start the server (on its port, once it has one) and wait until it answers."""
        assert REDIS_SERVER is not None, "redis-server is not installed (make redis)"
        for _ in range(5):
            port = self.port or _free_port()
            process = await trio.lowlevel.open_process(
                [
                    *(REDIS_SERVER, "--port", str(port), "--bind", "127.0.0.1"),
                    *("--save", "", "--appendonly", "no", "--dir", self._directory),
                    *("--protected-mode", "no", "--loglevel", "warning"),
                    *self._options,
                ],
                stdout=subprocess.DEVNULL,
            )
            if await self._answers(port, process):
                self.port, self._process = port, process
                return
            await self._end(process)
        raise RuntimeError("redis-server did not start")

    async def stop(self) -> None:
        """Stop the server; its port stays this one's for :meth:`start`."""
        if self._process is not None:
            process, self._process = self._process, None
            await self._end(process)

    def freeze(self) -> None:
        """Stop the process in its tracks: connections open, nothing answered."""
        assert self._process is not None
        self._process.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        assert self._process is not None
        self._process.send_signal(signal.SIGCONT)

    @staticmethod
    async def _end(process: trio.Process) -> None:
        process.send_signal(signal.SIGCONT)  # a frozen process handles no SIGTERM
        process.terminate()
        with trio.move_on_after(5):
            await process.wait()
            return
        process.kill()
        await process.wait()

    @staticmethod
    async def _answers(port: int, process: trio.Process) -> bool:
        """Whether the server on ``port`` answers ``PING`` before ``process`` exits."""
        with trio.move_on_after(10):
            while process.poll() is None:
                try:
                    stream = await trio.open_tcp_stream("127.0.0.1", port)
                except OSError:
                    await trio.sleep(0.01)
                    continue
                async with stream:
                    await stream.send_all(b"PING\r\n")
                    reply = await stream.receive_some(64)
                if reply.startswith((b"+PONG", b"-NOAUTH")):
                    await trio.lowlevel.checkpoint()
                    return process.poll() is None  # not another server on the port
                await trio.sleep(0.01)  # -LOADING: not ready yet
        return False


@asynccontextmanager
async def open_redis(*options: str) -> AsyncIterator[RunningRedis]:
    """A started :class:`RunningRedis` (``options`` go to ``redis-server``, e.g.
    ``"--requirepass", "pw"``), stopped and its folder removed on exit."""
    with tempfile.TemporaryDirectory(prefix="proxai-redis-") as directory:
        redis = RunningRedis(directory, options)
        await redis.start()
        try:
            yield redis
        finally:
            with trio.CancelScope(shield=True):
                await redis.stop()
