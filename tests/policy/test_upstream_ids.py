"""The decision of who may name an upstream's id, without I/O."""

from __future__ import annotations

import pytest

from proxai.policy.upstream_ids import Isolation, named_in_path

A, B = "a" * 64, "b" * 64


def test_only_several_tenants_need_checking() -> None:
    assert [Isolation.applies(n) for n in (0, 1, 2, 50)] == [False, False, True, True]


def test_an_id_goes_upstream_for_its_owner_only() -> None:
    rule = Isolation()
    assert rule.forwards(A, A)
    assert not rule.forwards(B, A)  # another's: as unknown
    assert not rule.forwards(A, None)  # unknown: refused by default


def test_unknown_ids_forwarded_only_when_configured() -> None:
    rule = Isolation(forward_unknown=True)
    assert rule.forwards(A, None)
    assert not rule.forwards(B, A)  # a known owner still decides


def test_the_first_refused_id_is_named() -> None:
    rule = Isolation()
    assert rule.first_refused(A, []) is None
    assert rule.first_refused(A, [A, A]) is None
    assert rule.first_refused(A, [A, B, None]) == 1
    assert rule.first_refused(A, [A, None]) == 1


@pytest.mark.parametrize(
    ("method", "path", "named"),
    [
        ("GET", "/v1/responses/resp_1", "resp_1"),
        ("DELETE", "/v1/responses/resp_1", "resp_1"),
        ("GET", "/v1/responses/resp_1/input_items", "resp_1"),
        ("POST", "/v1/responses/resp_1/cancel", "resp_1"),
        ("GET", "/v1/responses/abc-of-another-shape", "abc-of-another-shape"),
        ("POST", "/v1/responses/compact", None),
        ("POST", "/v1/responses/input_tokens", None),
        ("POST", "/v1/responses", None),
        ("GET", "/v1/responses", None),
        ("GET", "/v1/responses/", None),
        ("GET", "/v1/chat/completions/chatcmpl_1", None),
    ],
)
def test_the_id_a_path_names(method: str, path: str, named: str | None) -> None:
    assert named_in_path(method, path) == named
