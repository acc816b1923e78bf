"""Memory of one large whole body, translated and not: proxai's peak RSS.

    .venv/bin/python -m bench.whole_body [--mb 200] [--limit-mb 256]

A Chat upstream (``proxai.testing.ScriptedUpstream`` in its own process) answers a
non-streaming request with one ``chat.completion`` whose text is ``--mb`` MB, sent with
a ``Content-Length`` in 1 MB writes. proxai (``proxai serve``, one process) relays it

- untranslated, to a Chat client (``POST /v1/chat/completions``);
- translated, to a Responses client that asked for no stream (``POST /v1/responses``);
- translated, to a Responses client that asked for a stream (the upstream ignored it).

Each case runs on a fresh proxai; the client reads the whole answer and checks its
size. The figure is proxai's peak RSS (``VmHWM``), and its growth over the RSS it had
before the request. ``--limit-mb`` sets ``[server] max_translated_body_bytes`` (omit it
for a checkout that predates the key).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from bench.common import ROOT, free_port, log, save, stop, taskset, wait_port, workdir

MB = 1_000_000


def _status_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise LookupError(field)


def upstream(mb: int) -> None:
    """The upstream process: prints its port, then serves the big completion forever."""
    import trio

    from proxai.testing import Script, ScriptedUpstream, Send

    text = "x" * (mb * MB)
    body = json.dumps(
        {
            "id": "chatcmpl-big",
            "object": "chat.completion",
            "created": 1767225600,
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 5, "completion_tokens": mb * MB, "total_tokens": 0},
        }
    ).encode()
    del text
    steps = tuple(Send(body[i : i + MB]) for i in range(0, len(body), MB))
    script = Script(
        headers=(("content-type", "application/json"),), steps=steps, content_length=True
    )

    async def serve() -> None:
        server = ScriptedUpstream(lambda request: script)
        async with trio.open_nursery() as nursery:
            await nursery.start(server.serve)
            print(server.base_url.rsplit(":", 1)[1].split("/")[0], flush=True)

    trio.run(serve)


def _proxai(wd: Path, port: int, upstream_port: int, limit_mb: int | None) -> Any:
    lines = ["[server]", 'host = "127.0.0.1"', f"port = {port}"]
    if limit_mb is not None:
        lines.append(f"max_translated_body_bytes = {limit_mb * MB}")
    lines += [
        "[upstream]",
        f'base_url = "http://127.0.0.1:{upstream_port}/v1"',
        'api_key = "sk-bench"',
        'protocol = "openai_chat"',
        "[timeouts]",
        "total = 600.0",
    ]
    config = wd / f"proxai-{port}.toml"
    config.write_text("\n".join(lines) + "\n")
    argv = [sys.executable, "-m", "proxai", "serve", "--config", str(config)]
    return subprocess.Popen(
        taskset("1", [*argv, "--log-level", "WARNING"]),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


CASES = {
    "untranslated": ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
    "translated": ("/v1/responses", {"input": "hi"}),
    "translated_to_stream": ("/v1/responses", {"input": "hi", "stream": True}),
}


def one(case: str, upstream_port: int, limit_mb: int | None) -> dict[str, Any]:
    path, body = CASES[case]
    port = free_port()
    with workdir() as wd:
        process = _proxai(wd, port, upstream_port, limit_mb)
        try:
            wait_port(port)
            # one small request first, so the figure is the big body's, not start-up's
            httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=10)
            time.sleep(0.5)
            before = _status_kb(process.pid, "VmRSS")
            started = time.perf_counter()
            size = 0
            with httpx.stream(
                "POST",
                f"http://127.0.0.1:{port}{path}",
                json={"model": "m", **body},
                timeout=600,
            ) as response:
                status = response.status_code
                for chunk in response.iter_raw():
                    size += len(chunk)
            seconds = time.perf_counter() - started
            peak = _status_kb(process.pid, "VmHWM")
        finally:
            stop([process])
    row = {
        "case": case,
        "status": status,
        "body_mb": round(size / MB, 1),
        "rss_before_mib": round(before / 1024, 1),
        "peak_rss_mib": round(peak / 1024, 1),
        "growth_mib": round((peak - before) / 1024, 1),
        "seconds": round(seconds, 2),
    }
    log("whole_body", row)
    return row


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=200)
    parser.add_argument("--limit-mb", type=int, default=None)
    parser.add_argument("--cases", nargs="*", default=list(CASES))
    parser.add_argument("--upstream-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.upstream_only:
        upstream(args.mb)
        return 0
    argv = [sys.executable, "-m", "bench.whole_body", "--upstream-only", "--mb", str(args.mb)]
    process = subprocess.Popen(taskset("0", argv), cwd=ROOT, stdout=subprocess.PIPE)
    try:
        assert process.stdout is not None
        upstream_port = int(process.stdout.readline())
        wait_port(upstream_port)
        rows = [one(case, upstream_port, args.limit_mb) for case in args.cases]
    finally:
        stop([process])
    save("whole_body", {"mb": args.mb, "limit_mb": args.limit_mb, "rows": rows})
    for row in rows:
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
