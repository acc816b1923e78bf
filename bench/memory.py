"""Memory: RSS per held stream with 1,000 slow streams open at once.

    .venv/bin/python -m bench.memory [--reps 3] [--streams 1000]

The upstream (bench/upstream.py ``slow``) sends the head and ``response.created``,
then nothing until the client hangs up. For each proxy (a fresh nginx and proxai per
repetition), a warm-up holds 20 streams and lets them go; then the proxy's RSS (all its
processes, from /proc) is read, 1,000 streams are opened and held (each has received
its first event), and the RSS is read again. KB per held stream = the difference / 1,000.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Sequence
from typing import Any

from bench.common import (
    Row,
    Target,
    connect,
    log,
    median,
    pin_driver,
    post_request,
    python_upstream,
    rss_kb,
    save,
    targets,
)


async def hold(port: int, streams: int, then: Any, request: bytes | None = None) -> Any:
    """Open ``streams`` streams (``request``, by default the one-read stream's), wait
    until each has its first event, call ``then()`` while all are held, close them and
    return what ``then`` returned."""
    request = request or post_request(port)
    gate = asyncio.Semaphore(64)  # connect at a pace the listen backlog takes
    opened: list[asyncio.StreamWriter] = []
    ready = 0
    all_ready = asyncio.Event()

    async def one() -> None:
        nonlocal ready
        async with gate:
            reader, writer = await connect(port)
            opened.append(writer)
            writer.write(request)
            data = b""
            while b"response.created" not in data:
                chunk = await reader.read(65536)
                if not chunk:
                    raise RuntimeError("a held stream ended")
                data += chunk
        ready += 1
        if ready == streams:
            all_ready.set()

    tasks = [asyncio.ensure_future(one()) for _ in range(streams)]
    try:
        await asyncio.wait_for(all_ready.wait(), timeout=120)
        await asyncio.sleep(0.5)  # let the proxy settle
        return then()
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for writer in opened:
            writer.close()
        await asyncio.sleep(0.2)


def measure(target: Target, streams: int, request: bytes | None = None) -> Row:
    pids = target.pids()
    asyncio.run(hold(target.port, 20, lambda: None, request))
    time.sleep(0.5)
    before = rss_kb(pids)
    with_streams = asyncio.run(hold(target.port, streams, lambda: rss_kb(pids), request))
    return {
        "target": target.name,
        "streams": streams,
        "rss_before_kb": before,
        "rss_held_kb": with_streams,
        "kb_per_stream": (with_streams - before) / streams,
    }


def run(reps: int, streams: int) -> dict[str, Any]:
    raw: list[Row] = []
    with python_upstream("slow") as (up, _):
        for rep in range(reps):
            with targets(up, proxai_timeouts={"idle": 600.0}) as all_targets:
                for target in all_targets[1:]:
                    row = {**measure(target, streams), "rep": rep}
                    log("memory", row)
                    raw.append(row)
    return {"raw": raw, "summary": summarize(raw, ("nginx", "proxai"), streams)}


def summarize(raw: list[Row], names: Sequence[str], streams: int) -> list[Row]:
    """Medians over repetitions, per target."""
    summary = []
    for name in names:
        rows = [r for r in raw if r["target"] == name]
        summary.append(
            {
                "target": name,
                "streams": streams,
                "reps": len(rows),
                "rss_before_kb": median([r["rss_before_kb"] for r in rows]),
                "rss_held_kb": median([r["rss_held_kb"] for r in rows]),
                "kb_per_stream": median([r["kb_per_stream"] for r in rows]),
            }
        )
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--streams", type=int, default=1000)
    args = parser.parse_args()
    pin_driver()
    result = run(args.reps, args.streams)
    save("memory", result)
    for row in result["summary"]:
        print(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
