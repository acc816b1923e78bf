"""The state store's contract, run against both backends (memory, and a real Redis)."""

from __future__ import annotations

from proxai.state import ResponseStatus

from .conftest import Backend, item, record

A, B = "a" * 64, "b" * 64


async def test_a_stored_response_comes_back_as_it_was_put(backend: Backend) -> None:
    stored = record(
        inputs=(item("message", None, "q"), item("function_call_output", "fco_1", "42")),
        outputs=(item("reasoning", "rs_1"), item("function_call", "fc_1"), item("message", None)),
        status=ResponseStatus.INCOMPLETE,
    )
    await backend.store.put(stored)
    got = await backend.store.get(A, "resp_1")
    assert got == stored
    assert got is not None and got.item_ids == (None, "fco_1", "rs_1", "fc_1", None)
    assert await backend.store.get(A, "resp_2") is None


async def test_a_response_without_instructions_or_items(backend: Backend) -> None:
    stored = record(instructions=None, status=ResponseStatus.FAILED)
    stored = type(stored)(
        id=stored.id,
        tenant=stored.tenant,
        created_at=stored.created_at,
        instructions=None,
        input_items=(),
        output_items=(),
        response=stored.response,
        status=stored.status,
    )
    await backend.store.put(stored)
    assert await backend.store.get(A, "resp_1") == stored


async def test_another_tenant_never_sees_a_response_or_its_items(backend: Backend) -> None:
    await backend.store.put(record(tenant=A))
    assert await backend.store.get(B, "resp_1") is None
    assert await backend.store.item(B, "msg_resp_1") is None
    assert await backend.store.delete(B, "resp_1") is False
    assert await backend.store.get(A, "resp_1") is not None  # B's delete touched nothing
    assert await backend.store.item(A, "msg_resp_1") == item("message", "msg_resp_1", "hi")


async def test_the_same_id_under_two_tenants_is_two_responses(backend: Backend) -> None:
    await backend.store.put(record(tenant=A, outputs=(item("message", "msg_x", "for A"),)))
    await backend.store.put(record(tenant=B, outputs=(item("message", "msg_x", "for B"),)))
    assert await backend.store.item(A, "msg_x") == item("message", "msg_x", "for A")
    assert await backend.store.item(B, "msg_x") == item("message", "msg_x", "for B")
    assert await backend.store.delete(A, "resp_1") is True
    assert await backend.store.get(B, "resp_1") is not None
    assert await backend.store.item(B, "msg_x") is not None


async def test_deleted_is_gone_with_its_items(backend: Backend) -> None:
    await backend.store.put(record())
    assert await backend.store.delete(A, "resp_1") is True
    assert await backend.store.get(A, "resp_1") is None
    assert await backend.store.item(A, "msg_resp_1") is None
    assert await backend.store.delete(A, "resp_1") is False


async def test_items_are_found_by_id_inputs_and_outputs(backend: Backend) -> None:
    inputs = (item("message", None, "no id"), item("function_call_output", "fco_9", "out"))
    outputs = (item("reasoning", "rs_9", "thought " * 100), item("function_call", "fc_9"))
    await backend.store.put(record(inputs=inputs, outputs=outputs))
    assert await backend.store.item(A, "fco_9") == inputs[1]
    assert await backend.store.item(A, "rs_9") == outputs[0]
    assert await backend.store.item(A, "fc_9") == outputs[1]
    assert await backend.store.item(A, "resp_1") is None  # a response id is not an item
    assert await backend.store.item(A, "nope") is None


async def test_an_item_seen_again_in_a_later_turn_is_found_through_it(backend: Backend) -> None:
    first = record("resp_1", outputs=(item("function_call", "fc_1"),))
    second = record("resp_2", inputs=(item("function_call", "fc_1"), item("x", "fco_1")))
    await backend.store.put(first)
    await backend.store.put(second)
    assert await backend.store.delete(A, "resp_1") is True
    assert await backend.store.item(A, "fc_1") == item("function_call", "fc_1")
    assert await backend.store.item(A, "fco_1") == item("x", "fco_1")


async def test_put_again_replaces_the_response_and_its_index(backend: Backend) -> None:
    await backend.store.put(record(outputs=(item("message", "old"), item("message", "kept", "1"))))
    await backend.store.put(record(outputs=(item("message", "kept", "2"),)))
    got = await backend.store.get(A, "resp_1")
    assert got is not None and got.output_items == (item("message", "kept", "2"),)
    assert await backend.store.item(A, "old") is None
    assert await backend.store.item(A, "kept") == item("message", "kept", "2")


async def test_past_its_ttl_a_response_and_its_items_are_gone(backend: Backend) -> None:
    await backend.store.put(record())
    await backend.expire_all()
    assert await backend.store.get(A, "resp_1") is None
    assert await backend.store.item(A, "msg_resp_1") is None
    assert await backend.store.delete(A, "resp_1") is False
    await backend.store.put(record("resp_2"))  # and the store goes on
    assert await backend.store.get(A, "resp_2") is not None


async def test_ids_are_taken_as_they_are(backend: Backend) -> None:
    """Ids come from clients: a colon, a space or a Lua pattern character is just text."""
    odd = "resp_a:b %d+ (.+)$"
    await backend.store.put(record(odd, outputs=(item("message", "it:em %s"),)))
    assert await backend.store.get(A, odd) is not None
    assert await backend.store.item(A, "it:em %s") == item("message", "it:em %s")
    assert await backend.store.get(A, "resp_a") is None
    assert await backend.store.delete(A, odd) is True
    assert await backend.store.item(A, "it:em %s") is None


# -- the owners of an upstream's ids ------------------------------------------------------


async def test_claimed_ids_answer_their_owner_and_unknown_ones_none(backend: Backend) -> None:
    assert await backend.store.owners([]) == ()
    await backend.store.claim(A, ["resp_up", "msg_up"])
    await backend.store.claim(B, ["resp_b"])
    assert await backend.store.owners(["resp_up", "resp_b", "resp_none", "msg_up"]) == (
        A,
        B,
        None,
        A,
    )
    await backend.store.claim(A, [])


async def test_a_claimed_id_keeps_its_first_owner(backend: Backend) -> None:
    """Nobody takes over an id already claimed (a later claim of it is no transfer)."""
    await backend.store.claim(A, ["resp_up"])
    await backend.store.claim(B, ["resp_up"])
    assert await backend.store.owners(["resp_up"]) == (A,)


async def test_owners_are_not_records_and_expire_with_the_ttl(backend: Backend) -> None:
    await backend.store.claim(A, ["resp_up"])
    assert await backend.store.get(A, "resp_up") is None  # an owner is not a stored response
    assert await backend.store.delete(A, "resp_up") is False
    await backend.expire_all()
    assert await backend.store.owners(["resp_up"]) == (None,)
