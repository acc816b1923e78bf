"""What a held stream keeps in its relay's tasks (issue 34: RSS per held stream).

A stream the upstream has gone quiet on is four suspended tasks. Each keeps every frame
of its suspended stack and every local in them for as long as the stream lasts: its
last read (as bytes, frames and messages) would stay alive with it, and each frame or
async generator between a task and trio's wait is a few hundred bytes more. Read over
proxai's own HTTP/1.1 transport (:class:`~proxai.testing.stepped.SteppedUpstream`).
"""

from __future__ import annotations

import gc
import types
from collections.abc import Callable, Iterator
from functools import partial

import httpx
import trio
import trio.testing
from trio.testing import MockClock

from proxai.protocols.responses.request import ResponsesRequest
from proxai.protocols.tracking import TrackingObserver
from proxai.relay.messages import Body, Head, Out
from proxai.service.pipeline import Body as RequestBody
from proxai.testing import sse_event
from proxai.testing.memory_proxy import MemoryProxy
from proxai.testing.stepped import SteppedUpstream
from proxai.wire.sse import SSEFrame

BODY = {"model": "m", "input": "hi", "stream": True}
RESPONSE = {"id": "resp_1", "object": "response", "model": "m", "output": []}
ITEM = {"type": "message", "id": "msg_1", "role": "assistant", "content": []}
#: The per-event bench's held stream: the Responses preamble, then nothing.
PREAMBLE = [
    {"type": "response.created", "sequence_number": 0, "response": RESPONSE},
    {"type": "response.in_progress", "sequence_number": 1, "response": RESPONSE},
    {"type": "response.output_item.added", "sequence_number": 2, "output_index": 0, "item": ITEM},
    {
        "type": "response.content_part.added",
        "sequence_number": 3,
        "output_index": 0,
        "item_id": "msg_1",
        "content_index": 0,
        "part": {"type": "output_text", "text": ""},
    },
]
#: A relay task's frames in proxai's code while it waits, at most.
MOST_FRAMES = {
    "Relay._read_upstream": 4,  # the task, read_body, the body's reads, the connection
    "Relay._observe": 2,
    "Writer.run": 2,
    "Relay._watch_disconnect": 2,
}
#: The request's own task, at most: the endpoint, the pipeline, the relay's nursery (the
#: app's dispatch returns the endpoint's coroutine rather than awaiting it).
REQUEST_FRAMES = ["HttpEndpoint.serve", "Pipeline.run", "Relay.run"]


def stack(coro: types.CoroutineType[object, object, object]) -> list[object]:
    """A suspended task's stack, outermost first: each coroutine's and generator's frame,
    then whatever it waits on that is neither (an async generator's ``asend``, say)."""
    out: list[object] = []
    awaited: object = coro
    while awaited is not None:
        if isinstance(awaited, types.CoroutineType):
            out.append(awaited.cr_frame)
            awaited = awaited.cr_await
        elif isinstance(awaited, types.GeneratorType):
            out.append(awaited.gi_frame)
            awaited = awaited.gi_yieldfrom
        else:
            out.append(awaited)
            break
    return out


def all_tasks(task: trio.lowlevel.Task) -> Iterator[trio.lowlevel.Task]:
    yield task
    for nursery in task.child_nurseries:
        for child in nursery.child_tasks:
            yield from all_tasks(child)


def proxais(frames: list[object]) -> list[types.FrameType]:
    return [
        f
        for f in frames
        if isinstance(f, types.FrameType)
        and "/proxai/" in f.f_code.co_filename
        and "/proxai/testing/" not in f.f_code.co_filename
    ]


def held(value: object) -> bool:
    """Whether ``value`` is (or holds) something of a read."""
    if isinstance(value, Body | Out | Head | SSEFrame):
        return True
    if isinstance(value, bytes | bytearray | memoryview):
        return len(value) > 0
    if isinstance(value, RequestBody):
        return bool(value.raw) or value.parsed is not None
    if isinstance(value, list | tuple):
        return any(held(v) for v in value)
    return False


async def relay_stacks() -> dict[str, list[object]]:
    """The relay's four tasks' stacks, by the task's function, once the preamble is in and
    every task waits."""
    upstream = SteppedUpstream()
    stacks: dict[str, list[object]] = {}
    async with (
        upstream.running(),
        MemoryProxy([], transport_factory=upstream.transport) as proxy,
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(partial(proxy.request, BODY, disconnect_after=100.0))
        (exchange,) = await upstream.wait_for_exchanges(1)
        assert await exchange.head()
        for event in PREAMBLE:
            assert await exchange.send(sse_event(event))
        await trio.testing.wait_all_tasks_blocked()
        for task in all_tasks(trio.lowlevel.current_root_task()):
            name = task.coro.cr_code.co_qualname
            if name in MOST_FRAMES or name == "MemoryProxy.request":
                stacks[name] = stack(task.coro)
        nursery.cancel_scope.cancel()
    assert sorted(stacks) == sorted([*MOST_FRAMES, "MemoryProxy.request"])
    return stacks


async def test_a_held_streams_tasks_keep_nothing_of_its_reads(autojump_clock: MockClock) -> None:
    """Every read was relayed: no frame of the relay's tasks holds its bytes, its frames or
    a message made of them while the next read is awaited; and the request's own task
    (the endpoint, the pipeline, the relay's nursery) no longer holds its body."""
    for name, frames in (await relay_stacks()).items():
        for frame in proxais(frames):
            kept = {k for k, v in frame.f_locals.items() if held(v)}
            assert not kept, f"{name}: {frame.f_code.co_qualname} holds {sorted(kept)}"


async def test_a_held_stream_waits_a_few_frames_above_trio_with_no_async_generator(
    autojump_clock: MockClock,
) -> None:
    """The upstream's body is read with no async generator between the relay and the
    socket (each a suspended frame more, and one more registration with trio), and each
    task takes its long wait near its top."""
    for name, frames in (await relay_stacks()).items():
        waits_on = frames[-1]
        assert isinstance(waits_on, types.FrameType), f"{name} waits on {waits_on!r}"
        assert waits_on.f_code.co_filename.endswith("trio/_core/_traps.py")
        depth = [f.f_code.co_qualname for f in proxais(frames)]
        if name in MOST_FRAMES:
            assert len(depth) <= MOST_FRAMES[name], f"{name}: {depth}"
        else:
            assert depth == REQUEST_FRAMES, f"{name}: {depth}"


SKIPPED = (type, types.ModuleType, trio.lowlevel.Task)


def reachable(root: object, depth: int) -> Iterator[object]:
    """What ``root`` refers to, ``depth`` references deep: past no module or class (they
    lead to everything), a function's closure but not its globals, and no task (its
    frames are the tests' above)."""
    seen = {id(root)}
    layer = [root]
    for _ in range(depth):
        following = []
        for obj in layer:
            if isinstance(obj, types.FunctionType):
                if "/proxai/testing/" in obj.__code__.co_filename:
                    continue  # the client's side (MemoryProxy's receive holds its body)
                refs: list[object] = list(obj.__closure__ or ())
            else:
                refs = gc.get_referents(obj)
            for ref in refs:
                if id(ref) in seen or isinstance(ref, SKIPPED):
                    continue
                seen.add(id(ref))
                following.append(ref)
                yield ref
        layer = following


async def kept_by_a_held_stream(
    body: dict[str, object], wanted: Callable[[object], bool], depth: int = 6
) -> list[object]:
    """What a held stream of ``body`` (its first event in, then silence) keeps that is
    ``wanted``: what its relay reaches, and what the locals of proxai's frames in every
    task reach, ``depth`` references deep."""
    upstream = SteppedUpstream()
    async with (
        upstream.running(),
        MemoryProxy([], transport_factory=upstream.transport) as proxy,
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(partial(proxy.request, body, disconnect_after=100.0))
        (exchange,) = await upstream.wait_for_exchanges(1)
        assert await exchange.head()
        assert await exchange.send(sse_event(PREAMBLE[0]))
        await trio.testing.wait_all_tasks_blocked()
        (relay,) = proxy.app._pipeline.relays
        roots: list[object] = [relay]
        for task in all_tasks(trio.lowlevel.current_root_task()):
            for frame in proxais(stack(task.coro)):
                roots += frame.f_locals.values()
        kept = [r for root in roots for r in (root, *reachable(root, depth)) if wanted(r)]
        nursery.cancel_scope.cancel()
    return kept


async def test_a_held_stream_keeps_nothing_of_the_parsed_request(autojump_clock: MockClock) -> None:
    """The projected request (its instructions, its tools) served routing and the plan; the
    stream's observer needs its model alone. What the held stream holds reaches no part
    of it."""
    instructions = "be brief " * 2000
    body = {**BODY, "instructions": instructions}
    assert not await kept_by_a_held_stream(
        body, lambda r: r is instructions or isinstance(r, ResponsesRequest), depth=8
    )


async def test_a_held_stream_keeps_the_upstreams_headers_once(autojump_clock: MockClock) -> None:
    """The upstream's response is its status, its headers (one list) and its body stream:
    httpx's ``Response``, with a second copy of the headers in httpx's own three fields
    a header, is not kept for the stream's life."""
    assert not await kept_by_a_held_stream(
        BODY, lambda r: isinstance(r, httpx.Response | httpx.Headers)
    )


async def test_a_held_stream_keeps_no_body_it_sent_upstream(autojump_clock: MockClock) -> None:
    """Once the upstream has answered there is no retry, so a held stream keeps none of
    the bodies its route's upstreams would have been sent (an agent's request carries
    its whole history: 100 KB and more), in the relay or in any frame of any task."""
    marker = b"remember this " * 500
    body = {**BODY, "instructions": marker.decode()}
    assert not await kept_by_a_held_stream(
        body, lambda r: isinstance(r, bytes | bytearray) and marker[:200] in r
    )


async def test_a_held_streams_observer_holds_no_empty_list(autojump_clock: MockClock) -> None:
    """A held stream keeps its observer for its life, and most streams never note an
    anomaly, a call or a mismatch: the observer makes those lists when it first needs
    them (an empty list is 56 bytes)."""
    observers = await kept_by_a_held_stream(
        BODY, lambda r: isinstance(r, TrackingObserver), depth=3
    )
    assert observers, "no observer found"
    for observer in observers:
        assert isinstance(observer, TrackingObserver)
        kept = [
            name
            for name in TrackingObserver.__slots__
            if isinstance(getattr(observer, name, None), list) and not getattr(observer, name)
        ]
        assert not kept, kept
