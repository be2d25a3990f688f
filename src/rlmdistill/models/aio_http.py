"""A keep-alive HTTP/1.1 client on asyncio for the sub-call path: h11 parses, asyncio moves bytes.

Why not the async client of ``httpx``: measured on the 2-core machine (200 small chat
requests over 64 warm loopback connections), ``httpx`` (httpx2 2.16 on anyio) cost 1.57 ms
of CPU per request, ``urllib3`` on threads 0.30 ms; this client ~0.2 ms (see the README,
"Measured"). Hundreds of episodes x 64 sub-calls are thousands of requests in flight at once,
which threads cannot carry (one blocked thread per request) and which a 1.5 ms client turns
into seconds of pure client CPU per batch. ``h11`` (python-hyper) is the HTTP/1.1 state
machine ``httpx`` itself is built on; this module only adds the connection pool.

One :class:`AsyncHTTP` serves one server (scheme, host, port). Connections are opened on
demand (never waiting for a free one) and kept idle for reuse up to ``max_idle``. Errors are
raised as :class:`TransportError` with the ``cause`` names of the fault table in
``docs/serving.md`` (``connection_refused``, ``connection_reset``, ``timeout``).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import socket
import ssl
from collections import deque
from urllib.parse import urlsplit

import h11

__all__ = ["AsyncHTTP", "TransportError"]


class TransportError(Exception):
    """A request that got no HTTP answer. ``cause``: ``connection_refused`` (connect failed),
    ``connection_reset`` (closed or reset before the whole answer), ``timeout``."""

    def __init__(self, cause: str, message: str) -> None:
        super().__init__(message)
        self.cause = cause


class _Conn(asyncio.Protocol):
    """One keep-alive connection: an asyncio protocol that feeds h11 as bytes arrive and
    completes the pending request's future on the response's last byte.

    (Not ``asyncio.open_connection``: its stream reader and writer add futures and loop
    callbacks to every request; on the 2-core machine this and the one-hop completion cut
    the event loop's CPU per request, see the README, "Measured".)"""

    def __init__(self) -> None:
        self.h11 = h11.Connection(h11.CLIENT)
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._waiter: asyncio.Future[tuple[int, dict[str, str], bytes]] | None = None
        self._status = 0
        self._headers: dict[str, str] = {}
        self._chunks: list[bytes] = []

    # -- asyncio.Protocol ---------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self.h11.receive_data(data)
        except h11.ProtocolError as exc:
            self._broken(exc)
            return
        self._pump()

    def eof_received(self) -> bool:
        with contextlib.suppress(h11.ProtocolError):
            self.h11.receive_data(b"")
        self._pump()
        return False  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._fail(exc or ConnectionResetError("connection closed"))

    # -- requests -----------------------------------------------------------------------
    def usable(self) -> bool:
        return not self.closed and self.transport is not None and not self.transport.is_closing()

    def request(
        self, data: bytes, loop: asyncio.AbstractEventLoop
    ) -> asyncio.Future[tuple[int, dict[str, str], bytes]]:
        """Write one whole request (already through :attr:`h11`); the response's future."""
        assert self.transport is not None
        self._status, self._headers, self._chunks = 0, {}, []
        self._waiter = loop.create_future()
        self.transport.write(data)
        return self._waiter

    def _pump(self) -> None:
        """Take every event h11 can give now; complete the waiter on EndOfMessage."""
        waiter = self._waiter
        c = self.h11
        try:
            while True:
                event = c.next_event()
                if event is h11.NEED_DATA or event is h11.PAUSED:
                    return
                if isinstance(event, h11.Response):
                    self._status = event.status_code
                    self._headers = {
                        k.decode("latin-1"): v.decode("latin-1") for k, v in event.headers
                    }
                elif isinstance(event, h11.Data):
                    self._chunks.append(bytes(event.data))
                elif isinstance(event, h11.EndOfMessage):
                    self._waiter = None
                    if waiter is not None and not waiter.done():
                        waiter.set_result((self._status, self._headers, b"".join(self._chunks)))
                    return
                elif isinstance(event, h11.ConnectionClosed):
                    self._broken(ConnectionResetError("the server closed the connection"))
                    return
        except h11.ProtocolError as exc:
            self._broken(exc)

    def _fail(self, exc: BaseException) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)

    def _broken(self, exc: BaseException) -> None:
        """Malformed HTTP or a close from the server: never reuse this connection."""
        self.close()
        self._fail(exc)

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            with contextlib.suppress(Exception):
                self.transport.abort()


def _ip_family(host: str) -> int | None:
    """``AF_INET``/``AF_INET6`` when ``host`` is an IP address, else ``None`` (a name)."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return None
    return socket.AF_INET6 if ip.version == 6 else socket.AF_INET


async def _writable(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
    """Wait until ``sock`` is writable (a non-blocking connect has finished, or failed)."""
    fut: asyncio.Future[None] = loop.create_future()
    fd = sock.fileno()

    def ready() -> None:
        if not fut.done():
            fut.set_result(None)

    loop.add_writer(fd, ready)
    try:
        await fut
    finally:
        loop.remove_writer(fd)


class AsyncHTTP:
    """Keep-alive connection pool to one HTTP(S) server; call from one event loop only.

    Args:
        base_url: ``http(s)://host[:port][/prefix]``; request paths are appended to the prefix.
        headers: sent with every request (e.g. ``Authorization``, ``Content-Type``).
        timeout_s: limit of one request (connect, send and whole answer), seconds.
        max_idle: idle connections kept for reuse; more are opened on demand and closed after.
    """

    def __init__(
        self,
        base_url: str,
        headers: dict[str, str],
        timeout_s: float,
        max_idle: int = 1024,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        self.host = parts.hostname
        self.tls = parts.scheme == "https"
        self.port = parts.port or (443 if self.tls else 80)
        self.prefix = parts.path.rstrip("/")
        host_header = parts.netloc.rsplit("@", 1)[-1]
        self._headers = [("Host", host_header)] + [(k, v) for k, v in headers.items()]
        self.timeout_s = timeout_s
        self.max_idle = max_idle
        self._idle: deque[_Conn] = deque()
        self._open = 0
        self._family = _ip_family(self.host)

    @property
    def open_connections(self) -> int:
        """Connections open now (idle and busy)."""
        return self._open

    async def _connect(self) -> _Conn:
        try:
            conn = await self._open_connection(asyncio.get_running_loop())
        except OSError as exc:
            raise TransportError(
                "connection_refused", f"cannot connect to {self.host}:{self.port}: {exc}"
            ) from exc
        self._open += 1
        return conn

    async def _open_connection(self, loop: asyncio.AbstractEventLoop) -> _Conn:
        """A new connection. To an IP address over plain HTTP: a non-blocking socket of our
        own, then ``create_connection(sock=...)`` (no name resolution, ~25-30 us of CPU less
        per connection than ``create_connection(host, port)``, measured on the 2-core machine
        over 512 loopback connects). Otherwise ``create_connection(host, port, ssl=...)``.
        asyncio turns TCP_NODELAY on for every TCP transport it makes."""
        if self._family is None or self.tls:
            _, conn = await loop.create_connection(
                _Conn, self.host, self.port, ssl=ssl.create_default_context() if self.tls else None
            )
            return conn
        sock = socket.socket(self._family, socket.SOCK_STREAM)
        try:
            sock.setblocking(False)
            try:
                sock.connect((self.host, self.port))
            except BlockingIOError:  # in progress: wait until the socket is writable
                await _writable(loop, sock)
                err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if err:
                    raise OSError(err, os.strerror(err)) from None
            _, conn = await loop.create_connection(_Conn, sock=sock)
        except BaseException:
            sock.close()
            raise
        return conn

    def _drop(self, conn: _Conn) -> None:
        conn.close()
        self._open -= 1

    async def post(self, path: str, body: bytes) -> tuple[int, dict[str, str], bytes]:
        """POST ``body`` to ``prefix + path``; returns ``(status, headers (lower-case), body)``.

        Raises :class:`TransportError` when no complete answer came (refused, reset, closed,
        malformed HTTP) or ``timeout_s`` passed."""
        try:
            async with asyncio.timeout(self.timeout_s):
                return await self._post(path, body)
        except TimeoutError:
            raise TransportError(
                "timeout", f"no answer from {self.host}:{self.port} in {self.timeout_s}s"
            ) from None

    async def _post(self, path: str, body: bytes) -> tuple[int, dict[str, str], bytes]:
        conn = None
        while self._idle:
            candidate = self._idle.pop()
            if candidate.usable():
                conn = candidate
                break
            self._drop(candidate)  # closed by the server while idle
        if conn is None:
            conn = await self._connect()
        ok = False
        try:
            c = conn.h11
            headers = [*self._headers, ("Content-Length", str(len(body)))]
            waiter = conn.request(
                c.send(h11.Request(method="POST", target=self.prefix + path, headers=headers))
                + (c.send(h11.Data(data=body)) or b"")
                + (c.send(h11.EndOfMessage()) or b""),
                asyncio.get_running_loop(),
            )
            status, out_headers, data = await waiter
            ok = c.our_state is h11.DONE and c.their_state is h11.DONE
            if ok:
                c.start_next_cycle()
            return status, out_headers, data
        except (OSError, h11.ProtocolError) as exc:
            raise TransportError(
                "connection_reset",
                f"{self.host}:{self.port}: connection broke mid-request ({type(exc).__name__}: "
                f"{exc})",
            ) from exc
        finally:
            if ok and not conn.closed and len(self._idle) < self.max_idle:
                self._idle.append(conn)
            else:
                self._drop(conn)

    async def aclose(self) -> None:
        """Close every idle connection (busy ones close when their request ends)."""
        while self._idle:
            self._drop(self._idle.pop())
