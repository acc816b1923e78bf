"""Running ``proxai serve`` as a real process in a test, reading its log as it goes."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import attrs
import trio

WAIT = 20.0  # seconds any step of a process may take before the test fails


@attrs.define
class ServeProcess:
    process: trio.Process
    url: str = ""
    log: bytes = b""

    async def read_log_until(self, pattern: bytes) -> re.Match[bytes]:
        assert self.process.stderr is not None
        with trio.fail_after(WAIT):
            while not (match := re.search(pattern, self.log)):
                chunk = await self.process.stderr.receive_some()
                assert chunk, self.log.decode()
                self.log += chunk
        return match

    async def read_log_until_count(self, pattern: bytes, count: int) -> int:
        """Read the log until ``pattern`` occurs ``count`` times; how often it does."""
        assert self.process.stderr is not None
        with trio.fail_after(WAIT):
            while len(found := re.findall(pattern, self.log)) < count:
                chunk = await self.process.stderr.receive_some()
                assert chunk, self.log.decode()
                self.log += chunk
        return len(found)

    async def stop(self, signum: int = signal.SIGTERM) -> int:
        """Send ``signum`` and wait for the exit code, reading the log to the end."""
        self.process.send_signal(signum)
        assert self.process.stderr is not None
        with trio.fail_after(WAIT):
            while chunk := await self.process.stderr.receive_some():
                self.log += chunk
            return await self.process.wait()


@asynccontextmanager
async def serve_process(config: Path, *args: str) -> AsyncIterator[ServeProcess]:
    """``proxai serve --config config *args``, started and listening."""
    process = await trio.lowlevel.open_process(
        [sys.executable, "-m", "proxai", "serve", "--config", str(config), *args],
        stderr=subprocess.PIPE,
    )
    running = ServeProcess(process)
    try:
        match = await running.read_log_until(rb"listening on (https?://[^\s,]+)")
        running.url = match.group(1).decode()
        yield running
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
