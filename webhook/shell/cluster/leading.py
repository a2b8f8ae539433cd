"""A task that runs only while this replica holds the Lease, started and stopped by its callbacks.

The webhook-rules keeper and the PolicyReport writer each speak for the whole cluster, so one
replica at a time runs them (`leader.LeaderElector` calls `set_leading`). What a worker does
while leading is its `_lead`; what it stops claiming when it stops is its `_forget`.
"""

from __future__ import annotations

import asyncio


class LeadingTask:
    """Start/stop plumbing for one leader-only coroutine; subclasses give `_lead`, `_forget`."""

    task_name = "leader task"

    def __init__(self) -> None:
        self._task: asyncio.Task[None] | None = None

    @property
    def leading(self) -> bool:
        return self._task is not None and not self._task.done()

    def set_leading(self, leading: bool) -> None:
        """Start or stop; safe from LeaderElector callbacks (no await)."""
        if leading and not self.leading:
            self._task = asyncio.create_task(self._lead(), name=self.task_name)
        elif not leading and self._task is not None:
            self._task.cancel()
            self._task = None
            self._forget()

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        self._forget()

    async def _lead(self) -> None:
        raise NotImplementedError

    def _forget(self) -> None:
        """What a replica that stops leading stops claiming; nothing by default."""
