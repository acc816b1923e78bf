"""CPU per request of proxai's upstream client alone, in process.

    .venv/bin/python -m bench.client_cpu [--concurrency 1 16 64] [--requests 3000] [--reps 3]

The throughput bench's upstream (nginx, 40-delta stream) on the driver core; this
process, pinned to the proxy core, sends POST /v1/responses through
``UpstreamClient.open`` and reads each body to the end with ``concurrency``
requests in flight. Prints CPU microseconds per request (process time), the
median of ``reps`` runs: a steadier figure for the client than the end-to-end bench.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import trio

from bench.common import PROXY_CORE, median
from bench.throughput import fast_upstream
from proxai.config import TimeoutsConfig, UpstreamConfig
from proxai.upstream.client import UpstreamClient

BODY = b'{"model":"m","stream":true,"input":"hi"}'
HEADERS = [(b"content-type", b"application/json"), (b"host", b"127.0.0.1")]


async def run(port: int, concurrency: int, requests: int) -> float:
    upstream = UpstreamConfig(base_url=f"http://127.0.0.1:{port}/v1", api_key="sk-bench")
    client = UpstreamClient(upstream, TimeoutsConfig())
    left = requests

    async def worker() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            async with client.open("POST", b"/v1/responses", b"", HEADERS, BODY) as response:
                async for _ in response.iter_body():
                    pass

    async with trio.open_nursery() as nursery:  # warm up: open the connections
        for _ in range(concurrency):
            nursery.start_soon(worker)
        left = concurrency * 4
    left = requests
    start = time.process_time()
    async with trio.open_nursery() as nursery:
        for _ in range(concurrency):
            nursery.start_soon(worker)
    cpu = time.process_time() - start
    await client.aclose()
    return cpu / requests * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    with fast_upstream() as (port, _, _, _):
        os.sched_setaffinity(0, {PROXY_CORE})
        for concurrency in args.concurrency:
            runs = [trio.run(run, port, concurrency, args.requests) for _ in range(args.reps)]
            print(
                f"c={concurrency}: {median(runs):.0f} us CPU per request "
                f"({', '.join(f'{r:.0f}' for r in runs)})"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
