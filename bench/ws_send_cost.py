"""What bounding and serializing one socket frame costs, in instructions (callgrind).

    valgrind --tool=callgrind .venv/bin/python -m bench.ws_send_cost VARIANT N

One trio task sends ``N`` frames to a fake ASGI send that checkpoints once (as
hypercorn's does), each wrapped as ``VARIANT`` says; run it at N = 2,000 and 4,000 and
divide the difference of callgrind's "Collected" by 2,000: instructions per frame, the
same on a loaded machine as on a quiet one. Variants: ``base`` (the send alone),
``current`` (``move_on_after`` + ``async with trio.Lock()``: proxai before issue 34),
``fastlock`` (the scope, the lock by ``acquire_nowait``), ``barescope`` (a bare
``CancelScope`` with a deadline + the fast lock), ``noscope`` (the fast lock and a start
stamp: proxai after), ``bare`` (a bare scope without deadline), ``onescope`` (one scope,
its deadline set and reset per send), ``stamp`` (the start stamp alone).
"""

from __future__ import annotations

import math
import sys
from typing import Any

import trio


async def asgi_send(msg: dict[str, Any]) -> None:
    await trio.lowlevel.cancel_shielded_checkpoint()


async def locks(variant: str, N: int) -> None:
    lock = trio.Lock()
    data = b'{"type":"response.output_text.delta","delta":"hello"}'
    for _ in range(N):
        if variant == "current":
            with trio.move_on_after(4.0):
                async with lock:
                    await asgi_send(
                        {"type": "websocket.send", "text": data.decode("utf-8", "replace")}
                    )
        elif variant == "fastlock":
            with trio.move_on_after(4.0):
                try:
                    lock.acquire_nowait()
                except trio.WouldBlock:
                    await lock.acquire()
                try:
                    await asgi_send(
                        {"type": "websocket.send", "text": data.decode("utf-8", "replace")}
                    )
                finally:
                    lock.release()
        elif variant == "barescope":
            with trio.CancelScope(deadline=trio.current_time() + 4.0):
                try:
                    lock.acquire_nowait()
                except trio.WouldBlock:
                    await lock.acquire()
                try:
                    await asgi_send(
                        {"type": "websocket.send", "text": data.decode("utf-8", "replace")}
                    )
                finally:
                    lock.release()
        elif variant == "noscope":
            t = trio.current_time()  # noqa: F841 - the stamp a send notes
            try:
                lock.acquire_nowait()
            except trio.WouldBlock:
                await lock.acquire()
            try:
                await asgi_send({"type": "websocket.send", "text": data.decode("utf-8", "replace")})
            finally:
                lock.release()
        elif variant == "base":
            await asgi_send({"type": "websocket.send", "text": data.decode("utf-8", "replace")})


async def scopes(variant: str, N: int) -> None:
    data = b'{"type":"response.output_text.delta","delta":"hello"}'
    if variant == "bare":
        for _ in range(N):
            with trio.CancelScope():
                await asgi_send({"type": "websocket.send", "text": data.decode("utf-8", "replace")})
    elif variant == "onescope":
        with trio.CancelScope() as s:
            for _ in range(N):
                s.deadline = trio.current_time() + 4.0
                await asgi_send({"type": "websocket.send", "text": data.decode("utf-8", "replace")})
                s.deadline = math.inf
    elif variant == "stamp":
        since = None
        for _ in range(N):
            since = trio.current_time()
            await asgi_send({"type": "websocket.send", "text": data.decode("utf-8", "replace")})
            since = None  # noqa: F841 - cleared after the send


if __name__ == "__main__":
    name, count = sys.argv[1], int(sys.argv[2])
    run = scopes if name in ("bare", "onescope", "stamp") else locks
    trio.run(run, name, count)
