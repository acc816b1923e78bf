"""Store far past ``[state] max_bytes`` through the request path, in this process, and
say how much its RSS grew (issue 38, item 6): ``python -m tests.state.rss_program
MODE INPUTS INPUT_BYTES OUTPUT_BYTES`` prints one JSON object.

Responses requests of ``INPUTS`` user messages of ``INPUT_BYTES`` each, to a Chat
upstream answering ``OUTPUT_BYTES`` of text, streamed (``stream``) or not (``whole``),
through :class:`~proxai.testing.memory_proxy.MemoryProxy`: every response is stored by
the request path itself (the storing downstream, ``Conversations.save``, the memory
store), 25 times the bound in all. The RSS is read from ``/proc/self/status`` after a
warm-up and at the end; what the test harness holds per request (the exchange, the
upstream's script) is let go after each.
"""

from __future__ import annotations

import gc
import logging
import math
import sys
from typing import Any

import orjson
import trio

from proxai.state import MemoryStore
from proxai.testing import Script, chat_chunk
from proxai.testing.memory_proxy import MemoryProxy
from proxai.testing.upstream import RecordedRequest

#: ``[state] max_bytes`` of the run.
BOUND = 4 * 1024 * 1024
#: How much is stored, in bounds.
TIMES = 25
_PIECE = "x" * 1000


def rss_bytes() -> int:
    """This process's resident set size."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def answer(output_bytes: int) -> Any:
    def respond(request: RecordedRequest) -> Script:
        lines = [chat_chunk({"role": "assistant", "content": ""})]
        lines += [chat_chunk({"content": _PIECE})] * max(1, output_bytes // len(_PIECE))
        return Script.sse([*lines, chat_chunk({}, finish="stop"), b"data: [DONE]\n\n"])

    return respond


async def run(mode: str, inputs: int, input_bytes: int, output_bytes: int) -> dict[str, Any]:
    request = {
        "model": "m",
        "input": [{"role": "user", "content": "y" * input_bytes}] * inputs,
        "stream": mode == "stream",
    }
    async with MemoryProxy(
        answer(output_bytes), upstream={"protocol": "openai_chat"}, state={"max_bytes": BOUND}
    ) as proxy:
        store = proxy.app.state_store
        assert isinstance(store, MemoryStore)
        await proxy.request(request)
        size = store.state.bytes  # every record of the run has this size
        assert size > 0, "the response was not stored"
        for _ in range(3):  # warm up: the store fills, the allocator settles
            await proxy.request(request)
        proxy.outcomes.clear()
        proxy.transport.requests.clear()
        gc.collect()
        before = rss_bytes()
        count = math.ceil(TIMES * BOUND / size)
        last = None
        for _ in range(count):
            await proxy.request(request)
            (outcome,) = proxy.outcomes
            assert outcome.stored_as is not None, outcome.warnings
            last = outcome.stored_as
            proxy.outcomes.clear()
            proxy.transport.requests.clear()
        gc.collect()
        grown = rss_bytes() - before
        found = await proxy.request(b"", method="GET", path=f"/v1/responses/{last}")
        return {
            "bound": BOUND,
            "record": size,
            "stored": count * size,
            "held": store.state.bytes,
            "records": len(store.state),
            "grown": grown,
            "last_found": found.status == 200,
        }


def main() -> None:
    logging.disable(logging.CRITICAL)
    mode, inputs, input_bytes, output_bytes = sys.argv[1:5]
    figures = trio.run(run, mode, int(inputs), int(input_bytes), int(output_bytes))
    sys.stdout.write(orjson.dumps(figures).decode() + "\n")


if __name__ == "__main__":
    main()
