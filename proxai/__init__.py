"""proxai: a streaming proxy for OpenAI-compatible and Anthropic LLM APIs."""

# Layout, from the bytes up (docs/architecture.md has a line per module).
#
# Sans-io (bytes, events and the time in; decisions out; no trio, hypercorn or httpx,
# which tests/test_layers.py checks):
#   wire/       SSE framing, which headers cross, JSON request bodies
#   protocols/  the table of APIs (table.py), the observer interface and what
#               observers share, one package per API: request.py + observer.py
#   translate/  one API's requests and streams as another's: request translators,
#               decoders to neutral events (ir.py) and encoders from them, the pairs
#   policy/     routes and model patterns, retries, client keys, normalization
#   outcome.py, errors.py, config.py, converters.py: the records everything shares
#
# I/O, each layer using the ones above it:
#   ops/        request log, metrics, captures: all read from outcome records (files and
#               logging; it uses only the sans-io layers, and service/ uses it)
#   upstream/   the upstream HTTP client and its two transports (the only product code
#               that knows httpx, httpcore and h11; testing/ plays upstreams on h11)
#   relay/      one request's nursery: attempts, reader, observer task, writer;
#               ending.py and messages.py are the relay's sans-io part
#   service/    the ASGI app, admission (gate), live view, hypercorn server, workers
#   testing/    public helpers for tests of proxai and of code behind it
#   cli.py, demo.py, asgi.py, __main__.py: entry points

__version__ = "0.1.0"
