"""Per-event work of a socket turn against an SSE stream, counted (not timed).

    .venv/bin/python -m bench.ws_counts [--turns 4] [--deltas 20] [--top 25]

A server runs under ``cProfile`` (``bench/cprofiled.py``), profiled only while one
connection runs ``turns`` turns of ``deltas`` and then of ``2 * deltas`` deltas (the
per-event bench's paced upstream, 2 ms before each delta, so every event is its own
read and its own send); per event is the difference over ``turns * deltas`` events.
cProfile's call counts do not depend on the machine's load as long as every upstream
event is its own read (a loaded machine lets a few arrive together, which moves
proxai's counts by a few per cent; the floor reads nothing), so this compares the
transports within one run on a busy machine where the CPU benches cannot. Targets:
proxai in front of ``bench/event_upstream.py`` (``sse``, ``socket``, ``socket-deflate``), and
hypercorn
alone sending the same events itself (``bench/floor_apps.py``'s ``socket_paced``:
``floor-sse``, ``floor-socket``), the floor under both.

Printed: calls per event, in all and by package, and the functions whose count per
event differs most between the socket and SSE (proxai) and between proxai's socket
and the floor's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pstats
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.common import RESULTS, ROOT, free_port, proxai, stop, wait_port, workdir
from bench.perevent import PAUSE, TIMEOUTS, event_upstream
from bench.streams import Variant
from bench.websocket import Lane

#: package of a profiled function, by the first of these in its file's path
PACKAGES = (
    ("/proxai/", "proxai"),
    ("/trio/", "trio"),
    ("/hypercorn/", "hypercorn"),
    ("/wsproto/", "wsproto"),
    ("/h11/", "h11"),
    ("/httpcore/", "httpx"),
    ("/httpx/", "httpx"),
    ("/attr/", "attrs"),
    ("/bench/", "bench app"),
    ("<attrs generated", "attrs"),
)
Counts = Counter[tuple[str, int, str]]


def package(path: str) -> str:
    for marker, name in PACKAGES:
        if marker in path:
            return name
    return "builtins" if path == "~" else "stdlib/other"


def counts(path: Path) -> Counts:
    """Calls per function (primitive and recursive) in one profile window."""
    stats = pstats.Stats(str(path))
    out: Counts = Counter()
    for func, (_, ncalls, *_rest) in stats.stats.items():  # type: ignore[attr-defined]
        out[func] = ncalls
    return out


@contextmanager
def server(target: str, out: Path) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """The profiled server for ``target`` (``proxai`` or ``floor``): (port, process)."""
    launcher = [sys.executable, "-m", "bench.cprofiled", str(out)]
    port = free_port()
    if target == "floor":
        process = subprocess.Popen(
            [*launcher, "floor", "socket_paced", str(port)],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_port(port)
            yield port, process
        finally:
            stop([process])
        return
    upstream_process, upstream = event_upstream()
    try:
        with workdir() as wd:
            process = proxai(
                wd, port, upstream, timeouts=TIMEOUTS, argv_prefix=[*launcher, "proxai"]
            )
            try:
                wait_port(port)
                yield port, process
            finally:
                stop([process])
    finally:
        stop([upstream_process])


async def turns(lane: Lane, variant: Variant, k: int) -> None:
    for _ in range(k):
        await lane.run(variant)


def measure(target: str, transport: str, k: int, deltas: int) -> dict[str, object]:
    """Calls per event of ``transport`` on ``target``: the windows of ``k`` turns of
    ``deltas`` and of ``2 * deltas``, differenced."""
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"cprofile-{target}-{transport}"
    with server(target, out) as (port, process):

        async def run() -> list[str]:
            lane = Lane(transport, port)
            async with lane:
                await turns(lane, Variant(2, 0.0), 2)  # warm up
                for n in (deltas, 2 * deltas):
                    await asyncio.sleep(0.2)
                    process.send_signal(signal.SIGUSR1)
                    await asyncio.sleep(0.2)
                    await turns(lane, Variant(n, PAUSE), k)
                    await asyncio.sleep(0.2)
                    process.send_signal(signal.SIGUSR2)
                    await asyncio.sleep(0.5)
            return lane.problems

        problems = asyncio.run(run())
        for _ in range(50):
            if Path(f"{out}.1").exists():
                break
            time.sleep(0.1)
    short, long = counts(Path(f"{out}.0")), counts(Path(f"{out}.1"))
    events = k * deltas
    per_function = {f: (long.get(f, 0) - short.get(f, 0)) / events for f in set(short) | set(long)}
    by_package: Counter[str] = Counter()
    for f, n in per_function.items():
        by_package[package(f[0])] += n
    return {
        "target": target,
        "transport": transport,
        "problems": problems,
        "calls_per_event": sum(per_function.values()),
        "by_package": dict(by_package),
        "functions": {f"{f[0]}:{f[1]}({f[2]})": n for f, n in per_function.items()},
    }


def short_name(func: str) -> str:
    for marker in ("/site-packages/", "/wt-ws/", "/lib/python3"):
        if marker in func:
            return func.split(marker, 1)[1]
    return func


def differences(a: dict[str, float], b: dict[str, float], top: int) -> list[tuple[str, float]]:
    keys = set(a) | set(b)
    diff = [(k, b.get(k, 0.0) - a.get(k, 0.0)) for k in keys]
    diff = [(k, d) for k, d in diff if abs(d) >= 0.5]
    return sorted(diff, key=lambda kd: -abs(kd[1]))[:top]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--deltas", type=int, default=20)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument(
        "--only", nargs="*", default=None, help="target:transport pairs (default: all)"
    )
    args = parser.parse_args()
    cells = [
        ("proxai", "sse"),
        ("proxai", "socket"),
        ("proxai", "socket-deflate"),
        ("floor", "sse"),
        ("floor", "socket"),
    ]
    if args.only:
        cells = [c for c in cells if f"{c[0]}:{c[1]}" in args.only]
    results = {f"{t}:{x}": measure(t, x, args.turns, args.deltas) for t, x in cells}
    (RESULTS / "ws_counts.json").write_text(json.dumps(results, indent=1))
    for key, r in results.items():
        packages = sorted(r["by_package"].items(), key=lambda kv: -kv[1])  # type: ignore[attr-defined]
        shown = ", ".join(f"{name} {n:.1f}" for name, n in packages if abs(n) >= 0.5)
        print(f"{key}: {r['calls_per_event']:.1f} calls per event ({shown})")
        if r["problems"]:
            print("  problems:", r["problems"][:3])
    for a, b in (("proxai:sse", "proxai:socket"), ("floor:socket", "proxai:socket")):
        if a in results and b in results:
            print(f"\n{b} - {a}, calls per event:")
            fa, fb = results[a]["functions"], results[b]["functions"]
            for func, d in differences(fa, fb, args.top):  # type: ignore[arg-type]
                print(f"  {d:+7.2f}  {short_name(func)}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
