"""Background work's turns: a step inside a turn goes on at once, a step after it lets the
loop serve what is ready first (a review the server has just read)."""

from __future__ import annotations

import asyncio

from webhook.shell.process.turns import Turns


def test_a_step_after_the_turn_lets_ready_callbacks_run_first_and_opens_a_new_turn() -> None:
    async def main() -> None:
        turns = Turns(length=0.0)
        served: list[str] = []
        asyncio.get_running_loop().call_soon(served.append, "review")
        await turns.take()
        assert served == ["review"]
        assert turns.count == 1

    asyncio.run(main())


def test_a_step_inside_a_turn_does_not_suspend() -> None:
    async def main() -> None:
        turns = Turns(length=3600.0)
        await turns.take()  # the first opens a turn
        served: list[str] = []
        asyncio.get_running_loop().call_soon(served.append, "review")
        for _ in range(100):
            await turns.take()
        assert served == [], "no step within the turn gave the loop a pass"
        assert turns.count == 1

    asyncio.run(main())


def test_steps_of_several_tasks_share_one_turn() -> None:
    """Two kinds of background work waiting at once open one turn, not one each."""

    async def main() -> None:
        turns = Turns(length=3600.0)
        await asyncio.gather(turns.take(), turns.take(), turns.take())
        assert turns.count == 1

    asyncio.run(main())
