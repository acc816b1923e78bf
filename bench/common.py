"""Shared pieces of the benchmarks: processes, CPU and RSS from /proc, nginx and proxai
launchers, the streams the upstreams serve, and a small raw HTTP/1.1 client.

Core layout on the 2-core bench machine: the proxy under test (nginx or proxai) is
pinned to core 1; the upstream, the load generator and this driver share core 0.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs

ROOT = Path(__file__).resolve().parent.parent
PROXAI = ROOT / ".venv" / "bin" / "proxai"
RESULTS = ROOT / "bench" / "results"
PROXY_CORE = 1
DRIVER_CORE = 0

Row = dict[str, Any]


def pin_driver() -> None:
    """Pin this process (and what it starts without taskset) to the driver core and
    raise the open-file limit to its hard maximum."""
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {DRIVER_CORE})
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def have_tools(*tools: str) -> bool:
    """Whether every tool is on PATH; if one is not, say how to get it."""
    for tool in tools:
        if shutil.which(tool) is None:
            print(f"{tool} not found: run `make bench`, which installs it", file=sys.stderr)
            return False
    return True


def median(values: Sequence[float]) -> float:
    finite = [v for v in values if v == v]  # drop NaN
    return statistics.median(finite) if finite else float("nan")


def save(name: str, data: Any) -> Path:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(data, indent=1))
    return path


def log(*parts: object) -> None:
    print(*parts, file=sys.stderr, flush=True)


# -- processes ------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on port {port}")


def tree(pid: int) -> list[int]:
    """pid and all its descendants (nginx master + workers, proxai + worker processes)."""
    out = [pid]
    for child in _children(pid):
        out += tree(child)
    return out


def _children(pid: int) -> list[int]:
    result = subprocess.run(
        ["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True, check=False
    )
    return [int(p) for p in result.stdout.split()]


def cpu_seconds(pids: Sequence[int]) -> float:
    """user + system CPU time of these processes, from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / tick


def cpu_ns(pids: Sequence[int]) -> int:
    """CPU time of these processes (all their threads) in nanoseconds, from
    ``/proc/PID/task/TID/schedstat``: /proc/PID/stat counts in 10 ms ticks, too coarse
    for a few streams of a few hundred microseconds each."""
    total = 0
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except FileNotFoundError:
            continue
        for tid in tids:
            try:
                total += int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
            except (FileNotFoundError, ProcessLookupError):
                continue
    return total


def rss_kb(pids: Sequence[int]) -> int:
    """Resident set size (VmRSS) of these processes, summed, in KiB."""
    total = 0
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except FileNotFoundError:
            continue
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1])
    return total


def stop(processes: Sequence[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        if process.poll() is None:
            process.terminate()
    for process in processes:
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextmanager
def workdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="proxai-bench-"))
    path.chmod(0o755)  # nginx's workers run as an unprivileged user
    (path / "logs").mkdir()
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def taskset(cores: str, argv: Sequence[str]) -> list[str]:
    return ["taskset", "-c", cores, *argv]


# -- nginx ----------------------------------------------------------------------------

_BASE = (
    "daemon off; pid {pid}; error_log stderr; worker_processes 1;"
    " worker_rlimit_nofile 20000; events {{ worker_connections 8192; }}\n"
)


def nginx(conf: str, wd: Path, name: str, cores: str) -> subprocess.Popen[bytes]:
    path = wd / f"{name}.conf"
    path.write_text(_BASE.format(pid=wd / f"{name}.pid") + conf)
    return subprocess.Popen(
        taskset(cores, ["nginx", "-c", str(path), "-p", str(wd), "-e", "stderr"]),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def nginx_static(wd: Path, name: str, port: int, file: Path) -> subprocess.Popen[bytes]:
    """nginx answering POST /v1/responses with a static file (the fast upstream).
    error_page turns the static module's 405 for a POST into the file."""
    conf = (
        f"http {{ access_log off; server {{ listen 127.0.0.1:{port};"
        f" location = /v1/responses {{ default_type text/event-stream; alias {file};"
        " error_page 405 =200 $uri; } } }"
    )
    return nginx(conf, wd, name, str(DRIVER_CORE))


def nginx_proxy(wd: Path, port: int, upstream: int) -> subprocess.Popen[bytes]:
    """nginx as a plain reverse proxy: proxy_buffering off, HTTP/1.1 keep-alive upstream,
    one worker, Debian's defaults otherwise (proxy_read_timeout 60 s)."""
    conf = (
        f"http {{ access_log off; upstream up {{ server 127.0.0.1:{upstream}; keepalive 128; }}"
        f" server {{ listen 127.0.0.1:{port}; location / {{ proxy_pass http://up;"
        ' proxy_http_version 1.1; proxy_set_header Connection ""; proxy_buffering off; } } }'
    )
    return nginx(conf, wd, "nx", str(PROXY_CORE))


# -- proxai ---------------------------------------------------------------------------


def proxai_has_workers() -> bool:
    """Whether this checkout's ``proxai serve`` has ``--workers``."""
    result = subprocess.run(
        [str(PROXAI), "serve", "--help"], capture_output=True, text=True, check=False
    )
    return "--workers" in result.stdout


def proxai(
    wd: Path,
    port: int,
    upstream: int,
    *,
    timeouts: dict[str, float] | None = None,
    workers: int | None = None,
    cores: str = str(PROXY_CORE),
    protocol: str | None = None,
    argv_prefix: Sequence[str] = (),
    extra: Sequence[str] = (),
    env: dict[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """``proxai serve --config FILE`` in front of 127.0.0.1:upstream (``protocol``: the
    upstream's ``[upstream] protocol``; ``argv_prefix`` replaces the ``proxai`` script,
    e.g. by a launcher that runs it under tracemalloc; ``extra``: more TOML lines, such
    as a ``[telemetry]`` table; ``env``: more environment variables). Without
    ``.venv/bin/proxai`` (a git worktree sharing another checkout's venv), this
    checkout's ``python -m proxai`` runs."""
    lines = [
        "[server]",
        'host = "127.0.0.1"',
        f"port = {port}",
        "[upstream]",
        f'base_url = "http://127.0.0.1:{upstream}/v1"',
        'api_key = "sk-bench"',
    ]
    if protocol is not None:
        lines.append(f'protocol = "{protocol}"')
    if timeouts:
        lines.append("[timeouts]")
        lines += [f"{key} = {float(value)}" for key, value in timeouts.items()]
    lines += extra
    config = wd / f"proxai-{port}.toml"
    config.write_text("\n".join(lines) + "\n")
    head = list(argv_prefix) or (
        [str(PROXAI)] if PROXAI.exists() else [sys.executable, "-m", "proxai"]
    )
    argv = [*head, "serve", "--config", str(config), "--log-level", "WARNING"]
    if workers is not None:
        argv += ["--workers", str(workers)]
    return subprocess.Popen(
        taskset(cores, argv),
        cwd=ROOT,
        env={**os.environ, **env} if env else None,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def hypercorn_app(
    app: str, port: int, upstream: int, body_file: str = "", cores: str = str(PROXY_CORE)
) -> subprocess.Popen[bytes]:
    """``hypercorn --worker-class trio bench.floor_apps:APP`` on 127.0.0.1:port, in front
    of 127.0.0.1:upstream (the floor apps, ``bench/floor_apps.py``)."""
    env = {
        **os.environ,
        "FLOOR_UPSTREAM": f"http://127.0.0.1:{upstream}",
        "FLOOR_BODY": body_file,
    }
    argv = [
        str(ROOT / ".venv" / "bin" / "hypercorn"),
        "--worker-class",
        "trio",
        "--bind",
        f"127.0.0.1:{port}",
        "--log-level",
        "WARNING",
        f"bench.floor_apps:{app}",
    ]
    return subprocess.Popen(
        taskset(cores, argv),
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


@attrs.frozen
class Target:
    name: str
    port: int
    pid: int | None  # the proxy's process (None for direct)

    def pids(self) -> list[int]:
        return tree(self.pid) if self.pid else []


@contextmanager
def targets(
    upstream: int, *, proxai_timeouts: dict[str, float] | None = None
) -> Iterator[list[Target]]:
    """direct, nginx and proxai in front of the upstream on 127.0.0.1:upstream."""
    nx, px = free_port(), free_port()
    with workdir() as wd:
        processes = [
            nginx_proxy(wd, nx, upstream),
            proxai(wd, px, upstream, timeouts=proxai_timeouts),
        ]
        try:
            for port in (upstream, nx, px):
                wait_port(port)
            yield [
                Target("direct", upstream, None),
                Target("nginx", nx, processes[0].pid),
                Target("proxai", px, processes[1].pid),
            ]
        finally:
            stop(processes)


@contextmanager
def python_upstream(mode: str, **options: float) -> Iterator[tuple[int, int]]:
    """``bench/upstream.py`` in its own process on the driver core; yields (port, pid)."""
    argv = [sys.executable, "-m", "bench.upstream", mode]
    for key, value in options.items():
        argv += [f"--{key.replace('_', '-')}", str(value)]
    process = subprocess.Popen(
        taskset(str(DRIVER_CORE), argv), cwd=ROOT, stdout=subprocess.PIPE, stderr=None
    )
    try:
        assert process.stdout is not None
        port = int(process.stdout.readline())
        wait_port(port)
        yield port, process.pid
    finally:
        stop([process])


# -- streams --------------------------------------------------------------------------


def sse(event: dict[str, Any]) -> bytes:
    return (
        b"event: "
        + str(event["type"]).encode()
        + b"\ndata: "
        + json.dumps(event, separators=(",", ":")).encode()
        + b"\n\n"
    )


def text_stream(deltas: int) -> list[bytes]:
    """A Responses stream with ``deltas`` text deltas, compact JSON, as OpenAI frames it:
    [created, item added, delta 0, ..., delta n-1, text done, item done, completed]."""
    message = {"type": "message", "id": "msg_b", "role": "assistant", "content": []}
    events: list[dict[str, Any]] = [
        {
            "type": "response.created",
            "response": {
                "id": "resp_b",
                "object": "response",
                "status": "in_progress",
                "output": [],
            },
        },
        {"type": "response.output_item.added", "output_index": 0, "item": message},
    ]
    events += [
        {
            "type": "response.output_text.delta",
            "output_index": 0,
            "content_index": 0,
            "item_id": "msg_b",
            "delta": f"word{i} ",
        }
        for i in range(deltas)
    ]
    events += [
        {
            "type": "response.output_text.done",
            "output_index": 0,
            "content_index": 0,
            "item_id": "msg_b",
            "text": "".join(f"word{i} " for i in range(deltas)),
        },
        {"type": "response.output_item.done", "output_index": 0, "item": message},
        {
            "type": "response.completed",
            "response": {"id": "resp_b", "object": "response", "status": "completed", "output": []},
        },
    ]
    return [sse({**event, "sequence_number": seq}) for seq, event in enumerate(events)]


# -- a raw HTTP/1.1 client ------------------------------------------------------------

REQUEST_BODY = b'{"model":"m","stream":true,"input":"hi"}'


def post_request(
    port: int, path: bytes = b"/v1/responses", body: bytes = REQUEST_BODY, headers: bytes = b""
) -> bytes:
    """A POST; ``headers``: more header lines, each ending in CRLF (a gateway's routing)."""
    return (
        b"POST %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
        b"Content-Type: application/json\r\nAuthorization: Bearer sk-client\r\n"
        b"%sContent-Length: %d\r\n\r\n" % (path, port, headers, len(body))
    ) + body


class BodyDecoder:
    """Decodes a response body framed by Content-Length or chunked encoding."""

    def __init__(self, length: int | None) -> None:
        self.length = length  # None: chunked
        self.received = 0  # payload bytes so far
        self.done = length == 0
        self._buf = bytearray()
        self._left = 0  # payload bytes left in the current chunk
        self._crlf = False  # a chunk's payload ended: its CRLF comes next

    def feed(self, data: bytes) -> bytes:
        """Add raw bytes; return the payload they carry."""
        if self.length is not None:
            self.received += len(data)
            self.done = self.received >= self.length
            return data
        buf = self._buf
        buf += data
        out = bytearray()
        pos = 0
        while pos < len(buf) and not self.done:
            if self._left:
                take = min(self._left, len(buf) - pos)
                out += buf[pos : pos + take]
                pos += take
                self._left -= take
                if not self._left:
                    self._crlf = True
                continue
            if self._crlf:
                if len(buf) - pos < 2:
                    break
                pos += 2
                self._crlf = False
                continue
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                break
            size = int(bytes(buf[pos:eol]).split(b";")[0], 16)
            pos = eol + 2
            if size == 0:
                self.done = True  # (trailers are not expected)
            self._left = size
        del buf[:pos]
        self.received += len(out)
        return bytes(out)


@attrs.define
class Response:
    status: int = 0
    head: bytes = b""
    body: bytearray = attrs.field(factory=bytearray)
    first_byte: float = float("nan")  # seconds from sending the request
    first_event: float = float("nan")  # first byte of the body
    last_byte: float = float("nan")  # end of the body (nan: it did not end)
    complete: bool = False
    closed: bool = False  # the server closed the connection


async def exchange(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    request: bytes,
    *,
    keep_body: bool = True,
    on_body: Any = None,
) -> Response:
    """Send one request and read its response; times are ``time.perf_counter`` deltas."""
    loop_time = time.perf_counter
    t0 = loop_time()
    writer.write(request)
    response = Response()
    buf = bytearray()
    decoder: BodyDecoder | None = None
    while True:
        data = await reader.read(262144)
        now = loop_time()
        if not data:
            response.closed = True
            return response
        if response.first_byte != response.first_byte:
            response.first_byte = now - t0
        if decoder is None:
            buf += data
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                continue
            response.head = bytes(buf[:end])
            response.status = int(response.head.split(b" ", 2)[1])
            length: int | None = None
            for line in response.head.lower().split(b"\r\n")[1:]:
                if line.startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            decoder = BodyDecoder(length)
            data = bytes(buf[end + 4 :])
            if not data and not decoder.done:
                continue
        payload = decoder.feed(data)
        if payload:
            if response.first_event != response.first_event:
                response.first_event = now - t0
            if keep_body:
                response.body += payload
            if on_body is not None:
                on_body(payload, now - t0)
        if decoder.done:
            response.last_byte = now - t0
            response.complete = True
            return response


async def connect(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 20)
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return reader, writer


def machine() -> dict[str, str]:
    """The machine and the versions a report names."""
    import importlib.metadata as md
    import platform

    def first_line(argv: list[str]) -> str:
        try:
            result = subprocess.run(argv, capture_output=True, text=True, check=False)
        except FileNotFoundError:
            return "absent"
        return (result.stdout + result.stderr).strip().splitlines()[0]

    model = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    info = {
        "cpu": f"{os.cpu_count()} cores, {model}",
        "kernel": platform.release(),
        "os": first_line(["sh", "-c", ". /etc/os-release && echo $PRETTY_NAME"]),
        "python": platform.python_version(),
        "nginx": first_line(["nginx", "-v"]).replace("nginx version: ", ""),
        "wrk": first_line(["wrk", "--version"]).split(" Copyright")[0],
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    for package in ("proxai", "trio", "hypercorn", "httpx", "httpcore", "h11", "orjson"):
        try:
            info[package] = md.version(package)
        except md.PackageNotFoundError:
            info[package] = "absent"
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    )
    dirty = subprocess.run(
        ["git", "-C", str(ROOT), "status", "--porcelain", "--", "proxai"],
        capture_output=True,
        text=True,
        check=False,
    )
    info["commit"] = commit.stdout.strip() + (" (proxai/ modified)" if dirty.stdout else "")
    return info


def loadavg() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])
