"""The proxy's HTTP/1.1 client against small asyncio servers that misbehave on purpose."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from monitor.broker import free_port
from monitor.proxy.upstream import UpstreamError, UpstreamPool, _Dechunker

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[None]]


def encode_chunked(parts: list[bytes], trailer: bytes = b"") -> bytes:
    out = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts if p)
    return out + b"0\r\n" + trailer + b"\r\n"


@given(st.lists(st.binary(max_size=40), max_size=8), st.lists(st.integers(0, 500), max_size=20),
       st.booleans())
def test_dechunker_reads_any_split(parts: list[bytes], cuts: list[int], trailer: bool) -> None:
    data = encode_chunked(parts, b"x-checksum: 1\r\n" if trailer else b"")
    points = sorted({c % (len(data) + 1) for c in cuts})
    bounds = [0, *points, len(data)]
    d = _Dechunker()
    out = b"".join(d.feed(data[a:b]) for a, b in zip(bounds, bounds[1:], strict=False))
    assert out == b"".join(parts)
    assert d.done and not d.extra


def test_dechunker_refuses_garbage() -> None:
    with pytest.raises(UpstreamError, match="bad chunk size"):
        _Dechunker().feed(b"zz\r\n")
    with pytest.raises(UpstreamError, match="CRLF"):
        _Dechunker().feed(b"2\r\nabXX")


async def _serve(handler: Handler) -> tuple[asyncio.Server, str, list[int]]:
    connections: list[int] = []

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(len(connections))
        try:
            await handler(reader, writer, connections[-1])
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}", connections


async def _read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            await reader.readexactly(int(line.split(b":")[1]))
    return head


async def _body(pool: UpstreamPool, target: bytes = b"/x") -> tuple[int, bytes]:
    response = await pool.request("POST", target, [(b"x-a", b"1")], b"{}")
    try:
        return response.status, b"".join([c async for c in response.body()])
    finally:
        response.close()


def test_keep_alive_reuses_one_connection_and_sends_host_and_length() -> None:
    heads: list[bytes] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int
                      ) -> None:
        while True:
            heads.append(await _read_request(reader))
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
            await writer.drain()

    async def main() -> list[int]:
        server, url, connections = await _serve(handler)
        pool = UpstreamPool(url + "/base/")
        for _ in range(3):
            assert await _body(pool, b"/v1?q=1") == (200, b"ok")
        await pool.close()
        server.close()
        return connections

    assert len(asyncio.run(main())) == 1
    first = heads[0].split(b"\r\n")
    assert first[0] == b"POST /base/v1?q=1 HTTP/1.1"
    assert b"x-a: 1" in first and b"content-length: 2" in first
    assert any(line.startswith(b"host: 127.0.0.1:") for line in first)


def test_idle_connection_closed_by_the_upstream_is_retried_once() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int
                      ) -> None:
        await _read_request(reader)
        # keep-alive announced, then closed anyway: the next request finds it dead
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\n" + str(n).encode())
        await writer.drain()

    async def main() -> list[tuple[int, bytes]]:
        server, url, _ = await _serve(handler)
        pool = UpstreamPool(url)
        out = [await _body(pool)]
        await asyncio.sleep(0.05)  # let the close reach the idle connection
        out.append(await _body(pool))
        await pool.close()
        server.close()
        return out

    assert asyncio.run(main()) == [(200, b"0"), (200, b"1")]


def test_chunked_close_delimited_and_interim_responses() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int
                      ) -> None:
        await _read_request(reader)
        if n == 0:
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n"
                         b"transfer-encoding: chunked\r\nconnection: close\r\n\r\n"
                         + encode_chunked([b"hel", b"lo"]))
        else:
            writer.write(b"HTTP/1.0 200 OK\r\ncontent-type: text/plain\r\n\r\nuntil close")
        await writer.drain()

    async def main() -> list[tuple[int, bytes]]:
        server, url, _ = await _serve(handler)
        pool = UpstreamPool(url)
        out = [await _body(pool), await _body(pool)]
        await pool.close()
        server.close()
        return out

    assert asyncio.run(main()) == [(200, b"hello"), (200, b"until close")]


def test_timeouts_refusals_and_cut_bodies() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int
                     ) -> None:
        await _read_request(reader)
        await asyncio.sleep(5)

    async def cut(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nonly this")
        await writer.drain()

    async def main() -> list[str]:
        kinds = []
        server, url, _ = await _serve(silent)
        try:
            await _body(UpstreamPool(url, read_timeout=0.2))
        except UpstreamError as e:
            kinds.append(e.kind)
        server.close()
        try:
            await _body(UpstreamPool(f"http://127.0.0.1:{free_port()}"))
        except UpstreamError as e:
            kinds.append(e.kind)
        server, url, _ = await _serve(cut)
        try:
            await _body(UpstreamPool(url))
        except UpstreamError as e:
            kinds.append(e.kind)
        server.close()
        return kinds

    assert asyncio.run(main()) == ["timeout", "unreachable", "broken"]
