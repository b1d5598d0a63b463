"""The engines' wake-up: a sleep that new work can end early."""

from __future__ import annotations

import asyncio

__all__ = ["Alarm"]


class Alarm:
    """A sleep that :meth:`poke` can end early (new work arrived)."""

    def __init__(self) -> None:
        self._fut: asyncio.Future[None] | None = None

    async def sleep(self, seconds: float | None) -> None:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        self._fut = fut
        handle = None if seconds is None else loop.call_later(seconds, _resolve, fut)
        try:
            await fut
        finally:
            self._fut = None
            if handle is not None:
                handle.cancel()

    def poke(self) -> None:
        if self._fut is not None and not self._fut.done():
            self._fut.set_result(None)


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
