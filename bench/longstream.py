"""One long stream: relayed events per second through a single stream.

    .venv/bin/python -m bench.longstream [--reps 3] [--deltas 200000]

nginx (core 0) serves one Responses stream of 200,000 small text deltas (about 30 MB)
from a file. A raw asyncio client (core 0) reads it through direct / nginx / proxai
(the proxies pinned to core 1), checks that every byte arrived, and divides the
number of events by the time from sending the request to the last byte. The proxy's
CPU time over the stream is read from /proc.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from bench.common import (
    Row,
    Target,
    connect,
    cpu_seconds,
    exchange,
    free_port,
    log,
    median,
    nginx_static,
    pin_driver,
    post_request,
    save,
    stop,
    targets,
    text_stream,
    wait_port,
    workdir,
)
from bench.contention import quiet


async def read_stream(port: int) -> tuple[float, int]:
    """Seconds to the last byte and payload bytes received."""
    received = 0

    def count(payload: bytes, _: float) -> None:
        nonlocal received
        received += len(payload)

    reader, writer = await connect(port)
    try:
        response = await exchange(
            reader, writer, post_request(port), keep_body=False, on_body=count
        )
    finally:
        writer.close()
    if not response.complete or response.status != 200:
        raise RuntimeError(f"port {port}: status {response.status}, complete {response.complete}")
    return response.last_byte, received


def measure(target: Target, events: int, size: int) -> Row:
    pids = target.pids()

    def measured() -> tuple[float, int, float]:
        before = cpu_seconds(pids)
        seconds, received = asyncio.run(read_stream(target.port))
        return seconds, received, cpu_seconds(pids) - before if pids else float("nan")

    (seconds, received, cpu), seen = quiet(measured, f"longstream {target.name}")
    if received != size:
        raise RuntimeError(f"{target.name}: {received} bytes of {size}")
    return {
        "target": target.name,
        "events": events,
        "bytes": size,
        "seconds": seconds,
        "events_per_s": events / seconds,
        "mb_per_s": size / seconds / 1e6,
        "proxy_cpu_s": cpu,
        **seen.fields(),
    }


def run(reps: int, deltas: int) -> dict[str, Any]:
    stream = text_stream(deltas)
    body = b"".join(stream)
    raw: list[Row] = []
    with workdir() as wd:
        (wd / "long.sse").write_bytes(body)
        up = free_port()
        upstream = nginx_static(wd, "up", up, wd / "long.sse")
        try:
            wait_port(up)
            with targets(up) as all_targets:
                for target in all_targets:  # warm-up (and the file into the page cache)
                    asyncio.run(read_stream(target.port))
                for rep in range(reps):
                    for target in all_targets:
                        row = {**measure(target, len(stream), len(body)), "rep": rep}
                        log("longstream", {k: v for k, v in row.items() if k != "bytes"})
                        raw.append(row)
        finally:
            stop([upstream])
    summary = []
    for name in ("direct", "nginx", "proxai"):
        rows = [r for r in raw if r["target"] == name]
        summary.append(
            {
                "target": name,
                "events": len(stream),
                "bytes": len(body),
                "reps": len(rows),
                "events_per_s": median([r["events_per_s"] for r in rows]),
                "mb_per_s": median([r["mb_per_s"] for r in rows]),
                "seconds": median([r["seconds"] for r in rows]),
                "proxy_cpu_s": median([r["proxy_cpu_s"] for r in rows]),
            }
        )
    return {"raw": raw, "summary": summary}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--deltas", type=int, default=200_000)
    args = parser.parse_args()
    pin_driver()
    result = run(args.reps, args.deltas)
    save("longstream", result)
    for row in result["summary"]:
        print(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
