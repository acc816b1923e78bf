"""Model patterns of ``[[routes]]``: exact names, globs and regexes.

``"gpt-5.4"`` matches that name only; ``"gpt-*"`` is a shell-style glob
(``*``, ``?``, ``[...]``), matched against the whole name; ``"re:^o[0-9]"`` is a
Python regular expression searched in the name (anchor it yourself); ``"*"`` is
the catch-all.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable

__all__ = ["REGEX_PREFIX", "compile_pattern", "is_exact"]

REGEX_PREFIX = "re:"
_GLOB_CHARS = frozenset("*?[")


def is_exact(pattern: str) -> bool:
    """Whether ``pattern`` names one model (no glob characters, not a regex)."""
    return not pattern.startswith(REGEX_PREFIX) and not _GLOB_CHARS & set(pattern)


def compile_pattern(pattern: str) -> Callable[[str], bool]:
    """A predicate over model names; raises ``ValueError`` for a regex that won't compile."""
    if pattern.startswith(REGEX_PREFIX):
        try:
            regex = re.compile(pattern[len(REGEX_PREFIX) :])
        except re.error as exc:
            raise ValueError(f"invalid regular expression {pattern!r}: {exc}") from None
        return lambda model: regex.search(model) is not None
    if is_exact(pattern):
        return pattern.__eq__
    regex = re.compile(fnmatch.translate(pattern))
    return lambda model: regex.match(model) is not None
