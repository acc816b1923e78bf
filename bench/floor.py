"""The stack's floor: what hypercorn + httpx cost per stream before proxai does anything.

    .venv/bin/python -m bench.floor [--reps 3] [--seconds 4] [--concurrency 1 16 64]
        [--streams 1000]

Minimal ASGI apps on hypercorn's trio worker (``bench/floor_apps.py``), each pinned to
the proxy core like proxai, measured next to proxai itself (targets interleaved):

- ``hypercorn-static`` (throughput) / ``hypercorn-held`` (memory): the stream comes
  from the app itself, no upstream: hypercorn, h11 and trio alone;
- ``naive-relay``: httpx ``AsyncClient.stream``, one ASGI send per chunk;
- ``transport-relay``: the same through httpx's transport (proxai's upstream path);
- ``proxai``.

Throughput is the throughput bench's load (wrk, the 40-delta stream from nginx) in
streams per proxy core-second; latency the latency bench's paced stream (added time
to first byte, transport relay and proxai only); memory the memory bench's (RSS per
held stream, 1,000 streams held on the slow upstream, fresh processes per repetition).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from bench import latency as paced
from bench.common import (
    Row,
    Target,
    free_port,
    have_tools,
    hypercorn_app,
    log,
    pin_driver,
    proxai,
    python_upstream,
    save,
    stop,
    text_stream,
    wait_port,
    workdir,
)
from bench.memory import measure as held_memory
from bench.memory import summarize as summarize_memory
from bench.throughput import _round, fast_upstream, measure, summarize

THROUGHPUT_APPS = {
    "hypercorn-static": "static",
    "naive-relay": "relay",
    "transport-relay": "transport",
}
MEMORY_APPS = {"hypercorn-held": "held", "naive-relay": "relay", "transport-relay": "transport"}


@contextmanager
def floor_targets(
    upstream: int, body_file: str, apps: dict[str, str], proxai_timeouts: dict[str, float]
) -> Iterator[list[Target]]:
    processes = []
    found = []
    with workdir() as wd:
        try:
            for name, app in apps.items():
                port = free_port()
                processes.append(hypercorn_app(app, port, upstream, body_file))
                found.append(Target(name, port, processes[-1].pid))
            port = free_port()
            processes.append(proxai(wd, port, upstream, timeouts=proxai_timeouts))
            found.append(Target("proxai", port, processes[-1].pid))
            for target in found:
                wait_port(target.port)
            yield found
        finally:
            stop(processes)


def run(
    reps: int, seconds: int, concurrency: list[int], streams: int, requests: int
) -> dict[str, Any]:
    return {
        "throughput": throughput(reps, seconds, concurrency),
        "latency": latency(reps, requests, [c for c in concurrency if c <= 16]),
        "memory": memory(reps, streams),
    }


def throughput(reps: int, seconds: int, concurrency: list[int]) -> dict[str, Any]:
    raw = []
    with (
        fast_upstream() as (up, upstream_pids, script, wd),
        floor_targets(up, str(wd / "stream.sse"), THROUGHPUT_APPS, {}) as all_targets,
    ):
        for target in all_targets:  # warm up
            measure(target, 4, 1, script, upstream_pids)
        for rep in range(reps):
            for connections in concurrency:
                for target in all_targets:
                    row = measure(target, connections, seconds, script, upstream_pids)
                    row["rep"] = rep
                    log("floor", {k: _round(v) for k, v in row.items()})
                    raw.append(row)
    return {"raw": raw, "summary": summarize(raw), "seconds": seconds}


def latency(reps: int, requests: int, concurrency: list[int]) -> dict[str, Any]:
    """The latency bench's paced stream through the transport relay and proxai, with
    the direct figures of the same repetition to subtract."""
    apps = {"transport-relay": "transport"}
    raw: list[Row] = []
    with (
        python_upstream("paced", deltas=paced.DELTAS, interval=paced.INTERVAL) as (up, _),
        workdir() as wd,
    ):
        body = wd / "unused.sse"
        body.write_bytes(b"")
        with floor_targets(up, str(body), apps, {}) as found:
            all_targets = [Target("direct", up, None), *found]
            for rep in range(reps):
                for c in concurrency:
                    for target in all_targets:
                        raw.append(paced.one(target, c, requests, rep))
    names = ("direct", *apps, "proxai")
    return {"raw": raw, "summary": paced.summarize(raw, concurrency, names)}


def memory(reps: int, streams: int) -> dict[str, Any]:
    raw: list[Row] = []
    with python_upstream("slow") as (up, _), workdir() as wd:
        body = wd / "stream.sse"
        body.write_bytes(b"".join(text_stream(1)))
        for rep in range(reps):
            with floor_targets(up, str(body), MEMORY_APPS, {"idle": 600.0}) as all_targets:
                for target in all_targets:
                    row = {**held_memory(target, streams), "rep": rep}
                    log("floor", row)
                    raw.append(row)
    return {"raw": raw, "summary": summarize_memory(raw, [*MEMORY_APPS, "proxai"], streams)}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=4)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=400)
    args = parser.parse_args()
    if not have_tools("nginx", "wrk", "taskset"):
        return 2
    pin_driver()
    result = run(args.reps, args.seconds, args.concurrency, args.streams, args.requests)
    save("floor", result)
    for part in result.values():
        for row in part["summary"]:
            print({k: _round(v) for k, v in row.items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
