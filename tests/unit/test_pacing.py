"""The worker's turns of request work (tokrate.load.worker.pacing): past a turn's budget
the next step waits until the loop has looked at its sockets, first come first served;
within it every step runs at once. No timing: the order of events is the assertion."""

from __future__ import annotations

import asyncio
import socket

import pytest

from tokrate.load.worker.pacing import Pacer


async def _steps(pacer: Pacer, n: int) -> list[object]:
    """``n`` request steps made ready together (a wave); the first one's work makes a
    socket readable. The log says in which order the steps and the read ran."""
    log: list[object] = []
    here, there = socket.socketpair()
    loop = asyncio.get_running_loop()
    here.setblocking(False)
    read = asyncio.Event()

    def on_read() -> None:
        log.append(("read", here.recv(16)))
        read.set()

    loop.add_reader(here.fileno(), on_read)

    async def step(i: int) -> None:
        await pacer.turn()
        log.append(i)
        if i == 0:
            there.send(b"token")  # a read now waits for the loop's next look at sockets

    try:
        await asyncio.gather(*(step(i) for i in range(n)))
        await read.wait()
    finally:
        loop.remove_reader(here.fileno())
        here.close()
        there.close()
    return log


def test_past_the_budget_the_socket_is_read_before_the_next_step() -> None:
    """A 1 ns budget: one step per turn, and the read comes right after the first."""
    log = asyncio.run(_steps(Pacer(budget_ns=1), 20))
    assert log[0] == 0 and log[1] == ("read", b"token")
    assert log[2:] == list(range(1, 20))  # in arrival order


def test_within_the_budget_a_wave_runs_in_one_turn() -> None:
    """A budget no wave here reaches: every step runs before the loop polls again
    (the same order as without pacing)."""
    log = asyncio.run(_steps(Pacer(budget_ns=10**12), 20))
    assert log == [*range(20), ("read", b"token")]


def test_a_cancelled_waiter_leaves_the_queue_and_the_rest_go_on() -> None:
    async def main() -> list[int]:
        pacer = Pacer(budget_ns=1)
        done: list[int] = []

        async def step(i: int) -> None:
            await pacer.turn()
            done.append(i)

        tasks = [asyncio.create_task(step(i)) for i in range(5)]
        await asyncio.sleep(0)  # all started: 0 ran, 1..4 wait
        tasks[2].cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        assert isinstance(results[2], asyncio.CancelledError)
        return done

    assert asyncio.run(main()) == [0, 1, 3, 4]


@pytest.mark.parametrize("budget_ns", [1, 10**12])
def test_one_pacer_serves_turn_after_turn(budget_ns: int) -> None:
    """Steps that come back for another turn later (a request sent, then recorded)
    are all let through, whatever the budget."""

    async def main() -> int:
        pacer = Pacer(budget_ns=budget_ns)
        count = 0

        async def request() -> None:
            nonlocal count
            for _ in range(3):
                await pacer.turn()
                count += 1
                await asyncio.sleep(0)

        await asyncio.gather(*(request() for _ in range(50)))
        return count

    assert asyncio.run(main()) == 150
