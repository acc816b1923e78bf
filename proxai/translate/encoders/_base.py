"""What the three encoders do alike with an event, before their API's frames are written.

An encoder starts its response on the first event that is not a delta (a
:class:`~proxai.translate.ir.Failed` may come without a
:class:`~proxai.translate.ir.Started`), keeps the latest usage counts, and
ignores everything after its terminal event. The response's id is the
upstream's under the client API's prefix. Subclasses write the frames in the
hooks; one place routes events, so the three cannot drift apart. For a client that
asked for no stream (``_quiet``) the hooks keep their state and write no frames.
"""

from __future__ import annotations

import abc
from typing import ClassVar

from ...wire.sse import Frames
from ..ir import (
    Event,
    Failed,
    Finished,
    ItemDelta,
    ItemDone,
    ItemStarted,
    Started,
    TranslationContext,
    Usage,
)
from .common import derive_id, merge_usage

__all__ = ["EncoderBase"]


class EncoderBase(abc.ABC):
    """The event routing and lifecycle of one client response; the frames are the subclass's."""

    #: The client API's response id prefix (``chatcmpl-``, ``msg_``, ``resp_``).
    ID_PREFIX: ClassVar[str]
    #: Every API's prefix, one per encoder: an upstream's id loses its API's before the
    #: client's is put on (an encoder is an API's entry; nothing else lists them).
    _ID_PREFIXES: ClassVar[list[str]] = []

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        EncoderBase._ID_PREFIXES.append(cls.ID_PREFIX)

    def __init__(self, ctx: TranslationContext) -> None:
        self._ctx = ctx
        self._id = ""
        self._model = ctx.model or ""
        self._started = False
        self._finished = False
        self._usage = Usage()
        #: The client asked for no stream: it gets :meth:`body` only, so no frame is
        #: written (a whole answer's frames would copy its text several times over).
        self._quiet = not ctx.stream

    @property
    def finished(self) -> bool:
        return self._finished

    def broken(self, message: str, *, code: str) -> Frames:
        """The client's error after the translation itself failed, whatever state the
        failure left this encoder in: a terminal event it was writing when it failed
        never reached the client, so the error still may (and must) follow."""
        self._finished = False
        return self.fail(message, code=code, try_again=False)

    def feed(self, event: Event) -> Frames:
        out = self._route(event)
        return [] if self._quiet else out

    def _route(self, event: Event) -> Frames:
        if self._finished:
            return []
        if isinstance(event, ItemDelta):
            return self._item_delta(event)  # an item is open, so the response started
        out = [] if self._started or isinstance(event, Started) else self._start(Started())
        if isinstance(event, Started):
            out += self._start(event)
        elif isinstance(event, ItemStarted):
            out += self._item_started(event)
        elif isinstance(event, ItemDone):
            out += self._item_done(event)
        elif isinstance(event, Usage):
            self._usage = merge_usage(self._usage, event)
        elif isinstance(event, Finished):
            out += self._finish(event)
        elif isinstance(event, Failed):
            out += self._failed(event)
        return out

    def _start(self, event: Started) -> Frames:
        """Start the response once (ids and model fixed here), with its opening frames."""
        if self._started:
            return []
        self._started = True
        stored = self._ctx.stored
        self._id = (
            stored.response_id
            if stored is not None
            else derive_id(event.id, self.ID_PREFIX, self._ctx.new_id, self._ID_PREFIXES)
        )
        self._model = self._ctx.model or event.model or "unknown"
        return self._opened(event)

    @abc.abstractmethod
    def fail(self, message: str, *, code: str | None, try_again: bool) -> Frames:
        """Close the client's stream with its API's error (see ``ir.Encoder.fail``)."""

    @abc.abstractmethod
    def _opened(self, event: Started) -> Frames:
        """The frames that open the response."""

    @abc.abstractmethod
    def _item_started(self, event: ItemStarted) -> Frames: ...

    @abc.abstractmethod
    def _item_delta(self, event: ItemDelta) -> Frames: ...

    @abc.abstractmethod
    def _item_done(self, event: ItemDone) -> Frames: ...

    @abc.abstractmethod
    def _finish(self, event: Finished) -> Frames:
        """The normal end: the last frames; sets ``_finished``."""

    @abc.abstractmethod
    def _failed(self, event: Failed) -> Frames:
        """The upstream's in-band error as the client API's; sets ``_finished``."""
