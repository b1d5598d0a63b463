"""A forward HTTP proxy on 127.0.0.1 (port 0), for tests of the clients' proxy path.

It takes absolute-form requests (``POST http://127.0.0.1:P/v1/chat/completions
HTTP/1.1``, what a client sends to a proxy named by HTTP_PROXY), opens a connection to
that origin, forwards the request in origin form with ``Connection: close``, and
relays the answer back as it arrives, then closes both connections. Every request it
relayed is logged in ``proxy.seen`` (method and absolute URL), so a test knows what
went through it. A raw asyncio server in a daemon thread, like hostile_server.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from urllib.parse import urlsplit

__all__ = ["ForwardProxy", "forward_proxy"]


class ForwardProxy:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []
        self.port = 0
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> ForwardProxy:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("proxy did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._loop is not None and self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    def _run(self) -> None:
        self._loop = loop = asyncio.new_event_loop()

        async def main() -> None:
            self._stop = asyncio.Event()
            server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
            self.port = server.sockets[0].getsockname()[1]
            self._ready.set()
            await self._stop.wait()
            server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await server.wait_closed()

        loop.run_until_complete(main())
        loop.close()

    async def _handle(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        """Each request on the client's connection goes on to its origin in origin
        form; the origin's bytes come back as they arrive (a pump task), so keep-alive
        and streamed answers work as without the proxy."""
        upstream: asyncio.StreamWriter | None = None
        pump: asyncio.Task[None] | None = None
        try:
            while True:
                head = await r.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, target, version = lines[0].split(" ", 2)
                parts = urlsplit(target)
                kept, length = [], 0
                for line in lines[1:]:
                    if ":" not in line:
                        continue
                    name, value = line.split(":", 1)
                    low = name.strip().lower()
                    if low == "content-length":
                        length = int(value)
                    if low not in ("proxy-connection", "proxy-authorization"):
                        kept.append(line)
                body = await r.readexactly(length)
                self.seen.append((method, target))
                if upstream is None:
                    ur, upstream = await asyncio.open_connection(parts.hostname, parts.port or 80)
                    pump = asyncio.create_task(_relay(ur, w))
                path = parts.path + (f"?{parts.query}" if parts.query else "")
                request = "\r\n".join([f"{method} {path} {version}", *kept])
                upstream.write(request.encode("latin-1") + b"\r\n\r\n" + body)
                await upstream.drain()
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            pass
        finally:
            if pump is not None:
                pump.cancel()
                with contextlib.suppress(BaseException):
                    await pump
            for writer in (upstream, w):
                if writer is not None:
                    with contextlib.suppress(Exception):
                        writer.close()
                        await writer.wait_closed()


async def _relay(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    """The origin's bytes to the client until the origin closes, then close the client."""
    with contextlib.suppress(ConnectionError):
        while data := await source.read(65536):
            sink.write(data)
            await sink.drain()
    sink.close()


@contextlib.contextmanager
def forward_proxy() -> Iterator[ForwardProxy]:
    with ForwardProxy() as proxy:
        yield proxy
