"""The OpenAI Chat Completions protocol: request projection and stream observer."""
