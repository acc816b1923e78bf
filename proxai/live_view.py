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
a bearer token).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

import orjson

from .config import LiveViewConfig

__all__ = ["PAGE", "PREFIX", "LiveViewAccess", "snapshot_body"]

PREFIX = "/_proxai"
INTERVAL = 1.0  # seconds between two snapshots on /_proxai/events


class LiveViewAccess:
    """Who may see the live view: loopback, plus the configured networks."""

    def __init__(self, config: LiveViewConfig) -> None:
        self._networks = [ipaddress.ip_network(n, strict=False) for n in config.allow]

    def allows(self, client: str | None) -> bool:
        if client is None:
            return False
        try:
            address = ipaddress.ip_address(client)
        except ValueError:
            return False
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        return address.is_loopback or any(address in n for n in self._networks)


def snapshot_body(streams: Iterable[dict[str, object]], now_unix: float) -> bytes:
    ordered = sorted(streams, key=lambda s: -float(s["age_s"]))  # type: ignore[arg-type]
    return orjson.dumps({"time": now_unix, "streams": ordered})


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
  const when = new Date(snapshot.time * 1000).toLocaleTimeString();
  $("status").textContent = snapshot.streams.length + " open stream(s), updated " + when;
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
