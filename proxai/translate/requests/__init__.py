"""Client requests as another API's requests (one module per pair, via Chat where composed)."""
