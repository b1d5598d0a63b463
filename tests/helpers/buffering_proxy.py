"""A TCP proxy on 127.0.0.1 that holds a server's bytes back and sends them in bursts,
as a buffering gateway does (the client's bytes go through at once).

``buffering_proxy(upstream_port, flush_s=...)`` yields the proxy's port. In the answer
direction, bytes are held for ``flush_s`` seconds from the first one that found the
buffer empty, then sent together (what is left goes when the server closes), so a
stream of tokens written one by one reaches the client a few reads at a time and its
first read carries every token of its first ``flush_s``.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator


async def _pipe_now(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()


async def _pipe_held(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, flush_s: float
) -> None:
    """Hold what the server sends; ``flush_s`` after the first byte that found the
    buffer empty, send all that is held at once (and what is left at the end)."""
    held = bytearray()
    arrived = asyncio.Event()
    done = asyncio.Event()

    async def read() -> None:
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(65536):
                held.extend(data)
                arrived.set()
        done.set()
        arrived.set()

    task = asyncio.create_task(read())
    with contextlib.suppress(ConnectionError):
        while not done.is_set():
            await arrived.wait()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), flush_s)
            arrived.clear()
            if held:
                writer.write(bytes(held))
                held.clear()
                await writer.drain()
        writer.close()
    await task


def _serve(upstream_port: int, flush_s: float, ready: list[int], stop: threading.Event) -> None:
    writers: set[asyncio.StreamWriter] = set()
    handlers: set[asyncio.Task[None]] = set()

    async def handle(c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        handlers.add(task)
        s_reader, s_writer = await asyncio.open_connection("127.0.0.1", upstream_port)
        writers.update((c_writer, s_writer))
        try:
            await asyncio.gather(
                _pipe_now(c_reader, s_writer), _pipe_held(s_reader, c_writer, flush_s)
            )
        finally:
            for w in (c_writer, s_writer):
                w.close()
                with contextlib.suppress(ConnectionError):
                    await w.wait_closed()

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        ready.append(server.sockets[0].getsockname()[1])
        await asyncio.to_thread(stop.wait)
        server.close()
        # Keep-alive connections are still open: close both sides, let handlers end.
        for w in writers:
            w.close()
        await asyncio.wait_for(asyncio.gather(*handlers, return_exceptions=True), 5.0)
        await server.wait_closed()

    asyncio.run(main())


@contextlib.contextmanager
def buffering_proxy(upstream_port: int, *, flush_s: float = 0.25) -> Iterator[int]:
    """The port of a proxy in front of ``upstream_port`` (see module docstring)."""
    ready: list[int] = []
    stop = threading.Event()
    thread = threading.Thread(target=_serve, args=(upstream_port, flush_s, ready, stop))
    thread.start()
    try:
        for _ in range(200):
            if ready:
                break
            stop.wait(0.01)
        yield ready[0]
    finally:
        stop.set()
        thread.join(5)
