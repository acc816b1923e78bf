"""Profile ``proxai serve`` with py-spy under the throughput bench's load.

    .venv/bin/python -m bench.pyspy [--concurrency 16] [--seconds 8] [--out FILE]

Starts the throughput bench's upstream (nginx, 40-delta stream) and one proxai
pinned to the proxy core, runs wrk against it and records proxai with py-spy
(``.venv/bin/pip install py-spy``) for the length of the run. Writes py-spy's raw
(collapsed stack) output, and prints own time by package and inclusive time of
proxai's functions.
"""

from __future__ import annotations

import argparse
import collections
import subprocess
import sys
import time
from pathlib import Path

from bench.common import ROOT, free_port, pin_driver, proxai, stop, wait_port, workdir
from bench.throughput import fast_upstream, wrk

PACKAGES = (
    "proxai",
    "trio",
    "httpcore",
    "httpx",
    "h11",
    "hypercorn",
    "orjson",
    "attrs",
    "contextlib",
    "typing",
    "logging",
    "socket",
)


def package(frame: str) -> str:
    # "func (path/to/module.py:123)"
    path = "/" + frame.rsplit("(", 1)[-1]
    for name in PACKAGES:
        if f"/{name}/" in path or f"/{name}.py" in path:
            return name
    if "<attrs generated" in frame:
        return "attrs"
    return "other"


def report(collapsed: Path, top: int = 40) -> None:
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    own_fn: collections.Counter[str] = collections.Counter()
    total = 0
    for line in collapsed.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        count = int(count_text)
        # "func (module.py:123)" -> "func (module.py)": functions, not lines
        frames = [f.rsplit(":", 1)[0] + ")" if f.endswith(")") else f for f in stack.split(";")]
        total += count
        own[package(frames[-1])] += count
        own_fn[frames[-1]] += count
        for frame in set(frames):
            if package(frame) == "proxai":
                inclusive[frame] += count
    print(f"{total} samples\n\nown time by package:")
    for name, count in own.most_common():
        print(f"  {name:12} {100 * count / total:5.1f} %")
    print("\nown time, top functions:")
    for name, count in own_fn.most_common(top):
        print(f"  {100 * count / total:5.1f} %  {name}")
    print("\nproxai functions, inclusive:")
    for name, count in inclusive.most_common(top):
        print(f"  {100 * count / total:5.1f} %  {name}")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--seconds", type=int, default=8)
    parser.add_argument("--rate", type=int, default=250)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "pyspy.txt")
    args = parser.parse_args()
    pin_driver()
    args.out.parent.mkdir(exist_ok=True)
    with fast_upstream() as (up, _, script, _wd), workdir() as wd:
        port = free_port()
        process = proxai(wd, port, up)
        try:
            wait_port(port)
            wrk(port, 4, 1, script)  # warm up
            spy = subprocess.Popen(
                [
                    str(ROOT / ".venv" / "bin" / "py-spy"),
                    "record",
                    "--format",
                    "raw",
                    "--rate",
                    str(args.rate),
                    "--duration",
                    str(args.seconds + 1),
                    "--pid",
                    str(process.pid),
                    "--output",
                    str(args.out),
                ],
                stdout=subprocess.DEVNULL,
            )
            time.sleep(0.5)
            figures = wrk(port, args.concurrency, args.seconds, script)
            spy.wait()
        finally:
            stop([process])
    print(f"wrk: {figures['requests'] / args.seconds:.0f} streams/s (under py-spy)")
    report(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
