"""The APIs proxai speaks: their table, requests and stream observers (sans-io)."""
