"""A keep-alive HTTP/1.1 client on asyncio for the sub-call path: httptools parses, asyncio moves bytes.

Why not the async client of ``httpx``: measured on the 2-core machine (200 small chat
requests over 64 warm loopback connections), ``httpx`` (httpx2 2.16 on anyio) cost 1.57 ms
of CPU per request, ``urllib3`` on threads 0.30 ms; this client ~0.2 ms (see the README,
"Measured"). Hundreds of episodes x 64 sub-calls are thousands of requests in flight at once,
which threads cannot carry (one blocked thread per request) and which a 1.5 ms client turns
into seconds of pure client CPU per batch. Responses are parsed by ``httptools`` (MagicStack's
binding of llhttp, the C parser of Node.js, which uvicorn and so vLLM's own server use); it
replaced ``h11`` (python-hyper's pure-Python state machine), which took about half of this
client's CPU per request (profiled: 64 warm loopback requests, 2-core AMD EPYC). A request is
one ``POST`` with the pool's fixed headers and a ``Content-Length``: its head is formatted here
from header lines checked once in :class:`AsyncHTTP`. This module adds the connection pool.

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
import re
import socket
import ssl
from collections import deque
from urllib.parse import urlsplit

import httptools

__all__ = ["AsyncHTTP", "TransportError"]

_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
"""A header name (RFC 9110 section 5.6.2, ``token``)."""
_FIELD_VALUE = re.compile(r"[\t\x20-\x7e\x80-\xff]*")
"""A header value: no CR, LF or other control character (RFC 9110 section 5.5)."""


class TransportError(Exception):
    """A request that got no HTTP answer. ``cause``: ``connection_refused`` (connect failed),
    ``connection_reset`` (closed or reset before the whole answer), ``timeout``."""

    def __init__(self, cause: str, message: str) -> None:
        super().__init__(message)
        self.cause = cause


class _Conn(asyncio.Protocol):
    """One keep-alive connection: an asyncio protocol that feeds ``httptools`` as bytes arrive
    and completes the pending request's future on the response's last byte.

    (Not ``asyncio.open_connection``: its stream reader and writer add futures and loop
    callbacks to every request; on the 2-core machine this and the one-hop completion cut
    the event loop's CPU per request, see the README, "Measured".)"""

    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.reusable = False
        """The last response ended cleanly and the server keeps the connection open."""
        self._waiter: asyncio.Future[tuple[int, dict[str, str], bytes]] | None = None
        self._headers: dict[str, str] = {}
        self._chunks: list[bytes] = []
        self._in_headers = False

    # -- asyncio.Protocol ---------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self._waiter is None:  # bytes nobody asked for: never trust this connection again
            self._broken(ConnectionResetError("the server sent bytes with no request pending"))
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._broken(exc)

    def eof_received(self) -> bool:
        # A response with neither Content-Length nor chunked encoding ends at the close.
        delimited = "content-length" in self._headers or "transfer-encoding" in self._headers
        if self._waiter is not None and not self._in_headers and self._headers and not delimited:
            self.on_message_complete()
        return False  # close the transport (connection_lost fails what is still pending)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._fail(exc or ConnectionResetError("connection closed"))

    # -- httptools callbacks ------------------------------------------------------------
    def on_message_begin(self) -> None:
        self._headers, self._chunks, self._in_headers = {}, [], True

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        self._in_headers = False

    def on_body(self, body: bytes) -> None:
        self._chunks.append(body)

    def on_message_complete(self) -> None:
        waiter, self._waiter = self._waiter, None
        self.reusable = self.parser.should_keep_alive()
        if waiter is not None and not waiter.done():
            waiter.set_result(
                (self.parser.get_status_code(), self._headers, b"".join(self._chunks))
            )

    # -- requests -----------------------------------------------------------------------
    def usable(self) -> bool:
        return not self.closed and self.transport is not None and not self.transport.is_closing()

    def request(
        self, data: bytes, loop: asyncio.AbstractEventLoop
    ) -> asyncio.Future[tuple[int, dict[str, str], bytes]]:
        """Write one whole request (head and body); the response's future."""
        assert self.transport is not None
        self.reusable = False
        self._waiter = loop.create_future()
        self.transport.write(data)
        return self._waiter

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
        lines = [("Host", host_header), *headers.items()]
        for name, value in lines:
            if not _TOKEN.fullmatch(name) or not _FIELD_VALUE.fullmatch(value):
                raise ValueError(f"not a valid HTTP header line: {name!r}: {value!r}")
        self._head_lines = "".join(f"{k}: {v}\r\n" for k, v in lines).encode("latin-1")
        self.timeout_s = timeout_s
        self.max_idle = max_idle
        self._idle: deque[_Conn] = deque()
        self._open = 0
        self._warming = 0  # connections a prewarm is opening now
        self._reserved = 0  # idle connections promised to prewarms' coming requests
        self._closed = False
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

    async def prewarm(self, n: int) -> int:
        """Have ``n`` idle connections ready for requests that will come soon, besides those
        promised to earlier prewarms whose requests have not come yet, opening what is missing
        (never more than ``max_idle`` idle); a batch sent soon after then does not wait for TCP
        set-up. Each request that takes an idle connection redeems one promise. So 16 episodes
        that start together and each prewarm 64 get 1,024 connections (``until n are open``
        gave 64 for all: the other 960 requests of the batches connected while sending, which
        spread 16 x 64 sends over ~230 ms instead of ~100 on the 2-core AMD EPYC), and an
        episode that starts while a finished batch's connections are idle opens none.
        Connections the server closes while idle are dropped at the next request, as any idle
        one. A failed connect is ignored here (the request that needs it reports it). Returns
        how many it opened."""
        unclaimed = len(self._idle) + self._warming - self._reserved
        want = min(n - unclaimed, self.max_idle - len(self._idle) - self._warming)
        self._reserved = min(self.max_idle, self._reserved + n)
        if want <= 0:
            return 0
        self._open += want  # reserved now: requests meanwhile open their own
        self._warming += want
        loop = asyncio.get_running_loop()
        try:
            made = await asyncio.gather(
                *(self._open_connection(loop) for _ in range(want)), return_exceptions=True
            )
        finally:
            self._warming -= want
        opened = 0
        for conn in made:
            if isinstance(conn, _Conn) and not self._closed:
                opened += 1
                self._idle.append(conn)
            elif isinstance(conn, _Conn):  # the pool was closed meanwhile: keep nothing open
                self._drop(conn)
            else:
                self._open -= 1
        return opened

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
            self._reserved -= self._reserved > 0  # a prewarm's promise redeemed
            if candidate.usable():
                conn = candidate
                break
            self._drop(candidate)  # closed by the server while idle
        if conn is None:
            conn = await self._connect()
        ok = False
        try:
            head = b"POST %s HTTP/1.1\r\n%sContent-Length: %d\r\n\r\n" % (
                (self.prefix + path).encode("ascii"),
                self._head_lines,
                len(body),
            )
            status, out_headers, data = await conn.request(head + body, asyncio.get_running_loop())
            ok = conn.reusable
            return status, out_headers, data
        except (OSError, httptools.HttpParserError) as exc:
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
        """Close every idle connection (busy ones close when their request ends, connections
        a :meth:`prewarm` is still opening when it ends)."""
        self._closed = True
        while self._idle:
            self._drop(self._idle.pop())
