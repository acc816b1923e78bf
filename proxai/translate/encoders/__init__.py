"""Client APIs' streams and bodies, from neutral events (one module per API)."""
