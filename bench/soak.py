"""Soak proxai: 10,000 mixed streams at concurrency 200 (not part of make test).

    .venv/bin/python bench/soak.py [--streams N] [--concurrency C]

Healthy, stalled, reset and abandoned streams through one server on loopback;
every healthy stream must be byte-exact, every outcome as expected, and open file
descriptors and trio tasks must return to their count before the run. RSS is
compared after a warm-up soak of a tenth of the streams and after the main one.
Exits 1 if any of that fails.
"""

from __future__ import annotations

import argparse
import sys
from functools import partial

import trio

from proxai.testing.soak import expected_outcomes, soak


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--streams", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=200)
    args = parser.parse_args()
    report = trio.run(partial(soak, args.streams, args.concurrency, warmup=args.streams // 10))
    print(report.summary())
    problems = []
    if report.failures:
        problems.append(f"client-side failures: {report.failures}")
    if dict(report.outcomes) != expected_outcomes(args.streams):
        problems.append(f"outcomes {dict(report.outcomes)} != {expected_outcomes(args.streams)}")
    if report.fds_after != report.fds_before:
        problems.append("file descriptors leaked")
    if report.tasks_after != report.tasks_before:
        problems.append("trio tasks leaked")
    for problem in problems:
        print("FAIL:", problem)
    print("soak passed" if not problems else "soak FAILED")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
