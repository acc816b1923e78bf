"""What operators see: request log, metrics and captures, all from outcome records."""
