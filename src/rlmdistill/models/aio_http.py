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


class _Conn:
    __slots__ = ("h11", "reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.h11 = h11.Connection(h11.CLIENT)

    def usable(self) -> bool:
        return not self.reader.at_eof() and not self.writer.is_closing()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.transport.abort()


class AsyncHTTP:
    """Keep-alive connection pool to one HTTP(S) server; call from one event loop only.

    Args:
        base_url: ``http(s)://host[:port][/prefix]``; request paths are appended to the prefix.
        headers: sent with every request (e.g. ``Authorization``, ``Content-Type``).
        timeout_s: limit of one request (connect, send and whole answer), seconds.
        max_idle: idle connections kept for reuse; more are opened on demand and closed after.
    """

    def __init__(
        self, base_url: str, headers: dict[str, str], timeout_s: float, max_idle: int = 1024
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

    @property
    def open_connections(self) -> int:
        """Connections open now (idle and busy)."""
        return self._open

    async def _connect(self) -> _Conn:
        try:
            reader, writer = await asyncio.open_connection(
                self.host, self.port, ssl=ssl.create_default_context() if self.tls else None
            )
        except OSError as exc:
            raise TransportError(
                "connection_refused", f"cannot connect to {self.host}:{self.port}: {exc}"
            ) from exc
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._open += 1
        return _Conn(reader, writer)

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
            conn.writer.write(
                c.send(h11.Request(method="POST", target=self.prefix + path, headers=headers))
                + (c.send(h11.Data(data=body)) or b"")
                + (c.send(h11.EndOfMessage()) or b"")
            )
            status = 0
            out_headers: dict[str, str] = {}
            chunks: list[bytes] = []
            while True:
                event = c.next_event()
                if event is h11.NEED_DATA:
                    c.receive_data(await conn.reader.read(262144))
                    continue
                if isinstance(event, h11.Response):
                    status = event.status_code
                    out_headers = {
                        k.decode("latin-1"): v.decode("latin-1") for k, v in event.headers
                    }
                elif isinstance(event, h11.Data):
                    chunks.append(bytes(event.data))
                elif isinstance(event, h11.EndOfMessage):
                    break
                elif isinstance(event, h11.ConnectionClosed):
                    raise TransportError(
                        "connection_reset", f"{self.host}:{self.port} closed the connection"
                    )
            ok = c.our_state is h11.DONE and c.their_state is h11.DONE
            if ok:
                c.start_next_cycle()
            return status, out_headers, b"".join(chunks)
        except (OSError, h11.ProtocolError) as exc:
            raise TransportError(
                "connection_reset",
                f"{self.host}:{self.port}: connection broke mid-request ({type(exc).__name__}: "
                f"{exc})",
            ) from exc
        finally:
            if ok and len(self._idle) < self.max_idle:
                self._idle.append(conn)
            else:
                self._drop(conn)

    async def aclose(self) -> None:
        """Close every idle connection (busy ones close when their request ends)."""
        while self._idle:
            self._drop(self._idle.pop())
