"""The Anthropic Messages protocol: stream observer and error shapes."""
