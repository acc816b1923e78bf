"""httpx's transport over httpcore's pool, on a trio network backend without per-read wrappers.

httpcore's trio backend enters a ``trio.fail_after`` scope and an exception-
mapping context manager on every read and write, even when no timeout is set,
and proxai sets none after connecting (its deadlines are the relay's cancel
scopes). For a streamed response that is paid once per upstream read, that is
once per event. :class:`LeanTrioBackend` reads and writes directly when there is
no timeout and maps trio's two broken-stream errors to httpcore's; with a
timeout it behaves as httpcore's own backend does.

:class:`PoolTransport` is httpx's public ``AsyncBaseTransport`` over a public
``httpcore.AsyncConnectionPool`` built with that backend: httpx stays the
client API, the pool is proxai's to inspect (idle connection sweeps), and
https keeps working (TLS through ``trio.SSLStream``).
"""

# httpcore's network interface takes ``timeout`` arguments (ASYNC109 asks for scopes).
# ruff: noqa: ASYNC109

from __future__ import annotations

import ssl
import typing
from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import contextmanager

import h11
import httpcore
import httpx
import trio

from .framing import UpstreamBody

__all__ = ["LeanTrioBackend", "PoolTransport", "SweptPool"]

_Option = tuple[int, int, int] | tuple[int, int, bytes | bytearray] | tuple[int, int, None, int]


@contextmanager
def _mapped(timeout: type[Exception], broken: type[Exception]) -> Iterator[None]:
    try:
        yield
    except trio.TooSlowError as exc:
        raise timeout(str(exc)) from exc
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
        raise broken(str(exc)) from exc


class LeanTrioStream(httpcore.AsyncNetworkStream):
    """A trio stream for httpcore: no scopes entered on reads and writes without a timeout."""

    def __init__(self, stream: trio.SocketStream | trio.SSLStream[trio.SocketStream]) -> None:
        self._stream = stream

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        if timeout is None:
            try:
                return typing.cast(bytes, await self._stream.receive_some(max_bytes))
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                raise httpcore.ReadError(str(exc)) from exc
        with _mapped(httpcore.ReadTimeout, httpcore.ReadError), trio.fail_after(timeout):
            return typing.cast(bytes, await self._stream.receive_some(max_bytes))

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        if timeout is None:
            try:
                await self._stream.send_all(buffer)
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                raise httpcore.WriteError(str(exc)) from exc
            return
        with _mapped(httpcore.WriteTimeout, httpcore.WriteError), trio.fail_after(timeout):
            await self._stream.send_all(buffer)

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        assert isinstance(self._stream, trio.SocketStream)
        tls = trio.SSLStream(
            self._stream,
            ssl_context=ssl_context,
            server_hostname=server_hostname,
            https_compatible=True,
            server_side=False,
        )
        try:
            with (
                _mapped(httpcore.ConnectTimeout, httpcore.ConnectError),
                trio.fail_after(_inf(timeout)),
            ):
                await tls.do_handshake()
        except BaseException:
            await self.aclose()
            raise
        return LeanTrioStream(tls)

    def _socket(self) -> trio.socket.SocketType:
        stream = self._stream
        if isinstance(stream, trio.SSLStream):
            stream = stream.transport_stream
        return stream.socket

    def get_extra_info(self, info: str) -> typing.Any:
        if info == "ssl_object" and isinstance(self._stream, trio.SSLStream):
            return self._stream._ssl_object
        if info == "socket":
            return self._socket()
        if info == "client_addr":
            return self._socket().getsockname()
        if info == "server_addr":
            return self._socket().getpeername()
        if info == "is_readable":
            return self._socket().is_readable()
        return None


class LeanTrioBackend(httpcore.AsyncNetworkBackend):
    """Connects as httpcore's trio backend does; its streams are :class:`LeanTrioStream`."""

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[_Option] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        with (
            _mapped(httpcore.ConnectTimeout, httpcore.ConnectError),
            trio.fail_after(_inf(timeout)),
        ):
            stream = await trio.open_tcp_stream(host, port, local_address=local_address)
            for option in socket_options or ():
                stream.setsockopt(*option)
        return LeanTrioStream(stream)

    async def sleep(self, seconds: float) -> None:
        await trio.sleep(seconds)


def _inf(timeout: float | None) -> float:
    return float("inf") if timeout is None else timeout


@contextmanager
def _as_httpx() -> Iterator[None]:
    """httpcore's exceptions as httpx's classes of the same name (httpx has them all)."""
    try:
        yield
    except httpcore.TimeoutException as exc:
        raise getattr(httpx, type(exc).__name__, httpx.TimeoutException)(str(exc)) from exc
    except (httpcore.NetworkError, httpcore.ProtocolError, httpcore.UnsupportedProtocol) as exc:
        raise getattr(httpx, type(exc).__name__, httpx.TransportError)(str(exc)) from exc


def _h11_state(stream: object) -> h11.Connection | None:
    """The h11 connection under an httpcore HTTP/1.1 response: the pool's byte stream
    wraps the connection's, which holds its connection, which holds the h11 state.
    httpcore keeps all three private; this is the one place that reads them."""
    connection = getattr(getattr(stream, "_stream", None), "_connection", None)
    state = getattr(connection, "_h11_state", None)
    return state if isinstance(state, h11.Connection) else None


class _ResponseStream(UpstreamBody):
    def __init__(self, stream: typing.AsyncIterable[bytes]) -> None:
        self._stream = stream

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _as_httpx():
            async for part in self._stream:
                yield part
        state = _h11_state(self._stream)
        if state is not None and state.trailing_data[0]:
            # httpcore would start the next cycle with these bytes still buffered, and
            # answer the next request from them. Failing our side of the exchange makes
            # it close the connection when the response closes, and drop it from the pool.
            self.surplus = len(state.trailing_data[0])
            state.send_failed()

    async def aclose(self) -> None:
        close = getattr(self._stream, "aclose", None)
        if close is not None:
            await close()


class SweptPool(httpcore.AsyncConnectionPool):
    """httpcore's pool, with a way to close idle connections when no request comes.

    httpcore takes a connection out of its list before it closes one, and forgets a
    connection closed while still listed only when its next request comes: one closed
    behind its back would stay listed for as long as the pool gets no traffic. So
    :meth:`close_idle` does as httpcore does: out of the list, then closed. (It reads
    the pool's list and its requests, httpcore's own state: this is the one place that
    does.)
    """

    async def close_idle(self, connections: Iterable[httpcore.AsyncConnectionInterface]) -> int:
        """Close those of ``connections`` (a snapshot of :attr:`connections`) still idle
        and in the pool; how many."""
        with self._optional_thread_lock:
            listed = {id(c) for c in self._connections}
            # A connection assigned to a request that has not started on it yet is idle.
            assigned = {id(r.connection) for r in self._requests if r.connection is not None}
            doomed = [
                c for c in connections if c.is_idle() and id(c) in listed and id(c) not in assigned
            ]
            gone = {id(c) for c in doomed}
            self._connections = [c for c in self._connections if id(c) not in gone]
        await self._close_connections(doomed)
        return len(doomed)


class PoolTransport(httpx.AsyncBaseTransport):
    """An HTTP/1.1 connection pool for one upstream, as an httpx transport."""

    def __init__(
        self,
        *,
        verify: ssl.SSLContext | bool,
        max_keepalive_connections: int,
        keepalive_expiry: float,
    ) -> None:
        self.pool = SweptPool(
            ssl_context=httpx.create_ssl_context(verify=verify, trust_env=False),
            max_connections=None,
            max_keepalive_connections=max_keepalive_connections,
            keepalive_expiry=keepalive_expiry,
            network_backend=LeanTrioBackend(),
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        assert isinstance(request.stream, httpx.AsyncByteStream)
        url = request.url
        core = httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=url.raw_scheme, host=url.raw_host, port=url.port, target=url.raw_path
            ),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        with _as_httpx():
            response = await self.pool.handle_async_request(core)
        assert isinstance(response.stream, typing.AsyncIterable)
        return httpx.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_ResponseStream(response.stream),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self.pool.aclose()
