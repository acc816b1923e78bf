"""What ``[limits]`` costs (issue 24): added time to first byte and CPU per stream.

    .venv/bin/python -m bench.limits [--reps 3] [--requests 200] [--concurrency 1 16]

One paced upstream (``bench/upstream.py paced``: 20 deltas 5 ms apart, core 0), one
``redis-server`` (core 0, nothing on disk) and three proxai processes pinned to the
proxy core, measured one after the other in each repetition of the same run:

- ``none``: no ``[limits]``;
- ``memory``: ``[limits]`` on the memory backend;
- ``redis``: the same limits on the Redis backend (one script on admission, one at
  the end, lease renewals batched every ``slot_lease / 3``).

The limits are every kind at once, set high enough that nothing is refused: a ``"*"``
entry with requests and tokens per minute and streams per key, and the fleet's
streams, so every request takes a slot, is logged in the request window and is
charged its tokens. The raw asyncio client (core 0) reads each stream to its end;
TTFB is to the response head. Added TTFB is a target's p50 minus ``none``'s, per
repetition, then the median; CPU per stream is proxai's own CPU (``schedstat``) over
a cell divided by its streams, and Redis's CPU is reported beside it.

Then one admission call, alone (``--calls``, a process of its own on the proxy core,
c=1, :data:`CALLS` calls per layer after a warm-up, layers interleaved over
:data:`CALL_ROUNDS` rounds): the admission script's ``EVALSHA`` as raw RESP bytes on a
plain trio socket; the same through a bare coredis client (``Script`` on
``coredis.Redis``); through proxai's ``RedisConnection.run_script``; and a whole
``admit`` of the Redis backend's limiter. Wall and CPU µs per call (p50), and Redis's
own CPU per call: the differences between the layers are where the time goes.

Every cell, and the calls, run through ``bench.contention.quiet``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from bench.common import (
    DRIVER_CORE,
    PROXY_CORE,
    ROOT,
    Row,
    cpu_ns,
    free_port,
    log,
    machine,
    median,
    pin_driver,
    proxai,
    python_upstream,
    save,
    stop,
    taskset,
    tree,
    wait_port,
    workdir,
)
from bench.contention import quiet
from bench.latency import measure, percentile

DELTAS = 20
INTERVAL = 0.005
LIMITS = """[limits]
fleet_max_concurrent_streams = 100000
[[limits.keys]]
key = "*"
requests_per_minute = 100000000
tokens_per_minute = 1000000000
max_concurrent_streams = 100000
"""
TARGETS = ("none", "memory", "redis")
#: Calls per layer and round in the one-call measure, and its rounds.
CALLS = 1000
CALL_ROUNDS = 3
#: The one-call measure's layers, innermost first.
LAYERS = ("raw", "coredis", "connection", "admit")


def redis_server(wd: Any, port: int) -> subprocess.Popen[bytes]:
    argv = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
    argv += ["--appendonly", "no", "--dir", str(wd), "--loglevel", "warning"]
    return subprocess.Popen(
        taskset(str(DRIVER_CORE), argv), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def one(name: str, port: int, pids: list[int], redis: int, c: int, n: int, rep: int) -> Row:
    def measured() -> tuple[dict[str, list[float]], int, int]:
        before, redis_before = cpu_ns(pids), cpu_ns([redis])
        samples = asyncio.run(measure(port, c, n))
        return samples, cpu_ns(pids) - before, cpu_ns([redis]) - redis_before

    (samples, cpu, redis_cpu), seen = quiet(measured, f"limits {name} c={c}")
    streams = len(samples["ttfb"]) + 2 * c  # the warm-ups count too
    row: Row = {
        "target": name,
        "concurrency": c,
        "rep": rep,
        "n": len(samples["ttfb"]),
        "ttfb_p50_ms": percentile(samples["ttfb"], 50),
        "ttfb_p99_ms": percentile(samples["ttfb"], 99),
        "last_byte_p50_ms": percentile(samples["last_byte"], 50),
        "cpu_us_per_stream": cpu / 1000 / streams,
        "redis_cpu_us_per_stream": redis_cpu / 1000 / streams,
        "contended": seen.contended,
        "other_core": round(seen.other_core, 3),
    }
    log("limits", {k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()})
    return row


def run(
    reps: int, requests: int, concurrency: list[int], calls_per_layer: int = CALLS
) -> dict[str, Any]:
    raw: list[Row] = []
    with (
        python_upstream("paced", deltas=DELTAS, interval=INTERVAL) as (up, _),
        workdir() as wd,
    ):
        rport = free_port()
        redis = redis_server(wd, rport)
        ports = {name: free_port() for name in TARGETS}
        configs = {
            "none": "",
            "memory": LIMITS,
            "redis": f'[state]\nbackend = "redis"\nurl = "redis://127.0.0.1:{rport}/0"\n' + LIMITS,
        }
        # This checkout's proxai, whatever the venv has installed.
        here = (sys.executable, "-m", "proxai")
        processes = [
            proxai(wd, ports[n], up, extra=configs[n].splitlines(), argv_prefix=here)
            for n in TARGETS
        ]
        try:
            for port in (rport, *ports.values()):
                wait_port(port)
            pids = {n: tree(p.pid) for n, p in zip(TARGETS, processes, strict=True)}
            for rep in range(reps):
                for c in concurrency:
                    n = requests if c > 1 else max(50, requests // 4)
                    for name in TARGETS:
                        raw.append(one(name, ports[name], pids[name], redis.pid, c, n, rep))
            stop(processes)
            calls = admission_calls(rport, redis.pid, calls_per_layer)
        finally:
            stop([*processes, redis])
    return {
        "machine": {**machine(), "redis": redis_version()},
        "raw": raw,
        "summary": summarize(raw, concurrency),
        "calls": calls,
        "settings": {
            "reps": reps,
            "requests": requests,
            "concurrency": list(concurrency),
            "deltas": DELTAS,
            "interval_ms": INTERVAL * 1000,
        },
    }


def redis_version() -> str:
    done = subprocess.run(["redis-server", "--version"], capture_output=True, text=True)
    return done.stdout.strip().split(" sha=")[0]


# -- one admission call, layer by layer ------------------------------------------------


def admission_script(prefix: str) -> tuple[Any, list[str], list[str | bytes | int]]:
    """The admission script and one call's keys and arguments as the Redis limiter sends
    them for the bench's rule (every kind of limit, nothing refused; one slot id, so
    the keys stay one entry long). The one place this bench reads the limiter's
    internals: if its script or its keys change, change this."""
    from proxai.state.redis_limits import _ADMIT

    base = f"{prefix}lim:bench:"
    keys = [base + "req", base + "tok", base + "toksum", base + "slots", f"{prefix}lim:slots"]
    args: list[str | bytes | int] = [100_000_000, 1_000_000_000, 100_000, 100_000, 60_000, "s1"]
    return _ADMIT, keys, args


def resp_command(*parts: str | bytes | int) -> bytes:
    """One command as a RESP array of bulk strings."""
    out = [b"*%d\r\n" % len(parts)]
    for part in parts:
        data = part if isinstance(part, bytes) else str(part).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


def resp_end(buffer: bytes, start: int = 0) -> int:
    """Where the RESP reply at ``start`` ends (-1: not all of it is in yet)."""
    line = buffer.find(b"\r\n", start)
    if line < 0:
        return -1
    kind, head = buffer[start : start + 1], buffer[start + 1 : line]
    if kind in (b"+", b"-", b":", b"_", b",", b"#"):
        return line + 2
    if kind in (b"$", b"!", b"="):
        size = int(head)
        if size < 0:
            return line + 2
        end = line + 2 + size + 2
        return end if len(buffer) >= end else -1
    if kind in (b"*", b"~", b">", b"%"):
        count = int(head) * (2 if kind == b"%" else 1)
        at = line + 2
        for _ in range(max(0, count)):
            at = resp_end(buffer, at)
            if at < 0:
                return -1
        return at
    raise ValueError(f"not a RESP reply: {buffer[start : start + 20]!r}")


async def _timed(call: Callable[[], Awaitable[object]], n: int) -> tuple[list[float], list[float]]:
    """Wall and CPU µs of each of ``n`` calls."""
    wall, cpu = [], []
    for _ in range(n):
        t0, c0 = time.perf_counter(), time.process_time()
        await call()
        wall.append((time.perf_counter() - t0) * 1e6)
        cpu.append((time.process_time() - c0) * 1e6)
    return wall, cpu


async def _admission_calls(port: int, redis_pid: int, n: int) -> Row:
    import coredis
    import trio

    from proxai.config import StateBackend, StateConfig
    from proxai.policy.limits import KeyRule
    from proxai.state import open_backend
    from proxai.state.redis import open_redis

    url = f"redis://127.0.0.1:{port}/0"
    config = StateConfig(backend=StateBackend.REDIS, url=url)
    script, keys, args = admission_script(config.key_prefix)
    rule = KeyRule("bench", *args[:3])  # type: ignore[arg-type]
    command = resp_command("EVALSHA", script.sha, len(keys), *keys, *args)
    samples: dict[str, tuple[list[float], list[float], list[int]]] = {
        layer: ([], [], []) for layer in LAYERS
    }
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    bare = coredis.Redis.from_url(url)
    async with (
        stream,
        bare,
        open_redis(config) as connection,
        open_backend(config) as backend,
    ):
        limiter = backend.limiter(60.0, time.monotonic)

        async def raw() -> None:
            await stream.send_all(command)
            reply = b""
            while (end := resp_end(reply)) < 0:
                reply += await stream.receive_some(65536)
            if reply.startswith(b"-") or end != len(reply):
                raise RuntimeError(f"raw EVALSHA: {reply[:80]!r}")

        calls: dict[str, Callable[[], Awaitable[object]]] = {
            "raw": raw,
            "coredis": lambda: script(keys=keys, args=args, client=bare),
            "connection": lambda: connection.run_script(script, keys, args),
            "admit": lambda: limiter.admit("bench", rule, "s1", 100_000),
        }
        await calls["coredis"]()  # loads the script, so that raw EVALSHA finds it
        for _ in range(CALL_ROUNDS):
            for layer in LAYERS:
                await _timed(calls[layer], 50)  # warm-up
                redis_before = cpu_ns([redis_pid])
                wall, cpu = await _timed(calls[layer], n)
                samples[layer][0].extend(wall)
                samples[layer][1].extend(cpu)
                samples[layer][2].append(cpu_ns([redis_pid]) - redis_before)
    out: Row = {"calls": n * CALL_ROUNDS, "rounds": CALL_ROUNDS}
    for layer, (wall, cpu, redis_cpu) in samples.items():
        out[layer] = {
            "wall_p50_us": percentile(wall, 50),
            "wall_p90_us": percentile(wall, 90),
            "cpu_p50_us": percentile(cpu, 50),
            "cpu_mean_us": sum(cpu) / len(cpu),
            "redis_cpu_us": sum(redis_cpu) / 1000 / len(wall),
        }
    return out


def admission_calls(port: int, redis_pid: int, n: int = CALLS) -> Row:
    """The one-call measure in a process of its own on the proxy core (``--calls``)."""
    argv = taskset(str(PROXY_CORE), [sys.executable, "-m", "bench.limits", "--calls"])

    def measured() -> Row:
        done = subprocess.run(
            argv, cwd=ROOT, input=f"{port} {redis_pid} {n}", capture_output=True, text=True
        )
        if done.returncode:
            raise RuntimeError(f"bench.limits --calls failed:\n{done.stderr[-2000:]}")
        row: Row = json.loads(done.stdout)
        return row

    row, seen = quiet(measured, "limits: one admission call, layer by layer")
    row.update(seen.fields())
    log("limits calls", row)
    return row


def calls_main() -> int:
    import trio

    port, redis_pid, n = (int(x) for x in sys.stdin.read().split())
    print(json.dumps(trio.run(_admission_calls, port, redis_pid, n)))
    return 0


def summarize(raw: list[Row], concurrency: list[int]) -> list[Row]:
    out: list[Row] = []
    reps = sorted({r["rep"] for r in raw})
    for c in concurrency:
        base = {r["rep"]: r for r in raw if r["target"] == "none" and r["concurrency"] == c}
        for name in TARGETS:
            rows = [r for r in raw if r["target"] == name and r["concurrency"] == c]
            mine = {r["rep"]: r for r in rows}
            summary: Row = {"target": name, "concurrency": c, "reps": len(rows)}
            for field in ("ttfb_p50_ms", "ttfb_p99_ms", "cpu_us_per_stream"):
                summary[field] = median([r[field] for r in rows])
            summary["redis_cpu_us_per_stream"] = median(
                [r["redis_cpu_us_per_stream"] for r in rows]
            )
            for q in ("p50", "p99"):
                summary[f"added_ttfb_{q}_ms"] = median(
                    [mine[k][f"ttfb_{q}_ms"] - base[k][f"ttfb_{q}_ms"] for k in reps if k in mine]
                )
            summary["cpu_ratio"] = median(
                [
                    mine[k]["cpu_us_per_stream"] / base[k]["cpu_us_per_stream"]
                    for k in reps
                    if k in mine
                ]
            )
            out.append(summary)
    return out


def quick() -> dict[str, Any]:
    return run(1, 40, [1, 4], calls_per_layer=200)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--quick", action="store_true", help="a smoke test: one rep, short")
    parser.add_argument("--calls", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.calls:
        return calls_main()
    pin_driver()
    result = quick() if args.quick else run(args.reps, args.requests, args.concurrency)
    save("limits", result)
    for row in result["summary"]:
        print({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
