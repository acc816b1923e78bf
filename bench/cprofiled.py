"""A server under ``cProfile``, profiled only between two signals (for ``bench/ws_counts.py``).

    python -m bench.cprofiled OUT proxai serve --config FILE ...
    python -m bench.cprofiled OUT floor APP PORT

SIGUSR1 starts a new profile; SIGUSR2 stops it and writes its stats to ``OUT.<n>``
(n = 0, 1, ...). ``proxai`` runs proxai's command line; ``floor`` serves one of
``bench/floor_apps.py``'s apps on hypercorn's trio worker in this process (no worker
process: the profile must see the server's own work). Call counts, not times, are
what the counting bench reads: they do not depend on the machine's load.
"""

from __future__ import annotations

import cProfile
import signal
import sys
from types import FrameType


class Windows:
    """The profile windows the signals open and close."""

    def __init__(self, out: str) -> None:
        self.out = out
        self.count = 0
        self.profile: cProfile.Profile | None = None

    def start(self, signum: int, frame: FrameType | None) -> None:
        self.profile = cProfile.Profile()
        self.profile.enable()

    def stop(self, signum: int, frame: FrameType | None) -> None:
        if self.profile is None:
            return
        self.profile.disable()
        self.profile.dump_stats(f"{self.out}.{self.count}")
        self.count += 1
        self.profile = None


def serve_floor(app_name: str, port: int) -> int:
    import trio
    from hypercorn.config import Config
    from hypercorn.trio import serve

    from bench import floor_apps

    config = Config()
    config.bind = [f"127.0.0.1:{port}"]
    config.loglevel = "WARNING"
    app = getattr(floor_apps, app_name)
    trio.run(serve, app, config)  # type: ignore[arg-type]
    return 0


def main() -> int:
    out, kind, *rest = sys.argv[1:]
    windows = Windows(out)
    signal.signal(signal.SIGUSR1, windows.start)
    signal.signal(signal.SIGUSR2, windows.stop)
    if kind == "floor":
        return serve_floor(rest[0], int(rest[1]))
    from proxai.cli import main as proxai_main

    return proxai_main(rest)


if __name__ == "__main__":
    sys.exit(main())
