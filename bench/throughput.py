"""Throughput: streams per proxy core-second, direct vs proxai vs nginx (first part of issue 7).

    .venv/bin/python bench/throughput.py [--seconds 5] [--concurrency 1 16 64]

A fast upstream (nginx serving a pre-rendered 40-delta Responses stream from a file,
so it is never the bottleneck) serves POST /v1/responses. wrk (with a Lua POST script) drives,
in turn: the upstream directly, proxai in front of it, and nginx as a plain reverse
proxy (proxy_buffering off, HTTP/1.1 keep-alive upstream). Each proxy runs pinned to
core 1 and its CPU time is read from /proc, so the figure is streams per proxy
core-second; wrk and the upstream share core 0. Needs nginx and wrk (make bench installs
them) and Linux.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROXAI = ROOT / ".venv" / "bin" / "proxai"


def stream_40() -> bytes:
    """A Responses stream with 40 text deltas, compact JSON, as OpenAI frames it."""
    events = [
        {
            "type": "response.created",
            "response": {
                "id": "resp_b",
                "object": "response",
                "status": "in_progress",
                "output": [],
            },
        },
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {"type": "message", "id": "msg_b", "role": "assistant", "content": []},
        },
    ]
    events += [
        {
            "type": "response.output_text.delta",
            "output_index": 0,
            "content_index": 0,
            "item_id": "msg_b",
            "delta": f"word{i} ",
        }
        for i in range(40)
    ]
    events += [
        {
            "type": "response.output_text.done",
            "output_index": 0,
            "content_index": 0,
            "item_id": "msg_b",
            "text": "".join(f"word{i} " for i in range(40)),
        },
        {
            "type": "response.output_item.done",
            "output_index": 0,
            "item": {"type": "message", "id": "msg_b", "role": "assistant", "content": []},
        },
        {
            "type": "response.completed",
            "response": {"id": "resp_b", "object": "response", "status": "completed", "output": []},
        },
    ]
    out = b""
    for seq, event in enumerate(events):
        event = {**event, "sequence_number": seq}
        out += b"event: " + event["type"].encode() + b"\ndata: "
        out += json.dumps(event, separators=(",", ":")).encode() + b"\n\n"
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on port {port}")


def cpu_seconds(pids: list[int]) -> float:
    """user + system CPU time of these processes, from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / tick


def tree(pid: int) -> list[int]:
    """pid and its children (nginx master + workers)."""
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True)
    return [pid, *(int(p) for p in out.stdout.split())]


def nginx(conf: str, workdir: Path, name: str, core: int) -> subprocess.Popen[bytes]:
    path = workdir / f"{name}.conf"
    path.write_text(conf)
    return subprocess.Popen(
        ["taskset", "-c", str(core), "nginx", "-c", str(path), "-p", str(workdir), "-e", "stderr"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def wrk(port: int, connections: int, seconds: float, script: Path) -> dict[str, float]:
    result = subprocess.run(
        [
            "taskset",
            "-c",
            "0",
            "wrk",
            "-t1",
            f"-c{connections}",
            f"-d{max(1, round(seconds))}s",
            "--latency",
            "-s",
            str(script),
            f"http://127.0.0.1:{port}/v1/responses",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    text = result.stdout
    if os.environ.get("BENCH_DEBUG"):
        print(text, file=sys.stderr)
    requests = int(re.search(r"(\d+) requests in", text).group(1))  # type: ignore[union-attr]
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    p50 = re.search(r"50%\s+([\d.]+)(us|ms|s)", text)
    p99 = re.search(r"99%\s+([\d.]+)(us|ms|s)", text)

    def ms(match: re.Match[str] | None) -> float:
        if match is None:
            return float("nan")
        value, unit = float(match.group(1)), match.group(2)
        return value / 1000 if unit == "us" else value * 1000 if unit == "s" else value

    return {
        "requests": requests,
        "errors": int(errors.group(1)) if errors else 0,
        "p50_ms": ms(p50),
        "p99_ms": ms(p99),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64])
    args = parser.parse_args()
    for tool in ("nginx", "wrk", "taskset"):
        if shutil.which(tool) is None:
            print(f"{tool} not found: run `make bench`, which installs it", file=sys.stderr)
            return 2
    up, nx, px = free_port(), free_port(), free_port()
    workdir = Path(tempfile.mkdtemp(prefix="proxai-bench-"))
    workdir.chmod(0o755)  # nginx's workers run as an unprivileged user
    (workdir / "logs").mkdir()
    (workdir / "stream.sse").write_bytes(stream_40())
    base = "daemon off; pid {pid}; error_log stderr; events {{ worker_connections 4096; }}\n"
    # A static file answers the POST (error_page turns the static module's 405 into it).
    upstream_conf = base.format(pid=workdir / "up.pid") + (
        "worker_processes 1; http { access_log off; server { listen 127.0.0.1:UP;"
        " location = /v1/responses { default_type text/event-stream; alias FILE;"
        " error_page 405 =200 $uri; } } }"
    ).replace("UP", str(up)).replace("FILE", str(workdir / "stream.sse"))
    proxy_conf = base.format(pid=workdir / "nx.pid") + (
        "worker_processes 1; http { access_log off;"
        " upstream up { server 127.0.0.1:UP; keepalive 128; }"
        " server { listen 127.0.0.1:NX; location / { proxy_pass http://up;"
        ' proxy_http_version 1.1; proxy_set_header Connection ""; proxy_buffering off; } } }'
    ).replace("UP", str(up)).replace("NX", str(nx))
    script = workdir / "post.lua"
    script.write_text(
        'wrk.method = "POST"\n'
        'wrk.body = \'{"model":"m","stream":true,"input":"hi"}\'\n'
        'wrk.headers["Content-Type"] = "application/json"\n'
    )
    processes = [nginx(upstream_conf, workdir, "up", 0), nginx(proxy_conf, workdir, "nx", 1)]
    processes.append(
        subprocess.Popen(
            [
                "taskset",
                "-c",
                "1",
                str(PROXAI),
                "serve",
                "--port",
                str(px),
                "--upstream",
                f"http://127.0.0.1:{up}/v1",
                "--api-key",
                "sk-bench",
                "--log-level",
                "WARNING",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    )
    results: list[dict[str, object]] = []
    try:
        for port in (up, nx, px):
            wait_port(port)
        targets = {
            "direct": (up, None),
            "nginx": (nx, processes[1].pid),
            "proxai": (px, processes[2].pid),
        }
        for name, (port, pid) in targets.items():
            wrk(port, 4, 1.0, script)  # warm up
            for connections in args.concurrency:
                pids = tree(pid) if pid else []
                before = cpu_seconds(pids) if pids else 0.0
                figures = wrk(port, connections, args.seconds, script)
                cpu = (cpu_seconds(pids) - before) if pids else float("nan")
                row = {
                    "target": name,
                    "concurrency": connections,
                    **figures,
                    "streams_per_s": figures["requests"] / args.seconds,
                    "proxy_cpu_s": cpu,
                    "streams_per_core_s": figures["requests"] / cpu if cpu else float("nan"),
                }
                results.append(row)
                print(json.dumps(row), flush=True)
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(timeout=10)
        shutil.rmtree(workdir, ignore_errors=True)
    (ROOT / "bench" / "results").mkdir(exist_ok=True)
    (ROOT / "bench" / "results" / "throughput.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
