"""permessage-deflate (RFC 7692) bounded after inflation, for hypercorn's WebSockets.

hypercorn accepts a client's permessage-deflate offer with wsproto's
``PerMessageDeflate``, which inflates each read of a compressed message whole
before hypercorn's ``websocket_max_message_size`` sees it: a 64 KiB read can
inflate a thousandfold. :class:`BoundedDeflate` inflates at most one byte past the
message limit (zlib's ``max_length``) and closes the socket with 1009 (message too
big) as soon as a message passes it. :func:`install` makes hypercorn use it; the
limit is the process's (one proxai configuration per process).
"""

from __future__ import annotations

import zlib

import hypercorn.protocol.ws_stream as ws_stream
from wsproto.extensions import PerMessageDeflate
from wsproto.frame_protocol import CloseReason, FrameDecoder, FrameProtocol, Opcode, RsvBits

__all__ = ["BoundedDeflate", "install"]


class BoundedDeflate(PerMessageDeflate):
    """wsproto's permessage-deflate, inflating no message past ``max_message_bytes``."""

    def __init__(self, max_message_bytes: int) -> None:
        super().__init__()
        self.max_message_bytes = max_message_bytes
        self._inflated = 0
        #: The most one inflating call returned (what the bound holds; for tests).
        self.largest_output = 0

    def frame_inbound_header(
        self,
        proto: FrameDecoder | FrameProtocol,
        opcode: Opcode,
        rsv: RsvBits,
        payload_length: int,
    ) -> CloseReason | RsvBits:
        if self._inbound_compressed is None:  # a new message
            self._inflated = 0
        return super().frame_inbound_header(proto, opcode, rsv, payload_length)

    def frame_inbound_payload_data(
        self, proto: FrameDecoder | FrameProtocol, data: bytes
    ) -> bytes | CloseReason:
        if not self._inbound_compressed or not self._inbound_is_compressible:
            return data
        return self._inflate(bytes(data))

    def frame_inbound_complete(
        self, proto: FrameDecoder | FrameProtocol, fin: bool
    ) -> bytes | CloseReason | None:
        if not fin or not self._inbound_is_compressible or not self._inbound_compressed:
            return super().frame_inbound_complete(proto, fin)
        # The message's end: RFC 7692's empty block, inflated under the same bound.
        tail = self._inflate(b"\x00\x00\xff\xff")
        if isinstance(tail, CloseReason):
            return tail
        if proto.client:
            no_context_takeover = self.server_no_context_takeover
        else:
            no_context_takeover = self.client_no_context_takeover
        if no_context_takeover:
            self._decompressor = None
        self._inbound_compressed = None
        return tail

    def _inflate(self, data: bytes) -> bytes | CloseReason:
        assert self._decompressor is not None
        room = self.max_message_bytes - self._inflated
        try:
            out = self._decompressor.decompress(data, room + 1)
        except zlib.error:
            return CloseReason.INVALID_FRAME_PAYLOAD_DATA
        self.largest_output = max(self.largest_output, len(out))
        if len(out) > room:
            return CloseReason.MESSAGE_TOO_BIG
        self._inflated += len(out)
        return out


def install(max_message_bytes: int) -> None:
    """Make hypercorn's WebSocket handshakes offer :class:`BoundedDeflate` with this
    bound (hypercorn builds its extension by calling ``ws_stream.PerMessageDeflate()``)."""

    def bounded() -> BoundedDeflate:
        return BoundedDeflate(max_message_bytes)

    setattr(ws_stream, "PerMessageDeflate", bounded)  # noqa: B010 - a module global hypercorn reads
