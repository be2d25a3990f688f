"""The sub-call path's HTTP/1.1 client (models/aio_http.py) against scripted raw servers:
keep-alive reuse, connections the server closed, and the transport faults of docs/serving.md
(connection_refused, connection_reset, timeout), each checked by what the server saw."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable

import pytest

from rlmdistill.models.aio_http import AsyncHTTP, TransportError

OK_BODY = b'{"ok": true}'
OK = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
    + str(len(OK_BODY)).encode()
    + b"\r\n\r\n"
    + OK_BODY
)

Serve = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _read_request(reader: asyncio.StreamReader) -> bytes:
    """One whole request (head + Content-Length body) as the server received it."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    return head + await reader.readexactly(length)


def _run(serve: Serve, client_fn: Callable[[str, list[bytes]], Awaitable[None]]) -> list[bytes]:
    """Run ``serve`` per accepted connection on 127.0.0.1 and ``client_fn(url, seen)``;
    returns what the server received (one entry per connection, requests concatenated)."""
    seen: list[bytes] = []

    async def main() -> None:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            seen.append(b"")
            try:
                await serve(reader, writer)
            except (asyncio.IncompleteReadError, ConnectionError):
                pass
            finally:
                writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            await client_fn(f"http://127.0.0.1:{port}/v1", seen)
        finally:
            server.close()

    asyncio.run(main())
    return seen


def _client(url: str, timeout_s: float = 5.0) -> AsyncHTTP:
    return AsyncHTTP(url, {"Content-Type": "application/json"}, timeout_s)


def test_keep_alive_sends_every_request_on_one_connection() -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await _read_request(reader)
            writer.write(OK)
            await writer.drain()

    out: list[tuple[int, dict[str, str], bytes]] = []

    async def client(url: str, seen: list[bytes]) -> None:
        http = _client(url)
        for i in range(3):
            out.append(await http.post("/chat/completions", b'{"n": %d}' % i))
        assert http.open_connections == 1
        await http.aclose()
        assert http.open_connections == 0

    seen = _run(serve, client)
    assert len(seen) == 1  # one accepted connection for three requests
    assert out == [(200, {"content-type": "application/json", "content-length": "12"}, OK_BODY)] * 3


def test_a_connection_the_server_closed_while_idle_is_not_reused() -> None:
    requests: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        requests.append(await _read_request(reader))
        writer.write(OK)  # no "Connection: close": the client learns of it from the EOF
        await writer.drain()

    async def client(url: str, seen: list[bytes]) -> None:
        http = _client(url)
        assert (await http.post("/chat/completions", b"{}"))[0] == 200
        await asyncio.sleep(0.2)  # the server's close reaches the idle connection
        assert http.open_connections == 1
        assert (await http.post("/chat/completions", b"{}"))[0] == 200
        assert http.open_connections == 1  # the closed one was dropped, a new one opened

    seen = _run(serve, client)
    assert len(seen) == 2
    assert [r.split(b"\r\n", 1)[0] for r in requests] == [b"POST /v1/chat/completions HTTP/1.1"] * 2
    assert all(b"\r\nContent-Length: 2\r\n" in r and r.endswith(b"\r\n\r\n{}") for r in requests)


def test_nothing_listening_is_connection_refused() -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now

    async def main() -> None:
        http = _client(f"http://127.0.0.1:{port}/v1")
        with pytest.raises(TransportError) as err:
            await http.post("/chat/completions", b"{}")
        assert err.value.cause == "connection_refused"
        assert http.open_connections == 0

    asyncio.run(main())


@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789",  # cut short, then closed
        b"this is not HTTP\r\n\r\n",  # malformed
        b"",  # closed without a byte
    ],
    ids=["truncated", "malformed", "closed"],
)
def test_an_answer_cut_short_or_malformed_is_connection_reset(answer: bytes) -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(answer)
        await writer.drain()

    async def client(url: str, seen: list[bytes]) -> None:
        http = _client(url)
        with pytest.raises(TransportError) as err:
            await http.post("/chat/completions", b"{}")
        assert err.value.cause == "connection_reset"
        assert http.open_connections == 0  # never put back for reuse

    assert len(_run(serve, client)) == 1


def test_no_answer_in_time_is_a_timeout_and_the_connection_is_dropped() -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        await asyncio.sleep(5)

    async def client(url: str, seen: list[bytes]) -> None:
        http = _client(url, timeout_s=0.3)
        with pytest.raises(TransportError) as err:
            await http.post("/chat/completions", b"{}")
        assert err.value.cause == "timeout"
        assert http.open_connections == 0

    _run(serve, client)


def test_a_host_name_connects_through_name_resolution() -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request = await _read_request(reader)
        assert b"\r\nHost: localhost:" in request
        writer.write(OK)
        await writer.drain()

    async def client(url: str, seen: list[bytes]) -> None:
        http = _client(url.replace("127.0.0.1", "localhost"))
        assert http._family is None  # a name: asyncio's create_connection(host, port)
        assert await http.post("/chat/completions", b"{}") == (
            200,
            {"content-type": "application/json", "content-length": "12"},
            OK_BODY,
        )

    assert len(_run(serve, client)) == 1


@pytest.mark.parametrize(
    "answer",
    [
        b'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{"ok"\r\n7\r\n: true}\r\n0\r\n\r\n',
        b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + OK_BODY,  # body ends at the close
        b"HTTP/1.0 200 OK\r\nContent-Length: 12\r\n\r\n" + OK_BODY,  # no keep-alive in 1.0
    ],
    ids=["chunked", "close-delimited", "http1.0"],
)
def test_chunked_and_close_delimited_answers_are_read_whole_and_never_reused(
    answer: bytes,
) -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(answer)
        await writer.drain()
        if b"Transfer-Encoding" not in answer:
            writer.close()  # the close ends the body / the HTTP/1.0 exchange

    async def client(url: str, seen: list[bytes]) -> None:
        http = _client(url)
        status, _, body = await http.post("/chat/completions", b"{}")
        assert (status, body) == (200, OK_BODY)
        if b"Transfer-Encoding" in answer:
            assert http.open_connections == 1  # chunked HTTP/1.1 keeps the connection
        else:
            assert http.open_connections == 0  # no keep-alive: dropped, never reused

    assert len(_run(serve, client)) == 1


@pytest.mark.parametrize(
    "headers",
    [{"Authorization": "Bearer x\r\nX-Injected: 1"}, {"Bad Name": "v"}, {"X": "a\nb"}],
)
def test_a_header_that_would_break_the_request_head_is_refused(headers: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="not a valid HTTP header line"):
        AsyncHTTP("http://127.0.0.1:1/v1", headers, 5.0)


def test_prewarm_opens_connections_that_the_next_requests_use() -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await _read_request(reader)
            await asyncio.sleep(0.05)  # all four in flight at once
            writer.write(OK)
            await writer.drain()

    async def client(url: str, seen: list[bytes]) -> None:
        http = _client(url)
        assert await http.prewarm(4) == 4
        assert http.open_connections == 4 and len(seen) == 4  # accepted before any request
        assert await http.prewarm(3) == 3  # another batch to come: the 4 are promised
        out = await asyncio.gather(*(http.post("/chat/completions", b"{}") for _ in range(7)))
        assert [o[0] for o in out] == [200] * 7
        assert http.open_connections == 7 and len(seen) == 7  # no new connection for them
        assert await http.prewarm(5) == 0  # 7 idle, every promise redeemed: enough
        assert await http.prewarm(4) == 2  # 5 of the 7 promised: 2 unclaimed, 2 more opened
        assert http.open_connections == 9

    _run(serve, client)


def test_prewarm_against_nothing_listening_opens_nothing_and_raises_nothing() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    async def main() -> None:
        http = _client(f"http://127.0.0.1:{port}/v1")
        assert await http.prewarm(3) == 0
        assert http.open_connections == 0

    asyncio.run(main())


def test_a_pool_closed_while_prewarming_keeps_nothing_open() -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # hold the connection until the client closes it

    async def client(url: str, seen: list[bytes]) -> None:
        http = _client(url)
        task = asyncio.ensure_future(http.prewarm(5))
        await asyncio.sleep(0)  # the connects are under way
        await http.aclose()
        assert await task == 0
        assert http.open_connections == 0

    _run(serve, client)
