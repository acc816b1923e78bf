"""The server: ASGI app, admission, live view, hypercorn and worker processes."""
