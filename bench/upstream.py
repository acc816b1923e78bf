"""Python upstreams for the benchmarks that need timing nginx cannot give a static file.

    .venv/bin/python -m bench.upstream paced|stall|slow [--deltas 20] [--interval 0.005]

Runs :class:`proxai.testing.ScriptedUpstream` (h11 over trio) and prints its port on
stdout. Every request to it gets the same script:

- ``paced``: head, then ``response.created`` + ``output_item.added`` + the first delta,
  the other deltas ``interval`` seconds apart, then the closing events (a model talking);
- ``stall``: head, ``response.created``, a ``function_call`` item and three argument
  deltas, then nothing until the client hangs up (an upstream stalled mid-arguments);
- ``slow``: head and ``response.created``, then nothing until the client hangs up
  (a stream held open, for memory per held stream).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable
from functools import partial
from typing import Any

import trio

from bench.common import sse, text_stream
from proxai.testing import Script, ScriptedUpstream, Send, Sleep, Stall
from proxai.testing.upstream import Step


def paced(deltas: int, interval: float) -> Script:
    events = text_stream(deltas)
    steps: list[Step] = [Send(b"".join(events[:3]))]
    for event in events[3 : 2 + deltas]:
        steps += [Sleep(interval), Send(event)]
    steps.append(Send(b"".join(events[2 + deltas :])))
    return Script(steps=tuple(steps))


def stall() -> Script:
    item = {
        "type": "function_call",
        "id": "fc_b",
        "call_id": "call_b",
        "name": "get_weather",
        "arguments": "",
        "status": "in_progress",
    }
    events: list[dict[str, Any]] = [
        {
            "type": "response.created",
            "response": {"id": "resp_s", "object": "response", "status": "in_progress"},
        },
        {"type": "response.output_item.added", "output_index": 0, "item": item},
    ]
    events += [
        {
            "type": "response.function_call_arguments.delta",
            "output_index": 0,
            "item_id": "fc_b",
            "delta": part,
        }
        for part in ('{"loc', 'ation": "Par', "is, Fr")
    ]
    raw = [sse({**event, "sequence_number": seq}) for seq, event in enumerate(events)]
    return Script(steps=(*(Send(r) for r in raw), Stall()))


def slow() -> Script:
    return Script(steps=(Send(text_stream(0)[0]), Stall()))


async def run(script: Script) -> None:
    upstream = ScriptedUpstream(lambda request: script)
    async with trio.open_nursery() as nursery:
        await nursery.start(upstream.serve)
        print(upstream.port, flush=True)
        # Requests are recorded by the scripted upstream; a bench sends many.
        while True:
            await trio.sleep(1)
            upstream.requests.clear()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("mode", choices=["paced", "stall", "slow"])
    parser.add_argument("--deltas", type=int, default=20)
    parser.add_argument("--interval", type=float, default=0.005)
    args = parser.parse_args()
    builders: dict[str, Callable[[], Script]] = {
        "paced": partial(paced, args.deltas, args.interval),
        "stall": stall,
        "slow": slow,
    }
    script = builders[args.mode]()
    with contextlib.suppress(KeyboardInterrupt):
        trio.run(run, script)
    return 0


if __name__ == "__main__":
    sys.exit(main())
