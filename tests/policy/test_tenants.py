"""Whose stored state a request reads and writes: its client key's digest, never the key."""

from __future__ import annotations

import hashlib

import pytest

from proxai.config import AuthConfig
from proxai.errors import ProxyError
from proxai.policy.auth import UNAUTHENTICATED_TENANT, ClientKeys, tenant_of
from proxai.protocols.table import ANTHROPIC_SDK, OPENAI_SDK


def keys(*entries: str) -> ClientKeys:
    found = ClientKeys.from_config(AuthConfig(keys=list(entries)))
    assert found is not None
    return found


def bearer(key: str) -> list[tuple[bytes, bytes]]:
    return [(b"authorization", b"Bearer " + key.encode())]


def test_the_tenant_is_the_digest_of_the_key_the_request_was_let_in_with() -> None:
    digest = hashlib.sha256(b"sk-b").hexdigest()
    configured = keys("sk-a", "sha256:" + digest)
    assert tenant_of(configured, bearer("sk-a"), OPENAI_SDK) == hashlib.sha256(b"sk-a").hexdigest()
    # A key configured as its digest names the same tenant as the plain key would.
    assert tenant_of(configured, bearer("sk-b"), OPENAI_SDK) == digest
    assert tenant_of(configured, [(b"x-api-key", b"sk-b")], ANTHROPIC_SDK) == digest
    assert "sk-" not in tenant_of(configured, bearer("sk-a"), OPENAI_SDK)


def test_without_auth_every_request_is_the_public_tenant() -> None:
    assert tenant_of(None, bearer("anything"), OPENAI_SDK) == UNAUTHENTICATED_TENANT
    assert tenant_of(None, [], OPENAI_SDK) == UNAUTHENTICATED_TENANT
    assert len(UNAUTHENTICATED_TENANT) != 64  # never a key's digest


def test_a_key_that_is_not_accepted_has_no_tenant() -> None:
    with pytest.raises(ProxyError) as caught:
        tenant_of(keys("sk-a"), bearer("sk-z"), OPENAI_SDK)
    assert caught.value.status == 401
