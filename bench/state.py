"""The conversation-state bench (issue 23): what stored responses cost the requests that
use them, and the ones that do not.

    .venv/bin/python -m bench.state [--reps 5] [--quick] [--no-profile] [--baseline main]

The per-event bench's upstream (``bench/event_upstream.py``: one write per event, 2 ms
before each delta) serves Chat Completions only (``protocol = "openai_chat"``), so
proxai is the only one that can keep a response. Three proxai processes run at once,
all pinned to the proxy core and driven one at a time, variants interleaved in each
repetition:

- ``memory``: this checkout, ``[state] backend = "memory"`` (the default);
- ``redis``: this checkout, ``backend = "redis"`` against a local ``redis-server``
  (Debian's; on the driver core with the upstream and the client, nothing on disk);
- ``main``: the proxai of ``--baseline`` (a git revision, ``main`` by default: before
  issue 23, no state at all), exported with ``git archive`` and run the same way.

Two figures:

1. **CPU per event and per stream**, from ``/proc/PID/task/*/schedstat`` of the proxai
   serving the cell, at 20 and 80 deltas (the per-event bench's split: the difference
   over 60 deltas, the rest extrapolated to 0 deltas), ``k`` streams per connection on
   ``c`` connections after one warm-up each. Variants: ``main`` (no state),
   ``store-false`` (``memory``, ``store: false``), ``store-true`` (``memory``, the
   default ``store: true``: each response stored before its terminal event goes out)
   and ``store-true-redis`` (``redis``: one Redis script per stream). Ratios to
   ``store-false`` and to ``main`` are taken per repetition; medians.
2. **Time to first byte of a turn that names the previous one**: a stored turn 1
   (``small``: the input ``hi``; ``large``: a 100 KB user message), then turn 2
   (``store: false``, so it stores nothing) sent ``samples`` times on a keep-alive
   connection, three ways on both ``memory`` and ``redis``: ``previous`` (its
   ``previous_response_id`` and one new message: proxai looks turn 1 up and expands
   it), ``inline`` (the same history sent whole, no ``previous_response_id``: the
   upstream gets the same request) and ``fresh`` (the new message alone). p50 and p90
   of every repetition's samples pooled.

3. **One store call**: in a process of its own on the proxy core, ``RedisStore.get``
   (coredis over trio) of a ``small`` and a ``large`` record, back to back, its
   latency and CPU (``time.process_time``), against a raw-socket ``GET`` round trip
   to the same ``redis-server``: what the client library adds to Redis's own time.
   ``--calls-only`` runs this part alone and adds it to the last results.

Then (unless ``--no-profile``) py-spy on the ``memory`` proxai with ``store: true`` and
``store: false`` at both lengths, each sample charged to a part of the work, the
stored path's own code first. Every stream is checked: a well-formed Responses stream
carrying the upstream's text, ending ``response.completed``; every stored turn 1 is
read back (``GET /v1/responses/{id}``) before turn 2 runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import orjson

from bench import pyspy, streams
from bench.common import (
    DRIVER_CORE,
    PROXY_CORE,
    RESULTS,
    ROOT,
    Row,
    connect,
    cpu_ns,
    exchange,
    free_port,
    loadavg,
    log,
    machine,
    median,
    pin_driver,
    proxai,
    save,
    stop,
    taskset,
    tree,
    wait_port,
    workdir,
)
from bench.contention import quiet, watch
from bench.latency import percentile
from bench.perevent import B_LAUNCHER, PAUSE, TIMEOUTS, check_responses, event_upstream
from bench.streams import Variant

LENGTHS = (20, 80)
CONCURRENCY = (1, 4, 16)
#: Streams per connection at each concurrency: twice the per-event bench's, since the
#: differences looked for here are small against the whole stream's CPU.
STREAMS_PER_CONNECTION = {1: 24, 4: 12, 16: 6}
#: CPU variants: (name, proxai, store)
CPU_VARIANTS = (
    ("main", "main", False),
    ("store-false", "memory", False),
    ("store-true", "memory", True),
    ("store-true-redis", "redis", True),
)
TTFB_MODES = ("previous", "inline", "fresh")
SIZES = {"small": 0, "large": 100_000}
#: proxai run as ``python -m proxai`` from this checkout (not the venv's script)
LAUNCHER = (sys.executable, "-m", "proxai")
NEXT_MESSAGE = {"type": "message", "role": "user", "content": "go on"}
#: The stored path's own code, charged before pyspy's generic parts.
PARTS = (
    ("/proxai/service/storing.py", "state: StoringDownstream (follows the answer)"),
    ("/proxai/protocols/responses/record.py", "state: ResponseRecord (items from events)"),
    ("/proxai/service/conversations.py", "state: Conversations (prepare, save)"),
    ("/proxai/state/", "state: the store"),
    ("/coredis/", "state: coredis"),
    *pyspy.PARTS,
)


@attrs.frozen
class Proxy:
    name: str
    port: int
    pids: tuple[int, ...]


# -- processes ------------------------------------------------------------------------


@contextmanager
def redis_server() -> Iterator[tuple[int, int]]:
    """``redis-server`` on loopback, on the driver core, nothing on disk: (port, pid)."""
    server = shutil.which("redis-server")
    if server is None:
        raise SystemExit("redis-server not found: run `make redis`, which installs it")
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="proxai-bench-redis-") as directory:
        argv = [
            server,
            *("--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"),
            *("--dir", directory, "--protected-mode", "no", "--loglevel", "warning"),
        ]
        process = subprocess.Popen(
            taskset(str(DRIVER_CORE), argv), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            wait_port(port)
            yield port, process.pid
        finally:
            stop([process])


@contextmanager
def exported(revision: str) -> Iterator[Path]:
    """``proxai/`` of ``revision``, exported from this repository into a temporary
    directory (a checkout to run, nothing to build)."""
    with tempfile.TemporaryDirectory(prefix="proxai-bench-baseline-") as directory:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", revision, "proxai"],
            capture_output=True,
            check=True,
        )
        subprocess.run(["tar", "-x", "-C", directory], input=archive.stdout, check=True)
        yield Path(directory)


@contextmanager
def bench_setup(baseline: str) -> Iterator[tuple[dict[str, Proxy], int, str]]:
    """The upstream, Redis and the three proxai: (proxies by name, the upstream's pid,
    the baseline's commit)."""
    upstream_process, upstream = event_upstream()
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", baseline],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    with ExitStack() as stack:
        stack.callback(stop, [upstream_process])
        redis_port, _ = stack.enter_context(redis_server())
        checkout = stack.enter_context(exported(baseline))
        wd = stack.enter_context(workdir())
        redis_state = ["[state]", 'backend = "redis"', f'url = "redis://127.0.0.1:{redis_port}/0"']
        launchers = {
            "memory": (LAUNCHER, ()),
            "redis": (LAUNCHER, redis_state),
            "main": ((sys.executable, "-c", B_LAUNCHER, str(checkout)), ()),
        }
        processes: list[subprocess.Popen[bytes]] = []
        stack.callback(stop, processes)
        ports = {}
        for name, (launcher, extra) in launchers.items():
            ports[name] = free_port()
            processes.append(
                proxai(
                    wd,
                    ports[name],
                    upstream,
                    timeouts=TIMEOUTS,
                    protocol="openai_chat",
                    argv_prefix=launcher,
                    extra=extra,
                )
            )
        for port in ports.values():
            wait_port(port)
        proxies = {
            name: Proxy(name, ports[name], tuple(tree(process.pid)))
            for name, process in zip(launchers, processes, strict=True)
        }
        yield proxies, upstream_process.pid, commit


# -- requests -------------------------------------------------------------------------


def request(
    port: int,
    body: dict[str, Any] | None = None,
    method: bytes = b"POST",
    path: bytes = b"/v1/responses",
) -> bytes:
    data = orjson.dumps(body) if body is not None else b""
    return (
        b"%s %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
        b"Content-Type: application/json\r\nAuthorization: Bearer sk-client\r\n"
        b"Content-Length: %d\r\n\r\n" % (method, path, port, len(data))
    ) + data


def stream_body(variant: Variant, store: bool, **fields: Any) -> dict[str, Any]:
    return {"model": variant.model, "stream": True, "store": store, "input": "hi", **fields}


def check(response: Any, variant: Variant) -> str | None:
    if not response.complete or response.status != 200:
        return f"incomplete (status {response.status})"
    return check_responses(bytes(response.body), "".join(streams.answer(variant.deltas)))


# -- CPU per event and per stream -----------------------------------------------------


async def _cpu_cell(proxy: Proxy, store: bool, variant: Variant, c: int, k: int) -> Row:
    port = proxy.port
    body = request(port, stream_body(variant, store))
    warm = request(port, stream_body(Variant(2, 0.0), store))
    connections = await asyncio.gather(*(connect(port) for _ in range(c)))
    responses: list[Any] = []
    try:
        await asyncio.gather(*(exchange(r, w, warm, keep_body=False) for r, w in connections))
        await asyncio.sleep(0.05)  # the warm-up's tail (log, metrics) before the count
        cpu0, t0 = cpu_ns(proxy.pids), time.perf_counter()

        async def run(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            for _ in range(k):
                responses.append(await exchange(reader, writer, body))

        await asyncio.gather(*(run(r, w) for r, w in connections))
        wall = time.perf_counter() - t0
        await asyncio.sleep(0.05)  # the last streams' tail
        cpu = (cpu_ns(proxy.pids) - cpu0) / 1e9
    finally:
        for _, writer in connections:
            writer.close()
    bad = [p for p in (check(r, variant) for r in responses) if p]
    return {
        "streams": len(responses),
        "cpu_s": cpu,
        "wall_s": wall,
        "cpu_per_stream_us": cpu / len(responses) * 1e6,
        "utilisation": cpu / wall,
        "ttfb_ms": median([r.first_byte * 1000 for r in responses]),
        "bad": len(bad),
        "problem": bad[0] if bad else None,
    }


def _run_cpu_cell(proxy: Proxy, store: bool, variant: Variant, c: int) -> Row:
    return asyncio.run(_cpu_cell(proxy, store, variant, c, STREAMS_PER_CONNECTION[c]))


def cpu_cells(proxies: dict[str, Proxy], reps: int, cs: Sequence[int]) -> list[Row]:
    raw: list[Row] = []
    for _, proxy, store in CPU_VARIANTS:  # warm up each, and check a paced stream
        asyncio.run(_cpu_cell(proxies[proxy], store, Variant(4, PAUSE), 2, 2))
    for rep in range(reps):
        for c in cs:
            shift = (rep + c) % len(CPU_VARIANTS)  # no variant always runs first
            for name, proxy, store in CPU_VARIANTS[shift:] + CPU_VARIANTS[:shift]:
                for deltas in LENGTHS:
                    row: Row = {"variant": name, "concurrency": c, "deltas": deltas, "rep": rep}
                    measured, seen = quiet(
                        partial(_run_cpu_cell, proxies[proxy], store, Variant(deltas, PAUSE), c),
                        f"state {name} c={c} deltas={deltas}",
                    )
                    row.update(measured)
                    row.update(contended=seen.contended, other_core=round(seen.other_core, 3))
                    log("state cpu", {k: _round(v) for k, v in row.items()})
                    raw.append(row)
    return raw


def _split(raw: list[Row], variant: str, c: int) -> dict[int, tuple[float, float, float]]:
    """Per repetition: (per event µs, per stream µs, proxy core busy at 80 deltas)."""
    out = {}
    for rep in sorted({r["rep"] for r in raw}):
        cells = {
            r["deltas"]: r
            for r in raw
            if (r["variant"], r["concurrency"], r["rep"]) == (variant, c, rep)
        }
        if set(cells) != set(LENGTHS):
            continue
        short, long = cells[LENGTHS[0]], cells[LENGTHS[1]]
        marginal = (long["cpu_per_stream_us"] - short["cpu_per_stream_us"]) / (
            LENGTHS[1] - LENGTHS[0]
        )
        out[rep] = (
            marginal,
            short["cpu_per_stream_us"] - LENGTHS[0] * marginal,
            long["utilisation"],
        )
    return out


def cpu_summary(raw: list[Row]) -> list[Row]:
    """Per variant and concurrency: medians over repetitions, the ratios to
    ``store-false`` and ``main`` per repetition, and the difference to ``store-false``."""
    summary = []
    for c in sorted({r["concurrency"] for r in raw}):
        split = {name: _split(raw, name, c) for name, _, _ in CPU_VARIANTS}
        for name, _, _ in CPU_VARIANTS:
            mine = split[name]
            row: Row = {
                "variant": name,
                "concurrency": c,
                "reps": len(mine),
                "marginal_us": median([m[0] for m in mine.values()]),
                "fixed_us": median([m[1] for m in mine.values()]),
                "utilisation_long": median([m[2] for m in mine.values()]),
            }
            for base in ("store-false", "main"):
                theirs = split[base]
                common = set(mine) & set(theirs)
                for i, key in ((0, "marginal"), (1, "fixed")):
                    row[f"{key}_vs_{base}"] = median(
                        [mine[r][i] / theirs[r][i] for r in common if theirs[r][i] > 0]
                    )
                    row[f"{key}_minus_{base}_us"] = median(
                        [mine[r][i] - theirs[r][i] for r in common]
                    )
            summary.append(row)
    return summary


# -- time to first byte of a chained turn ---------------------------------------------


@attrs.frozen
class Turn1:
    """A stored turn 1: its id, input and output items."""

    response_id: str
    input: tuple[Any, ...]
    output: tuple[Any, ...]


async def stored_turn1(proxy: Proxy, size: int) -> Turn1:
    """Turn 1, stored, then read back (it must be there before turn 2 is timed)."""
    text = "hi" if not size else "x" * size
    first = ({"type": "message", "role": "user", "content": text},)
    variant = Variant(20, 0.0)
    reader, writer = await connect(proxy.port)
    try:
        r = await exchange(
            reader, writer, request(proxy.port, stream_body(variant, True, input=list(first)))
        )
        if problem := check(r, variant):
            raise RuntimeError(f"{proxy.name}: turn 1: {problem}")
        events = [
            orjson.loads(e.split(b"data: ", 1)[1])
            for e in bytes(r.body).split(b"\n\n")
            if b"data: " in e
        ]
        rid = events[-1]["response"]["id"]
        output = tuple(e["item"] for e in events if e["type"] == "response.output_item.done")
        path = f"/v1/responses/{rid}".encode()
        got = await exchange(reader, writer, request(proxy.port, None, b"GET", path))
        if got.status != 200 or orjson.loads(bytes(got.body)).get("id") != rid:
            raise RuntimeError(f"{proxy.name}: turn 1 was not stored (GET: {got.status})")
    finally:
        writer.close()
    return Turn1(rid, first, output)


def turn2_body(turn1: Turn1, mode: str, variant: Variant) -> dict[str, Any]:
    if mode == "previous":
        return stream_body(
            variant, False, previous_response_id=turn1.response_id, input=[NEXT_MESSAGE]
        )
    if mode == "inline":
        return stream_body(variant, False, input=[*turn1.input, *turn1.output, NEXT_MESSAGE])
    return stream_body(variant, False, input=[NEXT_MESSAGE])


async def _ttfb_cell(
    proxy: Proxy, body: dict[str, Any], variant: Variant, c: int, samples: int
) -> Row:
    data = request(proxy.port, body)
    connections = await asyncio.gather(*(connect(proxy.port) for _ in range(c)))
    ttfb: list[float] = []
    problems: list[str] = []
    left = samples
    try:
        await asyncio.gather(*(exchange(r, w, data, keep_body=False) for r, w in connections))

        async def run(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal left
            while left > 0:
                left -= 1
                r = await exchange(reader, writer, data)
                ttfb.append(r.first_byte * 1000)
                if problem := check(r, variant):
                    problems.append(problem)

        await asyncio.gather(*(run(r, w) for r, w in connections))
    finally:
        for _, writer in connections:
            writer.close()
    return {"ttfb_ms": ttfb, "bad": len(problems), "problem": problems[0] if problems else None}


def ttfb_cells(proxies: dict[str, Proxy], reps: int, cs: Sequence[int], samples: int) -> list[Row]:
    variant = Variant(2, PAUSE)  # a short paced answer: only its first byte is timed
    turns = {
        (name, size): asyncio.run(stored_turn1(proxies[name], SIZES[size]))
        for name in ("memory", "redis")
        for size in SIZES
    }
    combos = [(name, mode) for name in ("memory", "redis") for mode in TTFB_MODES]
    raw: list[Row] = []
    for rep in range(reps):
        for c in cs:
            for size in SIZES:
                shift = (rep + c) % len(combos)
                for name, mode in combos[shift:] + combos[:shift]:
                    body = turn2_body(turns[(name, size)], mode, variant)
                    row: Row = {
                        "backend": name,
                        "mode": mode,
                        "size": size,
                        "concurrency": c,
                        "rep": rep,
                        "request_bytes": len(orjson.dumps(body)),
                    }
                    row.update(asyncio.run(_ttfb_cell(proxies[name], body, variant, c, samples)))
                    shown = {**row, "ttfb_ms": percentile(row["ttfb_ms"], 50)}
                    log("state ttfb (p50)", {k: _round(v) for k, v in shown.items()})
                    raw.append(row)
    return raw


def ttfb_summary(raw: list[Row]) -> list[Row]:
    """Per backend, size, concurrency and mode: p50 and p90 of the pooled samples, and
    the p50 against ``inline`` and ``fresh`` on the same backend and against
    ``previous`` on the memory backend."""
    out = []
    keys = sorted({(r["size"], r["concurrency"]) for r in raw})
    for size, c in keys:
        pooled: dict[tuple[str, str], list[float]] = {}
        for name in ("memory", "redis"):
            for mode in TTFB_MODES:
                rows = [
                    r
                    for r in raw
                    if (r["backend"], r["mode"], r["size"], r["concurrency"])
                    == (name, mode, size, c)
                ]
                pooled[(name, mode)] = [s for r in rows for s in r["ttfb_ms"]]
        for name in ("memory", "redis"):
            for mode in TTFB_MODES:
                mine = pooled[(name, mode)]
                p50 = percentile(mine, 50)
                out.append(
                    {
                        "backend": name,
                        "mode": mode,
                        "size": size,
                        "concurrency": c,
                        "samples": len(mine),
                        "p50_ms": p50,
                        "p90_ms": percentile(mine, 90),
                        "p50_minus_inline_ms": p50 - percentile(pooled[(name, "inline")], 50),
                        "p50_minus_fresh_ms": p50 - percentile(pooled[(name, "fresh")], 50),
                        "p50_minus_memory_ms": p50 - percentile(pooled[("memory", mode)], 50),
                    }
                )
    return out


# -- one store call -------------------------------------------------------------------

CALLS = 2000


async def _store_calls(url: str, port: int) -> Row:
    import socket

    from proxai.config import StateBackend, StateConfig
    from proxai.state import StoredResponse, open_store

    out: Row = {}
    config = StateConfig(backend=StateBackend.REDIS, url=url)
    async with open_store(config) as store:
        for size, length in SIZES.items():
            text = b"hi" if not length else b"x" * length
            record = StoredResponse(
                id=f"resp_bench_{size}",
                tenant="bench",
                created_at=time.time(),
                instructions=None,
                input_items=(b'{"type":"message","role":"user","content":"' + text + b'"}',),
                output_items=(b'{"type":"message","id":"msg_1","role":"assistant","content":[]}',),
                response=b'{"id":"resp_bench"}',
                status="completed",
            )
            await store.put(record)
            latency, cpu = [], []
            for i in range(CALLS + 50):
                t0, c0 = time.perf_counter(), time.process_time()
                got = await store.get("bench", record.id)
                if i >= 50:  # after a warm-up
                    latency.append((time.perf_counter() - t0) * 1000)
                    cpu.append((time.process_time() - c0) * 1e6)
                if got is None:
                    raise RuntimeError("the stored record is gone")
            out[size] = {
                "record_bytes": len(record.to_bytes()),
                "p50_ms": percentile(latency, 50),
                "p90_ms": percentile(latency, 90),
                "cpu_p50_us": percentile(cpu, 50),
            }
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    command = b"*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n"
    raw = []
    with sock:
        for i in range(CALLS + 50):
            key = b"proxai:bench:nothing"
            t0 = time.perf_counter()
            sock.sendall(command % (len(key), key))
            sock.recv(65536)
            if i >= 50:
                raw.append((time.perf_counter() - t0) * 1000)
    out["raw_get"] = {"p50_ms": percentile(raw, 50), "p90_ms": percentile(raw, 90)}
    return out


def store_calls() -> Row:
    """Figure 3, in a process of its own on the proxy core (``--calls``)."""
    argv = taskset(str(PROXY_CORE), [sys.executable, "-m", "bench.state", "--calls"])
    with redis_server() as (port, _):
        done, seen = quiet(
            lambda: subprocess.run(
                argv, cwd=ROOT, input=str(port), capture_output=True, text=True, check=True
            ),
            "state: one store call",
        )
    row: Row = {**json.loads(done.stdout), **seen.fields()}
    log("state store calls", row)
    return row


def calls_main() -> int:
    import trio

    port = int(sys.stdin.read())
    row = trio.run(_store_calls, f"redis://127.0.0.1:{port}/0", port)
    print(json.dumps(row))
    return 0


# -- the profile ----------------------------------------------------------------------


async def _load(port: int, body: bytes, c: int, seconds: float) -> int:
    """Streams back to back on ``c`` connections for ``seconds``; how many."""
    done = 0
    deadline = time.perf_counter() + seconds

    async def one() -> None:
        nonlocal done
        reader, writer = await connect(port)
        try:
            while time.perf_counter() < deadline:
                await exchange(reader, writer, body, keep_body=False)
                done += 1
        finally:
            writer.close()

    await asyncio.gather(*(one() for _ in range(c)))
    return done


def profile(proxy: Proxy, seconds: int, c: int) -> dict[str, Any]:
    """py-spy on the memory proxai, ``store: true`` and ``store: false``, both lengths."""
    RESULTS.mkdir(exist_ok=True)
    out: dict[str, Any] = {"concurrency": c, "seconds": seconds}
    for store in (True, False):
        runs: dict[int, dict[str, Any]] = {}
        for deltas in LENGTHS:
            body = request(proxy.port, stream_body(Variant(deltas, PAUSE), store))
            asyncio.run(_load(proxy.port, body, c, 1.0))  # warm up
            raw = RESULTS / f"pyspy-state-store-{str(store).lower()}-{deltas}.txt"
            spy = pyspy.record(proxy.pids[0], seconds + 1, 250, raw)
            time.sleep(0.5)
            with watch() as seen:  # marked if contended, not rerun (as bench/pyspy.py)
                cpu0 = cpu_ns(proxy.pids)
                done = asyncio.run(_load(proxy.port, body, c, seconds))
                cpu = (cpu_ns(proxy.pids) - cpu0) / 1e9
            spy.wait()
            totals, leaves = pyspy.parts(raw, PARTS)
            runs[deltas] = {
                "streams": done,
                "cpu_s": cpu,
                "samples": totals,
                "leaves": leaves,
                **seen.fields(),
            }
        key = f"store-{str(store).lower()}"
        out[key] = {"runs": runs, "parts": pyspy.split(runs)}
        log(
            "state profile",
            key,
            [
                (r["part"], round(r["per_event_us"], 1), round(r["per_stream_us"]))
                for r in out[key]["parts"]
            ],
        )
    return out


# -- the run --------------------------------------------------------------------------


def _round(value: Any) -> Any:
    return round(value, 4) if isinstance(value, float) else value


def run(
    reps: int,
    concurrency: Sequence[int] = CONCURRENCY,
    ttfb_concurrency: Sequence[int] = (1, 4),
    samples: int = 100,
    profile_seconds: int = 8,
    baseline: str = "main",
) -> dict[str, Any]:
    started, load_before = time.monotonic(), loadavg()
    with bench_setup(baseline) as (proxies, _upstream_pid, commit):
        raw = cpu_cells(proxies, reps, concurrency)
        ttfb = ttfb_cells(proxies, reps, ttfb_concurrency, samples)
        spy = profile(proxies["memory"], profile_seconds, 4) if profile_seconds else None
    calls = store_calls()
    redis_version = subprocess.run(
        ["redis-server", "--version"], capture_output=True, text=True, check=False
    ).stdout.strip()
    rows = [*raw, *ttfb]
    return {
        "raw": raw,
        "cpu": cpu_summary(raw),
        "ttfb_raw": ttfb,
        "ttfb": ttfb_summary(ttfb),
        "profile": spy,
        "calls": calls,
        "checks": {
            "cells": len(rows),
            "streams": sum(r["streams"] for r in raw) + sum(len(r["ttfb_ms"]) for r in ttfb),
            "bad": sum(r["bad"] for r in rows),
            "problems": sorted({str(r["problem"]) for r in rows if r["problem"]}),
        },
        "machine": {**machine(), "redis": redis_version, "baseline": f"{baseline} ({commit})"},
        "settings": {
            "pause_ms": PAUSE * 1000,
            "lengths": list(LENGTHS),
            "concurrency": list(concurrency),
            "streams_per_connection": STREAMS_PER_CONNECTION,
            "ttfb_concurrency": list(ttfb_concurrency),
            "samples": samples,
            "sizes": SIZES,
            "reps": reps,
            "profile_seconds": profile_seconds,
        },
        "wall_s": time.monotonic() - started,
        "loadavg": [load_before, loadavg()],
    }


def quick() -> dict[str, Any]:
    return run(1, (1, 4), (1,), 20, 2)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="one rep, c=1 and 4, few samples")
    parser.add_argument("--no-profile", action="store_true")
    parser.add_argument("--baseline", default="main", help="the git revision without state")
    parser.add_argument("--calls-only", action="store_true", help="figure 3 alone, added")
    parser.add_argument("--calls", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.calls:
        return calls_main()
    pin_driver()
    if args.calls_only:
        last = json.loads((RESULTS / "state.json").read_text())
        last["calls"] = store_calls()
        save("state", last)
        return 0
    if args.quick:
        result = quick()
    else:
        seconds = 0 if args.no_profile else 8
        result = run(args.reps, profile_seconds=seconds, baseline=args.baseline)
    save("state", result)
    for row in [*result["cpu"], *result["ttfb"]]:
        print({k: _round(v) for k, v in row.items()})
    print(json.dumps(result["checks"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
