"""Web pages calling a real proxai from real chromium: one origin allowed, one not.

The same page is served from ``http://127.0.0.1:PORT`` (in
``server.allowed_origins``) and from ``http://localhost:PORT`` (not). Chromium
enforces CORS itself, sends its own preflights and ``Sec-Fetch-*`` headers; the
page writes what its fetches saw into the DOM, which the test reads.
"""

from __future__ import annotations

import json
from typing import Any

import attrs

from proxai.testing import RecordedRequest, Script, ScriptedUpstream, Send, sse_event
from tests.browser.test_live_view_page import headless

PAGE = """<!doctype html>
<html><body><pre id="out">running</pre><script>
"use strict";
const proxai = "{proxai}";
const body = JSON.stringify({{
  model: "gpt-4o", messages: [{{ role: "user", content: "hi" }}], stream: true,
}});
async function attempt(out, name, init) {{
  try {{
    const url = proxai + "/v1/chat/completions";
    const response = await fetch(url, {{ method: "POST", body, ...init }});
    out[name] = {{
      type: response.type,
      status: response.status,
      request_id: response.headers.get("x-request-id"),
      proxai_id: response.headers.get("x-proxai-request-id"),
      body: await response.text(),
    }};
  }} catch (error) {{
    out[name] = {{ error: String(error) }};
  }}
}}
async function run() {{
  const out = {{}};
  if (location.search === "?attack") {{
    // A "simple" request: no preflight, the page cannot read the answer, the key is spent.
    const headers = {{ "content-type": "text/plain" }};
    await attempt(out, "simple", {{ mode: "no-cors", headers }});
  }}
  // What a page using an SDK sends: JSON and a key, so the browser asks first.
  await attempt(out, "sdk", {{
    headers: {{ "content-type": "application/json", authorization: "Bearer sk-page" }},
  }});
  document.getElementById("out").textContent = JSON.stringify(out);
}}
run();
</script></body></html>
"""


@attrs.define
class PageServer:
    """Serves :data:`PAGE` for any path, once proxai's URL is known."""

    proxai: str = ""

    def respond(self, request: RecordedRequest) -> Script:
        html = PAGE.format(proxai=self.proxai).encode()
        return Script(
            headers=(("content-type", "text/html; charset=utf-8"),),
            steps=(Send(html),),
            content_length=True,
        )


def chat_stream() -> Script:
    chunk = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o"}
    delta = {"index": 0, "delta": {"content": "Hi"}, "finish_reason": None}
    return Script.sse(
        [sse_event({**chunk, "choices": [delta]}), b"data: [DONE]\n\n"],
        headers=(("content-type", "text/event-stream"), ("x-request-id", "req_up")),
    )


async def results(url: str) -> dict[str, Any]:
    dom = (await headless(url, "--dump-dom")).decode()
    start = dom.index('<pre id="out">') + len('<pre id="out">')
    text = dom[start : dom.index("</pre>", start)]
    assert text != "running", dom
    return dict(json.loads(text.replace("&quot;", '"').replace("&amp;", "&")))


async def test_only_an_allowed_origins_page_can_use_proxai(
    start_upstream: Any, proxai_for: Any
) -> None:
    pages = PageServer()
    page_server: ScriptedUpstream = await start_upstream(pages.respond)
    port = page_server.base_url.removeprefix("http://").split("/")[0].rsplit(":", 1)[1]
    upstream = await start_upstream([chat_stream()])
    server = {"allowed_origins": [f"http://127.0.0.1:{port}"]}
    async with proxai_for(upstream, server=server) as px:
        pages.proxai = px.url
        refused = await results(f"http://localhost:{port}/?attack")
        assert upstream.requests == []  # neither the simple request nor the preflight
        allowed = await results(f"http://127.0.0.1:{port}/")
    assert refused["simple"]["type"] == "opaque"
    assert refused["sdk"] == {"error": "TypeError: Failed to fetch"}
    sdk = allowed["sdk"]
    assert (sdk["type"], sdk["status"]) == ("cors", 200)
    assert sdk["body"] == chat_stream().body.decode()
    assert sdk["request_id"] == "req_up"  # exposed to the page, as SDKs read it
    assert sdk["proxai_id"].startswith("req_")
    assert [r.method for r in upstream.requests] == ["POST"]  # the preflight stayed in proxai
    assert upstream.requests[0].header("authorization") == "Bearer sk-upstream-test"
