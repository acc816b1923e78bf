"""RSS per held stream and its tracemalloc split, for proxai and the two relays it is
measured against: the per-event bench's memory part alone (issue 34).

    .venv/bin/python -m bench.held [--streams 400] [--split 300]

Starts the per-event upstream, then, one at a time in fresh processes, the stock relay,
the shaped relay and proxai (pass-through), and prints each one's RSS per held stream
(``bench.perevent.held_memory``: the Responses preamble held, then nothing); with
``--split N``, also proxai's Python heap per held stream by owner under tracemalloc
(``bench.perevent.memory_split``). RSS and tracemalloc bytes do not depend on the
machine's load, so this may run beside other work; the streams are few.
"""

from __future__ import annotations

import argparse
import json
import sys

from bench import perevent
from bench.common import pin_driver, stop

TARGETS = (perevent.STOCK, "shaped-relay", "proxai")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--streams", type=int, default=400)
    parser.add_argument("--split", type=int, default=0, help="streams held under tracemalloc")
    args = parser.parse_args()
    pin_driver()
    process, upstream = perevent.event_upstream()
    try:
        rows = perevent.held_memory(1, args.streams, upstream, TARGETS)
        stock = next(r["kb_per_stream"] for r in rows if r["target"] == perevent.STOCK)
        for row in rows:
            kib = row["kb_per_stream"]
            print(f"{row['target']:>14}: {kib:6.2f} KiB per held stream ({kib / stock:.2f}x)")
        if args.split:
            split = perevent.memory_split(upstream, args.split, None)
            print(json.dumps(split, indent=1))
    finally:
        stop([process])
    return 0


if __name__ == "__main__":
    sys.exit(main())
