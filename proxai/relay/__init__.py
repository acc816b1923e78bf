"""One proxied request: the trio nursery that moves its bytes, and its pure ending policy."""
