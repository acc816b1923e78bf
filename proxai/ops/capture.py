"""Captures: the raw bytes of each request, for reproducing an upstream bug.

When ``[capture] enabled``, each request gets a folder ``<dir>/<UTC time>-<request id>/``
(the time to the microsecond, so names sort in the order requests ended):

- ``request.http``: the request as proxai received it (request line, headers,
  body), the values of credential-looking headers and query parameters redacted;
- ``upstream.bin``: the upstream's response (status line, headers, then the
  body bytes exactly as read);
- ``client.bin``: the response body bytes proxai sent to the client;
- ``outcome.json``: the request's outcome record.

proxai's own upstream keys are masked in all of them (an upstream's error can quote
them), and key-looking strings too in the outcome record's text
(:class:`~proxai.ops.masking.SecretMask`).

Each file stops at ``max_bytes`` (a ``truncated`` note says so in
outcome.json). Bytes are buffered in memory (so bounded by ``max_bytes``) and
written by a worker thread when the request ends; then only the newest
``keep`` folders are kept. Folders are created ``0700`` and files ``0600``: they
hold prompts and answers.

``on_saved`` is called with the outcome and the folder once a capture's files are
written (in the trio thread, so it may set a :class:`trio.Event`): what a test
waits on before it reads a capture, instead of a guess at how long the thread takes.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import orjson
import trio

from ..config import CaptureConfig
from ..outcome import Outcome
from ..wire.query import looks_like_credential, redact_query
from .masking import SecretMask

__all__ = ["REDACTED", "Capture", "CaptureHook", "Captures"]

REDACTED = b"[redacted]"
#: The folders proxai writes; pruning never touches anything else in ``dir``.
FOLDER = re.compile(r"\d{8}T\d{6}\.\d{6}-req_[0-9a-f]{24}")

#: ``on_saved(outcome, folder)``: a request's capture is written (the folder may be
#: pruned already when other workers share ``dir``).
CaptureHook = Callable[[Outcome, Path], None]


class _Capped:
    """Bytes up to a limit, and whether more came."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.parts: list[bytes] = []
        self.size = 0
        self.truncated = False

    def add(self, data: bytes) -> None:
        room = self.limit - self.size
        if room <= 0:
            self.truncated = self.truncated or bool(data)
            return
        if len(data) > room:
            data, self.truncated = data[:room], True
        self.parts.append(data)
        self.size += len(data)

    def bytes(self) -> bytes:
        return b"".join(self.parts)


def _headers(headers: Iterable[tuple[bytes, bytes]]) -> bytes:
    """Headers as on the wire; any whose name looks like a credential's is redacted
    (a list of known names always misses the next API's)."""
    return b"".join(
        n + b": " + (REDACTED if looks_like_credential(n) else v) + b"\r\n" for n, v in headers
    )


class Capture:
    """What one request's capture holds until it is written."""

    def __init__(self, limit: int) -> None:
        self.request = _Capped(limit)
        self.upstream = _Capped(limit)
        self.client = _Capped(limit)

    def request_head(
        self, method: str, raw_path: bytes, query: bytes, headers: Iterable[tuple[bytes, bytes]]
    ) -> None:
        query = redact_query(query, looks_like_credential, REDACTED)
        target = raw_path + (b"?" + query if query else b"")
        self.request.add(
            method.encode() + b" " + target + b" HTTP/1.1\r\n" + _headers(headers) + b"\r\n"
        )

    def upstream_head(self, status: int, headers: Iterable[tuple[bytes, bytes]]) -> None:
        self.upstream.add(b"HTTP/1.1 %d\r\n" % status + _headers(headers) + b"\r\n")


class Captures:
    """The capture folder: one :class:`Capture` per request, the newest ``keep`` kept."""

    def __init__(
        self,
        config: CaptureConfig,
        mask: SecretMask | None = None,
        *,
        on_saved: CaptureHook | None = None,
    ) -> None:
        self._mask = mask or SecretMask()
        self._on_saved = on_saved
        self._dir = Path(config.dir)
        self._limit = config.max_bytes
        self._keep = config.keep
        self._writing = trio.Lock()  # one write (and prune) at a time in this process

    def start(self) -> Capture:
        return Capture(self._limit)

    async def save(self, capture: Capture, outcome: Outcome) -> None:
        async with self._writing:
            # Abandoned if the caller gives up (a slow disk): the thread finishes alone.
            folder = await trio.to_thread.run_sync(
                self._write, capture, outcome, abandon_on_cancel=True
            )
            # Under the lock: hooks are called in the order the folders were written.
            if self._on_saved is not None:
                self._on_saved(outcome, folder)

    def _write(self, capture: Capture, outcome: Outcome) -> Path:
        """Write one capture's folder (returned) and prune the old ones."""
        now = time.time()  # to the microsecond: names sort in the order requests ended
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now)) + f".{int(now % 1 * 1e6):06d}"
        folder = self._dir / f"{stamp}-{outcome.request_id}"
        # The modes hold whatever the umask (it can only take permissions away); a
        # ``dir`` that already exists keeps its own.
        self._dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        folder.mkdir(mode=0o700, exist_ok=True)
        files = {
            "request.http": capture.request,
            "upstream.bin": capture.upstream,
            "client.bin": capture.client,
        }
        record = outcome.as_dict()
        record["truncated"] = sorted(n for n, c in files.items() if c.truncated)
        mask = self._mask
        try:
            for name, content in files.items():
                _write_private(folder / name, mask.mask_bytes(content.bytes()))
            text = orjson.dumps(_masked(record, mask), option=orjson.OPT_INDENT_2)
            _write_private(folder / "outcome.json", mask.mask_bytes(text))
        except FileNotFoundError:
            return folder  # another worker pruned it already: it was not among the newest
        self._prune()
        return folder

    def _prune(self) -> None:
        """Keep the newest ``keep`` capture folders (by name: it starts with the UTC
        time). Only proxai's own folders are considered, and other workers prune the
        same folder, so any of them may vanish meanwhile."""
        folders = sorted(p.name for p in self._dir.iterdir() if FOLDER.fullmatch(p.name))
        for old in folders[: max(0, len(folders) - self._keep)]:
            shutil.rmtree(self._dir / old, ignore_errors=True)


def _masked(record: dict[str, Any], mask: SecretMask) -> dict[str, Any]:
    """The outcome record with its upstream text masked: the detail, each attempt's
    detail and the anomalies the observers noted (they quote upstream bytes)."""
    masked = dict(record)
    if isinstance(masked.get("detail"), str):
        masked["detail"] = mask(masked["detail"])
    attempts = masked.get("attempts")
    if isinstance(attempts, list):
        masked["attempts"] = [
            {**a, "detail": mask(a["detail"])} if isinstance(a.get("detail"), str) else a
            for a in attempts
        ]
    anomalies = masked.get("anomalies")
    if isinstance(anomalies, list):
        masked["anomalies"] = [mask(a) if isinstance(a, str) else a for a in anomalies]
    return masked


def _write_private(path: Path, data: bytes) -> None:
    """Write a file only proxai's user can read, created so from the start (no window
    in which it is world-readable), never through a symlink."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with open(fd, "wb") as file:
        file.write(data)
