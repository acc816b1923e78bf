"""proxai's listening socket takes a burst of new connections without dropping any."""

from __future__ import annotations

import trio

from proxai.config_file import load_config
from proxai.service.server import bind_sockets, hypercorn_config

BURST = 300  # new connections at once, more than hypercorn's default backlog of 100


async def test_a_burst_of_new_connections_is_queued_not_dropped() -> None:
    """A SYN the listen queue has no room for is dropped, and its client waits 1 s (then
    3 s...) to send it again: each connection of a burst over the backlog starts that late."""
    overrides = {
        "server": {"host": "127.0.0.1", "port": 0},
        "upstream": {"base_url": "http://127.0.0.1:1/v1"},
    }
    config = load_config(None, overrides=overrides)
    sockets = bind_sockets(config, hypercorn_config(config))
    (listening,) = sockets.insecure_sockets
    port = listening.getsockname()[1]
    streams: list[trio.SocketStream] = []
    try:
        # Nothing accepts: every connection must fit in the listen queue.
        with trio.fail_after(0.9):  # under the 1 s of a SYN sent again
            async with trio.open_nursery() as nursery:
                for _ in range(BURST):
                    nursery.start_soon(_connect, port, streams)
        assert len(streams) == BURST
    finally:
        for stream in streams:
            await stream.aclose()
        listening.close()


async def _connect(port: int, streams: list[trio.SocketStream]) -> None:
    streams.append(await trio.open_tcp_stream("127.0.0.1", port))
