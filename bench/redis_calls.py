"""What one Redis call costs proxai, in counts that do not depend on the machine's load.

    .venv/bin/python -m bench.redis_calls [--calls 200] [--callgrind]

Starts a ``redis-server`` of its own (``proxai.testing.redis``) and, in this process,
runs ``--calls`` times each of: one ``[limits]`` admission and its finish through
``RedisLimiter`` (the bench's limits: every kind at once), one ``RedisStore.get`` of a
small record, and the same ``GET`` as raw RESP on a trio socket (the floor: what any
client must do). Each under ``cProfile``: the Python function calls per operation,
and the ten functions called most, so where the calls go is named. The round trips are
counted from Redis's own ``INFO commandstats`` (commands per operation).

``--callgrind`` instead runs one kind at a time under ``valgrind --tool=callgrind``,
on one ``redis-server`` started before, once with ``--calls`` and once with none, and
prints the difference in instructions per operation (the interpreter's start-up
cancels out): slow, but the same under load.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import re
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable

import trio

from proxai.config import StateBackend, StateConfig
from proxai.policy.limits import KeyRule
from proxai.state import ResponseStatus, StoredResponse, open_backend
from proxai.testing.redis import open_redis

KINDS = ("limits", "get", "raw")
RULE = KeyRule(
    "*", requests_per_minute=10**8, tokens_per_minute=10**9, max_concurrent_streams=10**5
)
TENANT = "a" * 64


def _record() -> StoredResponse:
    return StoredResponse(
        id="resp_1",
        tenant=TENANT,
        created_at=1_700_000_000.0,
        instructions=None,
        input_items=(b'{"type":"message","role":"user","content":"hi"}',),
        output_items=(b'{"type":"message","id":"msg_1","content":"hello"}',),
        response=b'{"id":"resp_1","object":"response","status":"completed"}',
        status=ResponseStatus.COMPLETED,
    )


async def _commands(port: int, names: str) -> int:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(b"INFO commandstats\r\n")
        data = b""
        while not data.endswith(b"\r\n\r\n") and b"\r\n" not in data[data.find(b"\n") + 1 :]:
            data += await stream.receive_some(65536)
        while True:
            text = data.decode()
            header, _, body = text.partition("\r\n")
            if len(body.encode()) >= int(header[1:]):
                break
            data += await stream.receive_some(65536)
    # Commands a client sent of ``names`` (a script's own are counted by Redis too: its
    # GETs are not the client's).
    sent = re.findall(rf"cmdstat_({names}):calls=(\d+)", body)
    return sum(int(n) for _, n in sent)


async def _raw_get(stream: trio.SocketStream, key: bytes) -> bytes:
    await stream.send_all(b"*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n" % (len(key), key))
    data = b""
    while True:
        data += await stream.receive_some(65536)
        head, sep, rest = data.partition(b"\r\n")
        if sep and (head == b"$-1" or len(rest) >= int(head[1:]) + 2):
            return rest


async def _operations(
    kind: str, port: int, calls: int, profile: cProfile.Profile | None
) -> tuple[int, int]:
    """Run ``calls`` operations of ``kind``; (commands Redis counted, calls made)."""
    config = StateConfig(
        backend=StateBackend.REDIS, url=f"redis://127.0.0.1:{port}/0", key_prefix="b:"
    )
    async with open_backend(config) as backend:
        limiter = backend.limiter(30.0, trio.current_time)
        await backend.store.put(_record())
        key = f"b:resp:{TENANT}:resp_1".encode()
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        n = 0

        async def limits() -> None:
            nonlocal n
            n += 1
            await limiter.admit(TENANT, RULE, f"r{n}", 10**5)
            await limiter.finish(TENANT, RULE, f"r{n}", 10)

        async def get() -> None:
            await backend.store.get(TENANT, "resp_1")

        async def raw() -> None:
            await _raw_get(stream, key)

        one: Callable[[], Awaitable[None]] = {"limits": limits, "get": get, "raw": raw}[kind]
        for _ in range(5):  # warm: scripts loaded, connections made
            await one()
        names = "evalsha|eval" if kind == "limits" else "get"
        before = await _commands(port, names)
        if profile is not None:
            profile.enable()
        for _ in range(calls):
            await one()
        if profile is not None:
            profile.disable()
        after = await _commands(port, names)
        await stream.aclose()
    return after - before, calls


def _part(path: str) -> str:
    """The package a profiled function belongs to (builtins apart)."""
    if "site-packages/" in path:
        return path.split("site-packages/")[1].split("/")[0]
    if "/proxai/" in path:
        return "proxai/" + path.split("/proxai/")[-1]
    if path == "~":
        return "builtins"
    return "stdlib"


async def _profiled(calls: int) -> None:
    async with open_redis() as redis:
        for kind in KINDS:
            profile = cProfile.Profile()
            commands, n = await _operations(kind, redis.port, calls, profile)
            stats = pstats.Stats(profile)
            total = sum(v[1] for v in stats.stats.values())  # type: ignore[attr-defined]
            print(f"{kind}: {total / n:.0f} Python calls, {commands / n:.2f} Redis commands each")
            parts: dict[str, int] = {}
            for (path, _, _), value in stats.stats.items():  # type: ignore[attr-defined]
                part = _part(path)
                parts[part] = parts.get(part, 0) + value[1]
            for part, count in sorted(parts.items(), key=lambda kv: -kv[1]):
                print(f"    {count / n:7.1f}  {part}")


def _callgrind(calls: int) -> None:
    trio.run(_callgrind_on_one_redis, calls)


async def _callgrind_on_one_redis(calls: int) -> None:
    async with open_redis() as redis:
        await trio.to_thread.run_sync(_callgrind_runs, calls, redis.port)


def _callgrind_runs(calls: int, port: int) -> None:
    for kind in KINDS:
        counts = []
        for n in (0, calls):
            with tempfile.TemporaryDirectory() as tmp:
                out = os.path.join(tmp, "cg.out")
                argv = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"]
                argv += [sys.executable, "-m", "bench.redis_calls", "--only", kind]
                argv += ["--calls", str(n), "--port", str(port)]
                subprocess.run(argv, check=True, capture_output=True)
                summary = subprocess.run(
                    ["callgrind_annotate", out], check=True, capture_output=True, text=True
                ).stdout
                found = re.search(r"([\d,]+) \(100\.0%\)\s+PROGRAM TOTALS", summary)
                assert found is not None
                counts.append(int(found.group(1).replace(",", "")))
        per = (counts[1] - counts[0]) / calls
        print(f"{kind}: {per / 1000:.0f} k instructions per operation (callgrind, {calls} calls)")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--callgrind", action="store_true")
    parser.add_argument("--only", choices=KINDS, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.only:
        trio.run(_operations, args.only, args.port, args.calls, None)
    elif args.callgrind:
        _callgrind(args.calls)
    else:
        trio.run(_profiled, args.calls)
    return 0


if __name__ == "__main__":
    sys.exit(main())
