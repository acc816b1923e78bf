"""The gateways a user would pick instead of proxai, as the per-event bench runs them
(issue 34 item 2): LiteLLM's proxy and Portkey's gateway, installed by ``make
bench-peers`` into ``bench/peers/`` from PyPI and npm.

- **LiteLLM** (PyPI ``litellm[proxy]``, its own venv ``bench/peers/.venv-litellm``: it
  pins many packages the project's venv must not get). One uvicorn worker; the offline
  cost map (``LITELLM_LOCAL_MODEL_COST_MAP=True``: otherwise it fetches the map from
  GitHub at start); a master key (it refuses to start without one). Each bench model
  (``ev-<deltas>-<pause>``) is its own ``openai/<model>`` entry with
  ``supports_native_streaming: true``: a wildcard entry routes too, but for a model
  its cost map does not know LiteLLM *fakes* a Responses stream (it asks for the whole
  answer, then fails to parse the upstream's SSE as JSON: a 500).
- **Portkey** (npm ``@portkey-ai/gateway``, Node), routed per request by headers
  (``x-portkey-provider: openai``, ``x-portkey-custom-host``). Its package asks for
  ``@hono/node-server ^1.3.3``; npm picks the newest 1.x, whose lightweight
  ``Response`` keeps a ``fetch()`` response's immutable headers, and every proxied
  request then fails with a 500 (``TypeError: immutable`` in the gateway's
  ``ResponseService.updateHeaders``; Portkey-AI/gateway issue 1389).
  ``bench/peers/package.json`` pins it to 1.13.8 (an npm ``overrides`` entry), the
  last release that copies the headers.

Also the pure verdicts the bench records for every target: whether a body is the
upstream's bytes, or a re-serialized stream that still carries the same text; and
what a stalled upstream looked like to the client.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from bench.common import PROXY_CORE, ROOT, Row, taskset

PEERS = ROOT / "bench" / "peers"
LITELLM = PEERS / ".venv-litellm" / "bin" / "litellm"
PORTKEY = PEERS / "node_modules" / "@portkey-ai" / "gateway" / "build" / "start-server.js"
NAMES = ("litellm", "portkey")
#: LiteLLM's proxy refuses to start without a master key; the bench client's key.
MASTER_KEY = "sk-client"
#: What a byte check records for a body that differs from the upstream's bytes but is
#: a well-formed stream carrying the same text.
RESERIALIZED = "re-serialized"


def missing(name: str) -> str | None:
    """Why peer ``name`` cannot start here (None: it is installed)."""
    path = {"litellm": LITELLM, "portkey": PORTKEY}[name]
    if not path.exists():
        return f"not installed ({path.relative_to(ROOT)} absent): run `make bench-peers`"
    return None


def litellm_config(upstream: int, models: Iterable[str], stream_timeout: float | None) -> str:
    """LiteLLM's config.yaml: one ``openai/<model>`` entry per bench model."""
    lines = ["model_list:"]
    for model in sorted(set(models)):
        lines += [
            f'  - model_name: "{model}"',
            "    litellm_params:",
            f'      model: "openai/{model}"',
            f'      api_base: "http://127.0.0.1:{upstream}/v1"',
            '      api_key: "sk-bench"',
        ]
        if stream_timeout is not None:
            lines.append(f"      stream_timeout: {float(stream_timeout)}")
        lines += ["    model_info:", "      supports_native_streaming: true"]
    lines += ["general_settings:", f'  master_key: "{MASTER_KEY}"']
    return "\n".join(lines) + "\n"


def litellm(
    wd: Path, port: int, upstream: int, models: Iterable[str], stream_timeout: float | None = None
) -> subprocess.Popen[bytes]:
    """LiteLLM's proxy on 127.0.0.1:port, one worker, pinned to the proxy core; its
    output goes to ``wd/litellm-PORT.log`` (what a failure report quotes)."""
    config = wd / f"litellm-{port}.yaml"
    config.write_text(litellm_config(upstream, models, stream_timeout))
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "ERROR"}
    argv = [str(LITELLM), "--config", str(config), "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--num_workers", "1"]
    with log_path(wd, "litellm", port).open("wb") as out:
        return subprocess.Popen(
            taskset(str(PROXY_CORE), argv), cwd=wd, env=env, stdout=out, stderr=out
        )


def portkey(wd: Path, port: int) -> subprocess.Popen[bytes]:
    """Portkey's gateway on port ``port`` (headless: no console UI), pinned to the proxy
    core; its output goes to ``wd/portkey-PORT.log``."""
    argv = ["node", str(PORTKEY), f"--port={port}", "--headless"]
    with log_path(wd, "portkey", port).open("wb") as out:
        return subprocess.Popen(
            taskset(str(PROXY_CORE), argv), cwd=PEERS, env=dict(os.environ), stdout=out, stderr=out
        )


def portkey_headers(upstream: int) -> bytes:
    """The request headers that route a request through Portkey to the upstream."""
    return (
        b"x-portkey-provider: openai\r\n"
        b"x-portkey-custom-host: http://127.0.0.1:%d/v1\r\n" % upstream
    )


def log_path(wd: Path, name: str, port: int) -> Path:
    return wd / f"{name}-{port}.log"


def log_tail(path: Path | None, lines: int = 6) -> str:
    """The last lines of a peer's log that are not a stack frame or a spinner."""
    if path is None or not path.exists():
        return ""
    text = path.read_bytes().decode(errors="replace").replace("\r", "\n")
    kept = [
        line.strip()
        for line in text.splitlines()
        if line.strip() and not line.lstrip().startswith("at ") and "Starting AI" not in line
    ]
    return " | ".join(kept[-lines:])


def versions() -> dict[str, str]:
    """The installed peers' versions (and Node's, and the pinned hono server's)."""
    out = {}
    for dist in sorted(PEERS.glob(".venv-litellm/lib/python*/site-packages/litellm-*.dist-info")):
        out["litellm"] = dist.name.removeprefix("litellm-").removesuffix(".dist-info")
    for key, package in (
        ("portkey", "@portkey-ai/gateway"),
        ("@hono/node-server", "@hono/node-server"),
    ):
        manifest = PEERS / "node_modules" / package / "package.json"
        if manifest.exists():
            out[key] = str(json.loads(manifest.read_text()).get("version"))
    try:
        node = subprocess.run(["node", "--version"], capture_output=True, text=True, check=False)
        out["node"] = node.stdout.strip()
    except FileNotFoundError:
        out["node"] = "absent"
    return out


# -- verdicts (pure) ------------------------------------------------------------------


def sse_payloads(body: bytes) -> list[Any] | None:
    """The JSON payloads of an SSE body's ``data:`` lines, ``[DONE]`` left out (None:
    a payload is not JSON or the body does not end at an event boundary)."""
    if not body.endswith(b"\n\n"):
        return None
    out = []
    for frame in body.split(b"\n\n"):
        for line in frame.split(b"\n"):
            if line.startswith(b"data:"):
                data = line[5:].strip()
                if data == b"[DONE]":
                    continue
                try:
                    out.append(json.loads(data))
                except ValueError:
                    return None
    return out


def stream_text(body: bytes, shape: str) -> str | None:
    """The text a streamed answer carries, read the way an SDK accumulates it (None:
    it is not a complete stream of that API). Responses: the text deltas, and the
    stream must end with ``response.completed``; Chat: the content deltas, and one
    choice must have finished."""
    payloads = sse_payloads(body)
    if not payloads or not all(isinstance(p, dict) for p in payloads):
        return None
    if shape == "responses":
        if payloads[-1].get("type") != "response.completed":
            return None
        return "".join(
            str(p.get("delta", ""))
            for p in payloads
            if p.get("type") == "response.output_text.delta"
        )
    parts, finished = [], False
    for p in payloads:
        for choice in p.get("choices") or []:
            parts.append(str((choice.get("delta") or {}).get("content") or ""))
            finished = finished or bool(choice.get("finish_reason"))
    return "".join(parts) if finished else None


def byte_verdict(body: bytes, upstream: bytes, shape: str, text: str) -> str | None:
    """None: ``body`` is the upstream's bytes; :data:`RESERIALIZED`: other bytes, but a
    complete stream of the same API carrying the same text; else what is wrong."""
    if body == upstream:
        return None
    got = stream_text(body, shape)
    if got is None:
        return "bytes differ and it is not a complete stream"
    if got != text:
        return "bytes differ and so does the text"
    return RESERIALIZED


def stall_verdict(row: Row, give_up: float) -> Row:
    """What a stalled upstream looked like through a target: ``row`` has the
    ``ending`` (``complete``, ``closed``, ``reset`` or ``gave up``), ``ended_s`` (when,
    from the request) and the ``body`` received (text). Bounded: the target ended the
    stream before the client gave up; ``error_event``: it said so in the stream."""
    body = row.get("body", "")
    error = next(
        (kind for kind in ("response.failed", "event: error", '"error"') if kind in body), None
    )
    bounded = row["ending"] != "gave up"
    if not bounded:
        what = f"still open after {give_up:g} s (the client gave up)"
    else:
        how = {
            "complete": "ended the body cleanly",
            "closed": "closed the connection without the body's end",
            "reset": "reset the connection",
        }[row["ending"]]
        what = f"{how} after {row['ended_s']:.1f} s"
        if error:
            what += f", with an error in the stream (`{error.strip(chr(34))}`)"
        else:
            what += ", with no error event (the client sees a truncated answer)"
    return {"bounded": bounded, "error_event": error is not None, "what": what}
