"""The per-event bench's upstream: one write per event, as an LLM API streams.

    .venv/bin/python -m bench.event_upstream

Serves ``POST /v1/responses`` (Responses text deltas) and ``POST
/v1/chat/completions`` (Chat Completions chunks) over HTTP/1.1 keep-alive, chunked,
one HTTP chunk and one socket write per event, with the pauses of
:func:`bench.streams.writes` (the variant is named by the request's ``model``). The
head goes out with the first event. A held stream (``ev-hold``) sends its preamble's events
and then nothing until the client closes. Prints its port on stdout.

Plain asyncio on raw sockets rather than proxai's ``ScriptedUpstream`` (h11 on
trio): it shares core 0 with the load generator, and must stay cheap per event so
that it is not what paces the proxies at concurrency 64.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import socket
import sys

from bench.streams import Variant, variant_of, writes

HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
    b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n"
)
NOT_FOUND = b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n"


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


@functools.lru_cache(maxsize=64)
def framed(variant: Variant, shape: str) -> tuple[tuple[bytes, float], ...]:
    """The stream's writes as wire bytes (head on the first, terminator on the last)."""
    out = [(chunk(w.data), w.pause) for w in writes(variant, shape)]
    out[0] = (HEAD + out[0][0], out[0][1])
    if not variant.hold:
        out[-1] = (out[-1][0] + b"0\r\n\r\n", out[-1][1])
    return tuple(out)


async def read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes] | None:
    """(path, body) of the next request, or None when the client closed."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    lines = head.split(b"\r\n")
    path = lines[0].split(b" ")[1]
    length = 0
    for line in lines[1:]:
        if line[:15].lower() == b"content-length:":
            length = int(line[15:])
    try:
        body = await reader.readexactly(length)
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    return path, body


async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        while (request := await read_request(reader)) is not None:
            path, body = request
            shape = {b"/v1/responses": "responses", b"/v1/chat/completions": "chat"}.get(path)
            if shape is None:
                writer.write(NOT_FOUND)
                continue
            variant = variant_of(body)
            for data, pause in framed(variant, shape):
                if pause:
                    await asyncio.sleep(pause)
                writer.write(data)
            if variant.hold:
                await reader.read()  # until the client leaves
                return
    except ConnectionError:
        pass
    finally:
        writer.close()


async def main_async() -> None:
    server = await asyncio.start_server(serve, "127.0.0.1", 0, backlog=4096)
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


def main() -> int:
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main_async())
    return 0


if __name__ == "__main__":
    sys.exit(main())
