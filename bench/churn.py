"""Churn the upstream pools of a running ``proxai serve`` (not part of make test).

    .venv/bin/python bench/churn.py [--seconds 600] [--keepalive-expiry 0.1]
        [--burst 120] [--hangups 64] [--max-idle 256] [--warmup 10]

Bursts of short requests (byte-exact pass-through streams and JSON bodies, and
translated Responses-on-Chat streams), streams whose clients hang up after 0.1 to
0.4 s and streams stalled mid-arguments, translated and not, on an ``http://``
upstream with a short ``keepalive_expiry``: see :mod:`proxai.testing.churn`. Every
request must be answered and recorded as it must be, ``/readyz`` must stay 200, the
pools' gauges must show no closed connection listed and at most ``--max-idle`` idle
ones, and afterwards the pools must be empty and proxai's open fds as after the
warm-up. Prints the report; exits 1 if any of that fails. ``tests/test_soak.py`` runs
10 seconds of it in every ``make test``.
"""

from __future__ import annotations

import argparse
import sys
from functools import partial

import trio

from proxai.testing.churn import churn


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--keepalive-expiry", type=float, default=0.1)
    parser.add_argument("--burst", type=int, default=120)
    parser.add_argument("--hangups", type=int, default=64)
    parser.add_argument("--max-idle", type=int, default=256)
    parser.add_argument("--warmup", type=float, default=10.0)
    args = parser.parse_args()
    report = trio.run(
        partial(
            churn,
            args.seconds,
            keepalive_expiry=args.keepalive_expiry,
            max_idle=args.max_idle,
            burst=args.burst,
            hangups=args.hangups,
            warmup=args.warmup,
        )
    )
    print(report.summary())
    problems = report.problems()
    for problem in problems:
        print("FAIL:", problem)
    print("churn passed" if not problems else "churn FAILED")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
