"""``proxai serve`` under tracemalloc, for the memory split of a held stream.

    .venv/bin/python -m bench.traced serve --config FILE     (TRACE_DIR=dir)

Runs proxai's command line unchanged. The first SIGUSR1 starts tracemalloc
(``TRACE_FRAMES`` frames per allocation, 40 by default; not at start-up, which it
would slow down thirtyfold) and writes ``TRACE_DIR/started``; each later one dumps a
snapshot to ``TRACE_DIR/snap-N.pickle`` (written under another name, then renamed). RSS says how
much a held stream costs; the allocations' call stacks say whose it is:
:func:`owner` gives each allocation to hypercorn, httpx, the relay or the rest of the
app by the innermost frame of one of them.
"""

from __future__ import annotations

import os
import signal
import sys
import tracemalloc
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

#: Owners of an allocation, by a fragment of the file of the innermost frame that
#: matches one (trio, h11, attrs, the standard library are the tools they call).
OWNERS = (
    ("/proxai/relay/", "proxai: relay (tasks, channels, scopes, records)"),
    ("/proxai/protocols/", "proxai: observer"),
    ("/proxai/translate/", "proxai: translator"),
    ("/proxai/wire/", "proxai: SSE framer"),
    ("/proxai/", "proxai: app (admission, projection, outcome, log, metrics)"),
    ("/httpcore/", "httpx + httpcore (upstream connection)"),
    ("/httpx/", "httpx + httpcore (upstream connection)"),
    ("/hypercorn/", "hypercorn (client connection)"),
)
OTHER = "trio: accepting client connections, run loop"


def in_task(paths: Sequence[str]) -> Sequence[str]:
    """The frames of a stack (root first) that run inside a trio task: what comes
    after trio's run loop. The command line that called ``trio.run`` is below every
    task and owns none of their work; an empty result is the run loop's own."""
    first = next((i for i, path in enumerate(paths) if is_trio(path)), None)
    if first is None:
        return paths
    task = next((i for i in range(first, len(paths)) if not is_trio(paths[i])), len(paths))
    return paths[task:]


def is_trio(path: str) -> bool:
    """Whether a frame's file is trio's own (hypercorn's trio worker is not), or that of
    the ``outcome`` objects its run loop resumes tasks with."""
    if "/hypercorn/" in path:
        return False
    return any(part in path for part in ("/trio/", "trio._", "/outcome/", "outcome._"))


def owner(filenames: Sequence[str]) -> str:
    """The owner of an allocation whose stack is ``filenames``, innermost first."""
    for filename in reversed(in_task(list(reversed(filenames)))):
        for fragment, name in OWNERS:
            if fragment in filename:
                return name
    return OTHER


def main() -> int:
    out = Path(os.environ["TRACE_DIR"])
    dumped = 0

    def dump(signum: int, frame: FrameType | None) -> None:
        nonlocal dumped
        if not tracemalloc.is_tracing():
            tracemalloc.start(int(os.environ.get("TRACE_FRAMES", "40")))
            (out / "started").touch()
            return
        snapshot = tracemalloc.take_snapshot()
        path = out / f"snap-{dumped}.pickle"
        snapshot.dump(str(path) + ".part")
        os.replace(str(path) + ".part", path)
        dumped += 1

    signal.signal(signal.SIGUSR1, dump)
    from proxai.cli import main as proxai_main

    return proxai_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
