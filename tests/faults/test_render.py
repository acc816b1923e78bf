"""docs/reliability.md is generated from the fault matrix and must match it."""

from __future__ import annotations

from tests.faults.render import DOC, render


def test_reliability_doc_is_current() -> None:
    assert DOC.read_text() == render(), (
        "docs/reliability.md is out of date: run `make reliability-doc`"
    )
