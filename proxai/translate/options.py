"""How an upstream wants translated requests (from its ``[upstreams.NAME]`` table)."""

from __future__ import annotations

import enum

import attrs

__all__ = ["MaxTokensField", "TranslationOptions"]


class MaxTokensField(enum.StrEnum):
    """The Chat field the output token limit goes in."""

    MAX_COMPLETION_TOKENS = "max_completion_tokens"  # OpenAI's current name
    MAX_TOKENS = "max_tokens"  # what most OpenAI-compatible servers read


@attrs.frozen
class TranslationOptions:
    """Per-upstream choices a translation cannot infer from the request."""

    max_tokens_field: MaxTokensField = MaxTokensField.MAX_TOKENS
    #: Refuse (400) a request whose hosted tools the upstream cannot run, instead of
    #: dropping them with a warning in the outcome record.
    strict: bool = False
