"""The live view: ``/_proxai/`` lists the open streams, updated live.

``/_proxai/streams`` answers the open streams as JSON, ``/_proxai/events`` as
an event stream (one ``data:`` snapshot per second, and one at once), and
``/_proxai/`` is a small HTML page with no build step and no external assets
that reads that event stream. It shows shapes, never content: model,
upstream, age, events so far, each open item with the time left on its
deadline.

Off by default (``[live_view] enabled``); answered only to loopback clients
and the networks in ``live_view.allow``; behind the client keys when
``[auth]`` is on (the page takes the key from the URL's fragment,
``/_proxai/#key=...``, which browsers never send to the server, and sends it as
a bearer token). At most ``live_view.max_viewers`` event streams are open at once
(each lives as long as its viewer, outside ``server.max_concurrent_streams``); past it, 503.
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Callable, Iterable
from typing import Any

import attrs
import orjson
import trio

from ..config import LiveViewConfig
from ..errors import ProxyError
from ..policy.auth import ClientKeys
from ..policy.browser import ip_address
from ..protocols.table import OPENAI_SDK
from ..relay.relay import StreamSnapshot
from ..relay.writer import send_error
from .asgi_io import AsgiDownstream, send_plain
from .gate import overloaded

__all__ = ["PAGE", "PREFIX", "LiveView", "LiveViewAccess", "snapshot_body"]

PREFIX = "/_proxai"
INTERVAL = 1.0  # seconds between two snapshots on /_proxai/events


class LiveViewAccess:
    """Who may see the live view: loopback, plus the configured networks."""

    def __init__(self, config: LiveViewConfig) -> None:
        self._networks = [ipaddress.ip_network(n, strict=False) for n in config.allow]

    def allows(self, client: str | None) -> bool:
        address = ip_address(client) if client is not None else None
        if address is None:
            return False
        return address.is_loopback or any(address in n for n in self._networks)


def _stream_json(snapshot: StreamSnapshot) -> dict[str, Any]:
    """One stream as the page reads it: the observer's fields beside the request's."""
    fields = attrs.asdict(snapshot, recurse=False)
    observer = fields.pop("observer")
    fields.update(attrs.asdict(observer))
    return fields


def snapshot_body(
    streams: Iterable[StreamSnapshot],
    now_unix: float,
    sockets: Iterable[Any] = (),
    keys: Iterable[Any] = (),
) -> bytes:
    """The open streams, oldest first, the open client WebSockets (attrs records:
    id, age, responses, whether one is in flight, queued frames, state bytes), and each
    limited key's use (:class:`~proxai.policy.limits.KeyUse`: its name, never the key)."""
    ordered = sorted(streams, key=lambda s: -s.age_s)
    return orjson.dumps(
        {
            "time": now_unix,
            "streams": [_stream_json(s) for s in ordered],
            "sockets": [attrs.asdict(s) for s in sorted(sockets, key=lambda s: -s.age_s)],
            "keys": [attrs.asdict(k) for k in sorted(keys, key=lambda k: k.key)],
        }
    )


class LiveView:
    """The live view's pages; ``streams`` gives the open streams' snapshots, and
    ``draining`` says when /events must end."""

    def __init__(
        self,
        config: LiveViewConfig,
        keys: ClientKeys | None,
        streams: Callable[[], Iterable[StreamSnapshot]],
        draining: Callable[[], bool],
        sockets: Callable[[], Iterable[Any]] = list,
        key_use: Callable[[], Iterable[Any]] = list,
    ) -> None:
        self._access = LiveViewAccess(config)
        self._keys = keys
        self._streams = streams
        self._sockets = sockets
        self._keys_use = key_use
        self._draining = draining
        self._max_viewers = config.max_viewers
        #: Event streams open now.
        self.viewers = 0

    async def handle(self, scope: dict[str, Any], downstream: AsgiDownstream) -> None:
        path = scope["path"]
        refusal = self._refusal(scope)
        if refusal is not None:
            await send_error(downstream, refusal)
        elif path in (PREFIX, PREFIX + "/"):
            await send_plain(downstream, 200, b"text/html; charset=utf-8", PAGE)
        elif path == PREFIX + "/streams":
            await send_plain(downstream, 200, b"application/json", self._body())
        elif path == PREFIX + "/events":
            if self.viewers >= self._max_viewers:
                await send_error(downstream, _too_many_viewers(self._max_viewers))
                return
            self.viewers += 1
            try:
                await self._events(downstream)
            finally:
                self.viewers -= 1
        else:
            await send_error(
                downstream, ProxyError(404, f"no live view page {path}", "invalid_request_error")
            )

    def _refusal(self, scope: dict[str, Any]) -> ProxyError | None:
        """Why this client may not see the live view, if it may not."""
        client = scope.get("client")
        if not self._access.allows(client[0] if client else None):
            return ProxyError(
                403,
                "the live view answers loopback clients and live_view.allow only",
                "invalid_request_error",
                code="forbidden",
            )
        # The page itself holds no data (a browser cannot send a key to load it); what
        # it reads, /streams and /events, is behind the client keys.
        if self._keys is not None and scope["path"] not in (PREFIX, PREFIX + "/"):
            try:
                self._keys.check(scope["headers"], OPENAI_SDK)
            except ProxyError as exc:
                return exc
        if scope["method"] != "GET":
            return ProxyError(
                405, f"{scope['method']} is not allowed here", "invalid_request_error"
            )
        return None

    def _body(self) -> bytes:
        return snapshot_body(self._streams(), time.time(), self._sockets(), self._keys_use())

    async def _events(self, downstream: AsgiDownstream) -> None:
        """A snapshot now and every second, until the client leaves or proxai drains."""
        headers = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-store")]
        await downstream.send_head(200, headers)
        async with trio.open_nursery() as nursery:

            async def watch() -> None:
                await downstream.wait_disconnect()
                nursery.cancel_scope.cancel()

            nursery.start_soon(watch)
            while not self._draining():
                await downstream.send_body(b"data: " + self._body() + b"\n\n")
                await trio.sleep(INTERVAL)
            nursery.cancel_scope.cancel()
        with trio.CancelScope(shield=True):
            await downstream.send_body(b"", more=False)


def _too_many_viewers(limit: int) -> ProxyError:
    return overloaded(
        f"the live view has {limit} event streams open, its limit (live_view.max_viewers); "
        "close one or retry shortly",
        code="live_view_overloaded",
    )


PAGE = b"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>proxai: open streams</title>
<style>
  body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5rem; color: #1b1f24; }
  h1 { font-size: 1.2rem; margin: 0 0 .25rem; }
  #status { color: #57606a; margin-bottom: 1rem; }
  table { border-collapse: collapse; width: 100%; }
  th, td { text-align: left; padding: .35rem .6rem; border-bottom: 1px solid #d0d7de;
           vertical-align: top; }
  th { background: #f6f8fa; font-weight: 600; }
  td.num { text-align: right; font-variant-numeric: tabular-nums; }
  .item { white-space: nowrap; }
  .late { color: #cf222e; font-weight: 600; }
  .soon { color: #9a6700; }
  .empty { color: #57606a; padding: 1rem .6rem; }
</style>
</head>
<body>
<h1>proxai: open streams</h1>
<div id="status">connecting&hellip;</div>
<table>
  <thead><tr>
    <th>model</th><th>upstream</th><th>stage</th><th>age</th><th>events</th>
    <th>open items (time left on their deadline)</th><th>next deadline</th>
  </tr></thead>
  <tbody id="streams"><tr><td class="empty" colspan="7">no open streams</td></tr></tbody>
</table>
<h2 id="keys-title" hidden>client keys ([limits])</h2>
<table id="keys-table" hidden>
  <thead><tr>
    <th>key</th><th>requests (last 60 s)</th><th>tokens (last 60 s)</th><th>streams open</th>
  </tr></thead>
  <tbody id="keys"></tbody>
</table>
<script>
"use strict";
const key = new URLSearchParams(location.hash.slice(1)).get("key");
const headers = key ? { Authorization: "Bearer " + key } : {};
const $ = (id) => document.getElementById(id);

function seconds(value) {
  if (value === null || value === undefined) return "";
  return value.toFixed(1) + " s";
}

function cell(text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  return td;
}

function urgency(left) {
  if (left === null || left === undefined) return "";
  return left <= 0 ? "late" : left < 10 ? "soon" : "";
}

function render(snapshot) {
  const body = $("streams");
  body.replaceChildren();
  if (snapshot.streams.length === 0) {
    body.appendChild(Object.assign(document.createElement("tr"), {
      innerHTML: '<td class="empty" colspan="7">no open streams</td>' }));
  }
  for (const s of snapshot.streams) {
    const tr = document.createElement("tr");
    tr.dataset.requestId = s.request_id;
    tr.appendChild(cell(s.model || "(none)"));
    tr.appendChild(cell(s.upstream || ""));
    tr.appendChild(cell(s.stage));
    tr.appendChild(cell(seconds(s.age_s), "num"));
    tr.appendChild(cell(String(s.events), "num"));
    const items = document.createElement("td");
    for (const item of s.items || []) {
      const div = document.createElement("div");
      div.className = "item " + urgency(item.deadline_left);
      const left = item.deadline_left === null ? "" : " (" + seconds(item.deadline_left) + " left)";
      div.textContent = item.label + ": " + item.streams + ", " + item.chars + " chars" + left;
      items.appendChild(div);
    }
    tr.appendChild(items);
    tr.appendChild(cell(seconds(s.next_deadline_left), "num " + urgency(s.next_deadline_left)));
    body.appendChild(tr);
  }
  const keys = snapshot.keys || [];
  $("keys-title").hidden = $("keys-table").hidden = keys.length === 0;
  const of = (used, limit) => limit === null ? String(used) : used + " / " + limit;
  $("keys").replaceChildren(...keys.map((k) => {
    const tr = document.createElement("tr");
    tr.appendChild(cell(k.key));
    tr.appendChild(cell(of(k.requests, k.requests_per_minute), "num"));
    tr.appendChild(cell(of(k.tokens, k.tokens_per_minute), "num"));
    tr.appendChild(cell(of(k.streams, k.max_concurrent_streams), "num"));
    return tr;
  }));
  const when = new Date(snapshot.time * 1000).toLocaleTimeString();
  const sockets = snapshot.sockets || [];
  const busy = sockets.filter((s) => s.in_response).length;
  $("status").textContent = snapshot.streams.length + " open stream(s), " +
    sockets.length + " WebSocket(s) (" + busy + " in a response), updated " + when;
}

async function follow() {
  for (;;) {
    try {
      const response = await fetch("events", { headers });
      if (!response.ok) {
        $("status").textContent = "proxai answered " + response.status;
        return;
      }
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += decoder.decode(value, { stream: true });
        let end;
        while ((end = buffer.indexOf("\\n\\n")) >= 0) {
          const frame = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          const data = frame.split("\\n").filter((l) => l.startsWith("data:"))
            .map((l) => l.slice(5).trimStart()).join("\\n");
          if (data) render(JSON.parse(data));
        }
      }
      $("status").textContent = "disconnected; reconnecting";
    } catch (error) {
      $("status").textContent = "disconnected (" + error + "); reconnecting";
    }
    await new Promise((resolve) => setTimeout(resolve, 2000));
  }
}
follow();
</script>
</body>
</html>
"""
