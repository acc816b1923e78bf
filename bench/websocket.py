"""The Responses WebSocket bench (issue 22): a socket's turns against SSE streams.

    .venv/bin/python -m bench.websocket [--reps 5] [--quick] [--no-profile]

One proxai, pinned to the proxy core, in front of the per-event bench's upstream
(``bench/event_upstream.py``: one write per event, 2 ms before each delta), serves
both transports in the same run:

- ``sse``: ``POST /v1/responses`` streams, several per keep-alive connection;
- ``socket``: ``GET /v1/responses`` upgraded, several ``response.create`` turns per
  socket, each read frame by frame until ``response.completed`` (proxai relays each
  turn as one streaming POST to the upstream and re-frames every SSE event as one
  text frame);
- ``socket-deflate``: the same with permessage-deflate negotiated (what Codex and the
  ``websockets`` library, under the openai SDK, offer by default);
- the floor, ``floor-sse`` and ``floor-socket``: hypercorn alone on the proxy core
  (``bench/floor_apps.py``'s ``socket_paced``, no upstream, no proxai) sending the same
  paced events itself, as SSE body sends or as text frames: what the stack's WebSocket
  send costs against its SSE send, the way ``hypercorn-paced`` measures HTTP's. Only
  in the CPU cells.

The clients run in their own process (``--client``, a loop of JSON commands on stdin)
on the driver core, with the upstream: the HTTP client is the per-event bench's raw
asyncio one, the socket client raw ``wsproto`` on asyncio streams. Three figures:

1. **CPU per event and per stream**, from ``/proc/PID/task/*/schedstat`` of proxai,
   at 20 and 80 deltas (the per-event bench's split: the difference over 60 deltas,
   and the rest extrapolated to 0 deltas), ``k`` turns per connection on ``c``
   connections after one warm-up each; the socket's turns are independent (no
   ``previous_response_id``), so both transports send the upstream the same request.
   Ratios socket / SSE are taken per repetition; medians.
2. **Time to the first event of a session's second turn**: a session opens a
   connection (or a socket), runs turn 1, then turn 2. Over the socket turn 2 is
   ``previous_response_id`` plus one new message (``store: false``, as Codex sends it:
   proxai expands the socket's conversation); over HTTP it is a new ``POST`` on the
   keep-alive connection carrying the whole context (what a client without server
   state sends). Median and p90, in the same run; turn 1's (connection included) too.
3. **Where the socket's time goes**: py-spy (``bench/pyspy.py``) on proxai, both
   transports at 20 and 80 deltas, each sample charged to a part of the work.

Every turn is checked: an SSE body must equal the upstream's bytes; a socket turn's
frames must be, one for one, the ``data`` of the upstream's events (so they end with
``response.completed``, count sequence numbers from 0 and spell the text).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from typing import Any

import attrs
import orjson
import wsproto
import wsproto.events as ws

from bench import pyspy, streams
from bench.common import (
    DRIVER_CORE,
    RESULTS,
    ROOT,
    Row,
    connect,
    cpu_ns,
    exchange,
    free_port,
    hypercorn_app,
    log,
    machine,
    median,
    pin_driver,
    post_request,
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
from bench.perevent import PAUSE, TIMEOUTS, event_upstream
from bench.streams import Variant

LENGTHS = (20, 80)
CONCURRENCY = (1, 4, 16)
#: turns per connection at each concurrency (the per-event bench's)
TURNS_PER_CONNECTION = {1: 12, 4: 6, 16: 3, 64: 2}
TRANSPORTS = ("sse", "socket", "socket-deflate")
#: hypercorn alone sending the events (the floor), and the transport a lane speaks to it
FLOOR = {"floor-sse": "sse", "floor-socket": "socket"}
CPU_TRANSPORTS = (*TRANSPORTS, *FLOOR)
SOCKET = {"socket": False, "socket-deflate": True}  # transport: permessage-deflate
TERMINALS = {"response.completed", "response.failed", "response.incomplete"}
#: proxai run as ``python -m proxai`` from this checkout (not the venv's script)
LAUNCHER = (sys.executable, "-m", "proxai")
#: The socket path's own code, charged before pyspy's generic parts.
PARTS = (
    ("/proxai/service/socket_io.py", "socket: TurnDownstream, ClientSocket.send_text"),
    ("/proxai/service/socket", "socket: endpoint, turn loop"),
    ("/proxai/protocols/responses/socket.py", "socket: TurnRecord (state from events)"),
    ("/wsproto/", "wsproto: framing (and deflate's caller)"),
    ("/hypercorn/protocol/ws_stream.py", "hypercorn: WebSocket stream"),
    *pyspy.PARTS,
)
FIRST_MESSAGE = {"type": "message", "role": "user", "content": "hi"}
NEXT_MESSAGE = {"type": "message", "role": "user", "content": "go on"}


# -- the client process ---------------------------------------------------------------


def expected_frames(variant: Variant) -> list[bytes]:
    """The ``data`` of each upstream event: what a socket turn's frames must be."""
    out = []
    for event in streams.responses_events(variant):
        data = [line[6:] for line in event.split(b"\n") if line.startswith(b"data: ")]
        out.append(data[0])
    return out


class Socket:
    """A Responses WebSocket client: raw wsproto on an asyncio connection."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, deflate: bool
    ) -> None:
        self.reader, self.writer = reader, writer
        self.conn = wsproto.WSConnection(wsproto.ConnectionType.CLIENT)
        self.deflate = deflate
        self._parts: list[str] = []
        self._ready: list[str] = []

    @classmethod
    async def open(cls, port: int, deflate: bool) -> Socket:
        reader, writer = await connect(port)
        self = cls(reader, writer, deflate)
        extensions: list[Any] = []
        if deflate:
            from wsproto.extensions import PerMessageDeflate

            extensions.append(PerMessageDeflate())
        writer.write(
            self.conn.send(
                ws.Request(
                    host=f"127.0.0.1:{port}",
                    target="/v1/responses",
                    extra_headers=[(b"authorization", b"Bearer sk-client")],
                    extensions=extensions,
                )
            )
        )
        while True:
            data = await reader.read(65536)
            if not data:
                raise RuntimeError("closed during the handshake")
            self.conn.receive_data(data)
            for event in self.conn.events():
                if isinstance(event, ws.AcceptConnection):
                    if deflate and not event.extensions:
                        raise RuntimeError("permessage-deflate was not accepted")
                    return self
                if isinstance(event, ws.RejectConnection):
                    raise ConnectionError(f"upgrade refused: {event.status_code}")

    async def frame(self) -> str:
        """The next whole text message."""
        while not self._ready:
            data = await self.reader.read(262144)
            if not data:
                raise RuntimeError("the socket closed mid-turn")
            self.conn.receive_data(data)
            for event in self.conn.events():
                if isinstance(event, ws.TextMessage):
                    self._parts.append(event.data)
                    if event.message_finished:
                        self._ready.append("".join(self._parts))
                        self._parts.clear()
                elif isinstance(event, ws.Ping):
                    self.writer.write(self.conn.send(event.response()))
                elif isinstance(event, ws.CloseConnection):
                    raise ConnectionError(f"closed by proxai: {event.code} {event.reason}")
        return self._ready.pop(0)

    async def turn(self, frame: bytes) -> tuple[list[str], float, float]:
        """Send one ``response.create``; (its frames, first frame s, last frame s)."""
        t0 = time.perf_counter()
        self.writer.write(self.conn.send(ws.TextMessage(data=frame.decode())))
        frames: list[str] = []
        first = float("nan")
        while True:
            text = await self.frame()
            if not frames:
                first = time.perf_counter() - t0
            frames.append(text)
            kind = orjson.loads(text).get("type")
            if kind in TERMINALS or (kind == "error" and len(frames) == 1):
                return frames, first, time.perf_counter() - t0

    def close(self) -> None:
        with_close = self.conn.state is wsproto.connection.ConnectionState.OPEN
        if with_close:
            self.writer.write(self.conn.send(ws.CloseConnection(code=1000)))
        self.writer.close()


def create_frame(variant: Variant, **fields: Any) -> bytes:
    return orjson.dumps({"type": "response.create", "model": variant.model, **fields})


def check_frames(frames: list[str], variant: Variant) -> str | None:
    """Why a socket turn's frames are not the upstream's events, one for one."""
    want = expected_frames(variant)
    got = [f.encode() for f in frames]
    if got == want:
        return None
    if orjson.loads(got[-1]).get("type") != "response.completed":
        return f"ends with {orjson.loads(got[-1]).get('type')}"
    if len(got) != len(want):
        return f"{len(got)} frames for {len(want)} events"
    bad = next(i for i, (g, w) in enumerate(zip(got, want, strict=True)) if g != w)
    return f"frame {bad} differs from the upstream's event"


class Lane:
    """One connection of a transport: runs turns and checks them."""

    def __init__(self, transport: str, port: int, fields: dict[str, Any] | None = None) -> None:
        """``fields``: more of the request's fields (``store``, say), in either transport."""
        self.transport, self.port = transport, port
        self.fields = fields or {}
        self.problems: list[str] = []
        self.turns = 0

    async def __aenter__(self) -> Lane:
        if self.transport == "sse":
            self.reader, self.writer = await connect(self.port)
        else:
            self.socket = await Socket.open(self.port, SOCKET[self.transport])
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.transport == "sse":
            self.writer.close()
        else:
            self.socket.close()

    async def run(self, variant: Variant, check: bool = True) -> float:
        """One independent turn; seconds to its first event."""
        self.turns += 1
        if self.transport == "sse":
            body = streams.request_body(variant, "responses")
            if self.fields:
                body = json.dumps({**json.loads(body), **self.fields}).encode()
            r = await exchange(self.reader, self.writer, post_request(self.port, body=body))
            if check and (not r.complete or r.status != 200):
                self.problems.append(f"sse: incomplete (status {r.status})")
            elif check and bytes(r.body) != streams.body(variant, "responses"):
                self.problems.append("sse: bytes differ from the upstream's")
            return r.first_event
        frames, first, _ = await self.socket.turn(create_frame(variant, input="hi", **self.fields))
        if check and (problem := check_frames(frames, variant)):
            self.problems.append(f"{self.transport}: {problem}")
        return first


async def cpu_cell(cmd: dict[str, Any]) -> Row:
    """``k`` turns on each of ``c`` connections (after a warm-up turn each): proxai's CPU,
    and the driver core's (this process and the upstream) for its utilisation."""
    variant = Variant(cmd["deltas"], cmd["pause"])
    pids, core0 = cmd["pids"], [os.getpid(), cmd["upstream_pid"]]
    speaks = FLOOR.get(cmd["transport"], cmd["transport"])
    lanes = [Lane(speaks, cmd["port"]) for _ in range(cmd["c"])]
    for lane in lanes:
        await lane.__aenter__()
    try:
        await asyncio.gather(*(lane.run(Variant(2, 0.0), check=False) for lane in lanes))
        await asyncio.sleep(0.05)  # the warm-up's tail (log, metrics) before the count
        cpu0, drv0, t0 = cpu_ns(pids), cpu_ns(core0), time.perf_counter()
        deadline = t0 + cmd.get("seconds", 0)

        async def run(lane: Lane) -> None:
            if cmd.get("seconds"):  # the profile's load: turns until the deadline
                while time.perf_counter() < deadline:
                    await lane.run(variant)
            else:
                for _ in range(cmd["k"]):
                    await lane.run(variant)

        await asyncio.gather(*(run(lane) for lane in lanes))
        wall = time.perf_counter() - t0
        await asyncio.sleep(0.05)  # the last turns' tail
        cpu, driver = (cpu_ns(pids) - cpu0) / 1e9, (cpu_ns(core0) - drv0) / 1e9
    finally:
        for lane in lanes:
            await lane.__aexit__()
    problems = [p for lane in lanes for p in lane.problems]
    turns = sum(lane.turns for lane in lanes) - len(lanes)
    return {
        "streams": turns,
        "cpu_s": cpu,
        "wall_s": wall,
        "cpu_per_stream_us": cpu / turns * 1e6,
        "utilisation": cpu / wall,
        "driver_utilisation": driver / wall,
        "bad": len(problems),
        "problem": problems[0] if problems else None,
    }


async def session(transport: str, port: int, variant: Variant) -> tuple[float, float, str | None]:
    """A connection (or socket), turn 1, then the chained turn 2: seconds to each turn's
    first event (turn 1's counted from before connecting), and what was wrong."""
    t0 = time.perf_counter()
    if transport == "sse":
        reader, writer = await connect(port)
        connected = time.perf_counter() - t0
        try:
            first = [FIRST_MESSAGE]
            body = {"model": variant.model, "stream": True, "store": False, "input": first}
            r1 = await exchange(reader, writer, post_request(port, body=orjson.dumps(body)))
            # the whole context: turn 1's input and output, then the new message
            done = [
                orjson.loads(e.split(b"data: ", 1)[1])
                for e in bytes(r1.body).split(b"\n\n")
                if b"response.output_item.done" in e
            ]
            context = [*first, *(e["item"] for e in done), NEXT_MESSAGE]
            body2 = {"model": variant.model, "stream": True, "store": False, "input": context}
            r2 = await exchange(reader, writer, post_request(port, body=orjson.dumps(body2)))
        finally:
            writer.close()
        want = streams.body(variant, "responses")
        ok = all(r.complete and r.status == 200 and bytes(r.body) == want for r in (r1, r2))
        problem = None if ok else "sse: a turn differs from the upstream's"
        return connected + r1.first_event, r2.first_event, problem
    socket = await Socket.open(port, SOCKET[transport])
    connected = time.perf_counter() - t0
    try:
        frames1, first1, _ = await socket.turn(
            create_frame(variant, store=False, input=[FIRST_MESSAGE])
        )
        previous = orjson.loads(frames1[-1])["response"]["id"]
        frame2 = create_frame(
            variant, store=False, previous_response_id=previous, input=[NEXT_MESSAGE]
        )
        frames2, first2, _ = await socket.turn(frame2)
    finally:
        socket.close()
    problem = check_frames(frames1, variant) or check_frames(frames2, variant)
    return connected + first1, first2, f"{transport}: {problem}" if problem else None


async def second_turns(cmd: dict[str, Any]) -> Row:
    """``samples`` sessions, ``c`` at a time."""
    variant = Variant(cmd["deltas"], cmd["pause"])
    left = cmd["samples"]
    first: list[float] = []
    second: list[float] = []
    problems: list[str] = []

    async def worker() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            t1, t2, problem = await session(cmd["transport"], cmd["port"], variant)
            first.append(t1 * 1000)
            second.append(t2 * 1000)
            if problem:
                problems.append(problem)

    await asyncio.gather(*(worker() for _ in range(cmd["c"])))
    return {
        "first_turn_ms": first,
        "second_turn_ms": second,
        "bad": len(problems),
        "problem": problems[0] if problems else None,
    }


def client_main() -> int:
    """The client process: one JSON command per line in, one JSON result per line out."""
    ops = {"cpu": cpu_cell, "second": second_turns}
    for line in sys.stdin:
        cmd = json.loads(line)
        try:
            result = asyncio.run(ops[cmd["op"]](cmd))
        except Exception as exc:  # the driver reports it
            result = {"error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(result), flush=True)
    return 0


# -- the driver -----------------------------------------------------------------------


class Client:
    """The client process on the driver core."""

    def __init__(self) -> None:
        argv = taskset(str(DRIVER_CORE), [sys.executable, "-m", "bench.websocket", "--client"])
        self.process = subprocess.Popen(
            argv, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )

    def __call__(self, **cmd: Any) -> Row:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(cmd) + "\n")
        self.process.stdin.flush()
        result: Row = json.loads(self.process.stdout.readline())
        if "error" in result:
            raise RuntimeError(f"the client failed: {result['error']}")
        return result

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=10)


@attrs.frozen
class Setup:
    """What a run drives: the client process, proxai's and the floor's ports and pids,
    the upstream's pid."""

    client: Client
    port: int
    pids: list[int]
    upstream_pid: int
    floor_port: int
    floor_pids: list[int]

    def target(self, transport: str) -> tuple[int, list[int]]:
        """The port and pids that serve ``transport``."""
        if transport in FLOOR:
            return self.floor_port, self.floor_pids
        return self.port, self.pids


@contextmanager
def bench_setup() -> Iterator[Setup]:
    """The upstream, one proxai, the floor app and the client process."""
    upstream_process, upstream = event_upstream()
    client = Client()
    try:
        with workdir() as wd:
            port, floor_port = free_port(), free_port()
            process = proxai(wd, port, upstream, timeouts=TIMEOUTS, argv_prefix=LAUNCHER)
            floor = hypercorn_app("socket_paced", floor_port, upstream)
            try:
                wait_port(port)
                wait_port(floor_port, timeout=60.0)
                time.sleep(0.3)  # hypercorn forks its worker after binding
                yield Setup(
                    client,
                    port,
                    tree(process.pid),
                    upstream_process.pid,
                    floor_port,
                    tree(floor.pid),
                )
            finally:
                stop([process, floor])
    finally:
        client.close()
        stop([upstream_process])


def cpu_cells(setup: Setup, reps: int, cs: Sequence[int]) -> list[Row]:
    raw: list[Row] = []

    def turns(transport: str, c: int, deltas: int, k: int) -> Row:
        port, pids = setup.target(transport)
        return setup.client(
            op="cpu",
            transport=transport,
            port=port,
            pids=pids,
            upstream_pid=setup.upstream_pid,
            deltas=deltas,
            pause=PAUSE,
            c=c,
            k=k,
        )

    for transport in CPU_TRANSPORTS:  # warm up, and check a paced turn of each
        turns(transport, 4, 2, 2)
    for rep in range(reps):
        for c in cs:
            shift = (rep + c) % len(CPU_TRANSPORTS)  # no transport always runs first
            for transport in CPU_TRANSPORTS[shift:] + CPU_TRANSPORTS[:shift]:
                for deltas in LENGTHS:
                    row: Row = {"transport": transport, "concurrency": c, "deltas": deltas}
                    row["rep"] = rep
                    measured, seen = quiet(
                        partial(turns, transport, c, deltas, TURNS_PER_CONNECTION[c]),
                        f"websocket {transport} c={c} deltas={deltas}",
                    )
                    row.update(measured)
                    row.update(contended=seen.contended, other_core=round(seen.other_core, 3))
                    log("websocket cpu", {k: _round(v) for k, v in row.items()})
                    raw.append(row)
    return raw


def second_cells(
    client: Client, port: int, reps: int, cs: Sequence[int], samples: int
) -> list[Row]:
    raw: list[Row] = []
    for rep in range(reps):
        for c in cs:
            shift = (rep + c) % len(TRANSPORTS)
            for transport in TRANSPORTS[shift:] + TRANSPORTS[:shift]:
                row: Row = {"transport": transport, "concurrency": c, "rep": rep}
                row.update(
                    client(
                        op="second",
                        transport=transport,
                        port=port,
                        deltas=20,
                        pause=PAUSE,
                        c=c,
                        samples=samples,
                    )
                )
                shown = {
                    **row,
                    "first_turn_ms": percentile(row["first_turn_ms"], 50),
                    "second_turn_ms": percentile(row["second_turn_ms"], 50),
                }
                log("websocket second turn (p50)", {k: _round(v) for k, v in shown.items()})
                raw.append(row)
    return raw


def _round(value: Any) -> Any:
    return round(value, 4) if isinstance(value, float) else value


def cpu_summary(raw: list[Row]) -> list[Row]:
    """Per transport and concurrency: CPU per event (marginal) and per stream (fixed),
    medians over repetitions, and their ratios to SSE's taken per repetition (the
    floor's socket to the floor's SSE)."""

    def split(transport: str, c: int) -> dict[int, tuple[float, float, float, float]]:
        out = {}
        for rep in sorted({r["rep"] for r in raw}):
            cells = {
                r["deltas"]: r
                for r in raw
                if (r["transport"], r["concurrency"], r["rep"]) == (transport, c, rep)
            }
            if set(cells) != set(LENGTHS):
                continue
            short, long = cells[LENGTHS[0]], cells[LENGTHS[1]]
            marginal = (long["cpu_per_stream_us"] - short["cpu_per_stream_us"]) / (
                LENGTHS[1] - LENGTHS[0]
            )
            fixed = short["cpu_per_stream_us"] - LENGTHS[0] * marginal
            out[rep] = (marginal, fixed, long["utilisation"], long["driver_utilisation"])
        return out

    summary = []
    for c in sorted({r["concurrency"] for r in raw}):
        bases = {"sse": split("sse", c), "floor-sse": split("floor-sse", c)}
        for transport in [t for t in CPU_TRANSPORTS if any(r["transport"] == t for r in raw)]:
            base = bases["floor-sse" if transport in FLOOR else "sse"]
            mine = split(transport, c)
            common = set(mine) & set(base)
            summary.append(
                {
                    "transport": transport,
                    "concurrency": c,
                    "reps": len(mine),
                    "marginal_us": median([m[0] for m in mine.values()]),
                    "fixed_us": median([m[1] for m in mine.values()]),
                    "utilisation_long": median([m[2] for m in mine.values()]),
                    "driver_utilisation_long": median([m[3] for m in mine.values()]),
                    "marginal_vs_sse": median(
                        [mine[r][0] / base[r][0] for r in common if base[r][0] > 0]
                    ),
                    "fixed_vs_sse": median(
                        [mine[r][1] / base[r][1] for r in common if base[r][1] > 0]
                    ),
                }
            )
    return summary


def second_summary(raw: list[Row]) -> list[Row]:
    """Per transport and concurrency: p50 and p90 of both turns' time to first event
    (every repetition's samples pooled), and turn 2's against SSE's."""
    out = []
    for c in sorted({r["concurrency"] for r in raw}):
        pooled: dict[str, dict[str, list[float]]] = {}
        for transport in TRANSPORTS:
            rows = [r for r in raw if (r["transport"], r["concurrency"]) == (transport, c)]
            pooled[transport] = {
                key: [s for r in rows for s in r[key]]
                for key in ("first_turn_ms", "second_turn_ms")
            }
        sse = pooled["sse"]["second_turn_ms"]
        for transport in TRANSPORTS:
            mine = pooled[transport]
            row: Row = {
                "transport": transport,
                "concurrency": c,
                "samples": len(mine["second_turn_ms"]),
            }
            for q in (50, 90):
                row[f"second_p{q}_ms"] = percentile(mine["second_turn_ms"], q)
                row[f"first_p{q}_ms"] = percentile(mine["first_turn_ms"], q)
                row[f"second_p{q}_vs_sse"] = row[f"second_p{q}_ms"] / percentile(sse, q)
            out.append(row)
    return out


# -- the profile ----------------------------------------------------------------------


def profile(setup: Setup, seconds: int, c: int) -> dict[str, Any]:
    """py-spy on proxai while ``c`` connections of each transport run turns back to back
    for ``seconds``, at both lengths; each part's CPU per event and per stream."""
    RESULTS.mkdir(exist_ok=True)
    client, port, pids, upstream_pid = setup.client, setup.port, setup.pids, setup.upstream_pid
    out: dict[str, Any] = {"concurrency": c, "seconds": seconds}
    for transport in ("sse", "socket"):
        runs: dict[int, dict[str, Any]] = {}
        for deltas in LENGTHS:
            cmd = {
                "op": "cpu",
                "transport": transport,
                "port": port,
                "pids": pids,
                "upstream_pid": upstream_pid,
                "deltas": deltas,
                "pause": PAUSE,
                "c": c,
            }
            client(**cmd, seconds=1)  # warm up
            raw = RESULTS / f"pyspy-websocket-{transport}-{deltas}.txt"
            spy = pyspy.record(pids[0], seconds + 1, 250, raw)
            time.sleep(0.5)
            with watch() as seen:  # marked if contended, not rerun (as bench/pyspy.py)
                row = client(**cmd, seconds=seconds)
            spy.wait()
            totals, leaves = pyspy.parts(raw, PARTS)
            runs[deltas] = {**row, "samples": totals, "leaves": leaves, **seen.fields()}
        out[transport] = {"runs": runs, "parts": pyspy.split(runs)}
        log(
            "websocket profile",
            transport,
            [(r["part"], round(r["per_event_us"], 1)) for r in out[transport]["parts"]],
        )
    return out


# -- the run --------------------------------------------------------------------------


def run(
    reps: int,
    concurrency: Sequence[int] = CONCURRENCY,
    second_concurrency: Sequence[int] = (1, 4),
    samples: int = 40,
    profile_seconds: int = 8,
) -> dict[str, Any]:
    started = time.monotonic()
    with bench_setup() as setup:
        raw = cpu_cells(setup, reps, concurrency)
        second = second_cells(setup.client, setup.port, reps, second_concurrency, samples)
        spy = profile(setup, profile_seconds, 4) if profile_seconds else None
    problems = sorted(
        {f"{r['transport']}: {r['problem']}" for r in [*raw, *second] if r["problem"]}
    )
    return {
        "raw": raw,
        "cpu": cpu_summary(raw),
        "second_raw": second,
        "second": second_summary(second),
        "profile": spy,
        "checks": {
            "cells": len(raw) + len(second),
            "turns": sum(r["streams"] for r in raw)
            + 2 * sum(len(r["second_turn_ms"]) for r in second),
            "bad": sum(r["bad"] for r in [*raw, *second]),
            "problems": problems,
        },
        "machine": machine(),
        "settings": {
            "pause_ms": PAUSE * 1000,
            "lengths": list(LENGTHS),
            "concurrency": list(concurrency),
            "turns_per_connection": TURNS_PER_CONNECTION,
            "second_concurrency": list(second_concurrency),
            "samples": samples,
            "reps": reps,
            "profile_seconds": profile_seconds,
        },
        "wall_s": time.monotonic() - started,
    }


def quick() -> dict[str, Any]:
    return run(1, (1, 4), (1,), 10, 2)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="one rep, c=1 and 4, few samples")
    parser.add_argument("--no-profile", action="store_true")
    parser.add_argument("--client", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client:
        return client_main()
    pin_driver()
    seconds = 0 if args.no_profile else 8
    result = quick() if args.quick else run(args.reps, profile_seconds=seconds)
    save("websocket", result)
    for row in [*result["cpu"], *result["second"]]:
        print({k: _round(v) for k, v in row.items()})
    if result["profile"]:
        for transport in ("sse", "socket"):
            print(
                transport,
                [
                    (r["part"], round(r["per_event_us"], 1))
                    for r in result["profile"][transport]["parts"]
                ],
            )
    print(json.dumps(result["checks"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
