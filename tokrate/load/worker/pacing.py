"""How long a worker's event loop runs request work between two looks at its sockets.

Building, sending and recording a request costs the loop some hundreds of microseconds
of Python. When hundreds of requests fall due together (the opening wave of a closed
loop, a wave of streams ending together, a burst of arrivals), their tasks are all
ready at once and the loop runs them back to back, for tens to hundreds of
milliseconds, without reading a socket. Kernel receive stamps keep each read's arrival
time however late it is read, but tokens that wait together in a socket buffer merge
into one read, and the earlier ones then get the newer one's stamp
(tokrate.client.kernel_stamps): a first token read that late is stamped that late.

:class:`Pacer` bounds that stretch: request work asks for a :meth:`Pacer.turn` first;
within :data:`TURN_BUDGET_NS` of the turn's first step it goes on at once, past it it
waits for the next turn of the loop (after the loop has polled its sockets and handed
every read its stamp), first come first served. Each turn lets through as many
waiting steps as the last turn's cost per step fits in the budget (at least one). A
request's wait is the client's own queueing: inside its ``send_queue_s``, never its
TTFT.
"""

from __future__ import annotations

import asyncio
from collections import deque
from time import perf_counter_ns
from typing import Final

__all__ = ["TURN_BUDGET_NS", "Pacer"]

#: Most request work one turn of the loop runs before it polls its sockets again (ns).
TURN_BUDGET_NS: Final = 2_000_000


class Pacer:
    """Turns of request work, at most ``budget_ns`` each (see the module docstring).
    One per event loop; not thread-safe (the loop's own thread only)."""

    __slots__ = ("_budget_ns", "_loop", "_marked", "_opened_ns", "_steps", "_waiting")

    def __init__(self, budget_ns: int = TURN_BUDGET_NS) -> None:
        self._budget_ns = budget_ns
        self._loop: asyncio.AbstractEventLoop | None = None
        #: A turn is open (its end is scheduled for the loop's next turn).
        self._marked = False
        self._opened_ns = 0
        self._steps = 0
        self._waiting: deque[asyncio.Future[None]] = deque()

    async def turn(self) -> None:
        """Return when this step may run: at once within the current turn's budget,
        else on a later turn of the loop, in arrival order. Cancellation propagates."""
        if not self._marked:
            self._open(perf_counter_ns())
        elif self._waiting or perf_counter_ns() - self._opened_ns > self._budget_ns:
            loop = self._loop
            assert loop is not None
            waiter: asyncio.Future[None] = loop.create_future()
            self._waiting.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter in self._waiting:
                    self._waiting.remove(waiter)
                raise
            return  # counted by the turn that let it through
        self._steps += 1

    def _open(self, now_ns: int) -> None:
        """Start a turn; its end runs on the loop's next turn, after a poll."""
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        self._marked = True
        self._opened_ns = now_ns
        self._steps = 0
        self._loop.call_soon(self._next_turn)

    def _next_turn(self) -> None:
        self._marked = False
        if not self._waiting:
            return
        now = perf_counter_ns()
        per_step_ns = (now - self._opened_ns) / max(1, self._steps)
        budget = max(1, int(self._budget_ns // max(per_step_ns, 1.0)))
        let_through = 0
        while let_through < budget and self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.done():
                waiter.set_result(None)  # its task runs on the loop's next turn
                let_through += 1
        # Opened after the wake-ups are queued, so this turn's end runs after them.
        self._open(now)
        self._steps = let_through
