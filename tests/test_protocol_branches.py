"""No code branches on which API it handles outside the tables that say so.

A comparison against a :class:`~proxai.protocols.names.WireApi` or upstream-kind member
(``ctx.client is WireApi.CHAT``, ``wire in (WireApi.RESPONSES, ...)``) is a protocol
difference written outside its row; a table keyed by the members (a dict) is the row.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import proxai

#: The packages checked so far (the rest of proxai follows as its branches go).
CHECKED = ["translate"]
#: The enums whose members name an API or an upstream kind.
PROTOCOL_ENUMS = frozenset({"WireApi", "UpstreamKind", "Protocol"})


def modules() -> list[Path]:
    root = Path(proxai.__path__[0])
    return sorted(path for package in CHECKED for path in (root / package).rglob("*.py"))


def names_a_member(node: ast.expr) -> bool:
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return node.value.id in PROTOCOL_ENUMS
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return any(names_a_member(element) for element in node.elts)
    return False


def branches(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    return [
        f"{path.name}:{node.lineno}: {ast.unparse(node)}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Compare)
        and any(names_a_member(side) for side in [node.left, *node.comparators])
    ]


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(p.parents[1])))
def test_no_comparison_against_a_protocol_member(path: Path) -> None:
    assert branches(path) == []


def test_the_check_sees_a_branch_and_lets_a_table_be(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "if ctx.client is WireApi.CHAT:\n    pass\n"
        "usage = wire in (WireApi.RESPONSES, WireApi.MESSAGES)\n"
        "TABLE = {WireApi.CHAT: 1}\n"
        "row = TABLE[WireApi.CHAT] if upstream is client else None\n"
    )
    assert branches(module) == [
        "m.py:1: ctx.client is WireApi.CHAT",
        "m.py:3: wire in (WireApi.RESPONSES, WireApi.MESSAGES)",
    ]
