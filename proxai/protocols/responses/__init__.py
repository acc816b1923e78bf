"""The OpenAI Responses protocol: request projection, stream events, observer."""
