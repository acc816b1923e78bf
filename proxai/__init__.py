"""proxai: a streaming proxy for OpenAI-compatible and Anthropic LLM APIs."""

# Layout: the layers from the ground up, as tests/test_layers.py's LAYERS lists them. A
# module imports its own package and the layers before its own, never one after or beside
# it. Sans-io ones take bytes, events and the time and give decisions, and load no trio,
# hypercorn or httpx (the test imports each alone). docs/architecture.md has a line per
# module.
#
#  1 converters.py  strict cattrs converters with readable error paths          (sans-io)
#    outcome.py     the record each request ends with                           (sans-io)
#  2 config.py      the configuration's records: the ground                     (sans-io)
#    errors.py      ProxyError, ErrorShape: errors proxai answers itself        (sans-io)
#  3 wire/          SSE framing and event writing, which headers and query parameters
#                   cross, content codings, JSON request bodies                 (sans-io)
#  4 protocols/     the table of APIs and upstream kinds (table.py, names.py), the
#                   observer interface (observer.py) and TrackingObserver (tracking.py),
#                   one package per API: request.py, reader.py, observer.py     (sans-io)
#  5 policy/        routes and model patterns, retries, client keys, browser checks,
#                   normalization, request targets and heads (target.py)        (sans-io)
#    translate/     one API's requests and streams as another's: request translators,
#                   decoders to neutral events (ir.py) and encoders from them, the pairs
#                   (pairs.py), proxai's reasoning envelopes (reasoning_envelopes.py)
#                                                                               (sans-io)
#  6 upstream/      the upstream HTTP client and its two transports (the only product code
#                   that knows httpx, httpcore and h11; testing/ plays upstreams on h11)
#    ops/           request log, metrics, captures and masking: read from outcome records
#    state/         stored responses and the limits' windows: a row per backend
#                   (backends.py) opening one connection for its store and limiter
#  7 config_file.py the TOML file in, a checked Config out: loading and checks (sans-io)
#    relay/         one request's nursery: attempts, reader, observer task, forwarding,
#                   writer; ending.py and messages.py are its sans-io part
#  8 service/       app.py (intake, admission, carrying out a plan), plan.py (planning a
#                   request, sans-io), local.py (what proxai answers itself), asgi_io.py,
#                   gate.py, background.py, live_view.py, server.py (hypercorn), workers.py
#  9 testing/       public helpers for tests of proxai and of code behind it
# 10 demo.py        proxai demo
# 11 cli.py, asgi.py  the command line; create_app() for hypercorn
# 12 __main__.py    python -m proxai

__version__ = "0.1.0"
