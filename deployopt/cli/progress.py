"""Progress on stderr when it is not a terminal: plain lines a log keeps, in place of the live bar.

`deployopt.cli.app.progress_bar` gives a terminal rich's live bar and a pipe, a CI log or a `nohup`
file a `LineProgress`, which the callers drive with the same calls (add_task, update, advance, a
`with` block) and which prints lines such as

    progress: per-layer sweep 0/423 (30.0 s)
    progress: per-layer sweep 48/423 (1 min 02 s)
    progress: per-layer sweep 48/423 (1 min 32 s)
    progress: per-layer sweep 423/423 (9 min 41 s, done)
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Optional

from rich.console import Console
from rich.progress import GetTimeCallable, Progress, Task, TaskID

#: Seconds of wall time between two lines of one task, and before its first: a task over sooner
#: prints nothing; one still running prints a line at least this often, advanced or not. Tests set
#: it to 0 (every change a line).
PROGRESS_INTERVAL_S = 30.0


def format_elapsed(seconds: float) -> str:
    """`3.6 s`, `4 min 09 s`, `1 h 02 min`: short, and read at a glance in a log."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    whole = int(seconds)
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    return f"{whole // 3600} h {whole % 3600 // 60:02d} min"


def _count(value: float) -> str:
    return f"{value:g}" if value != int(value) else str(int(value))


@dataclass
class _Lines:
    """What one task has printed: whether any line, when and at which count the last (the task's
    start, before its first), whether its end; and the timer of its next line, `armed` counting
    the timers started, so that one replaced while it waited for the lock prints nothing."""

    last_at: float
    last_done: float
    printed: bool = False
    ended: bool = False
    timer: Optional[threading.Timer] = None
    armed: int = 0


class LineProgress(Progress):
    """rich's Progress, its live display off, that prints one plain line (no colour, no markup,
    never folded) per event of a task on `console`:

    - once the task has run `interval` seconds (PROGRESS_INTERVAL_S) unfinished, a line, whether
      or not it advanced (a timer prints it): a run stuck in its first step says where it is;
    - then a line each `interval` after the last while it runs unfinished, advanced or not (the
      timer again; a change at least `interval` after the last line prints it too): a run hung
      midway keeps saying so, the same count with a growing elapsed time, and a log tailed never
      goes silent on a task still open. At most one line a task per `interval`;
    - at its end (its count reaches its total, or the `with` block ends) a last line, marked
      `done`, or `stopped` when the block ends in an exception or the task short of its total.

    A task over within `interval` prints nothing, its end included: the command's summary says what
    it did (`per-layer sweep: 423 shapes, 423 timed in 3.6 s`), a log tailed for a 10-60 minute run
    on a board wants the steps that take time, not a pair of lines for each that does not, and a
    run that fails early keeps its stderr the one `error:` line it was. Lines are wall-clock
    throttled, not per step: a 423-shape sweep on a Nano is a line about every chunk of convs or
    every 30 s, whichever is the rarer. `get_time` (the clock of the throttle and of the elapsed
    times shown) and `interval` are for tests."""

    def __init__(
        self,
        console: Console,
        *,
        interval: Optional[float] = None,
        get_time: Optional[GetTimeCallable] = None,
    ) -> None:
        super().__init__(console=console, disable=True, get_time=get_time)
        self.interval = PROGRESS_INTERVAL_S if interval is None else interval
        self._lines: dict[TaskID, _Lines] = {}
        self._mutex = threading.RLock()  # the timers' threads print too
        self._stopped = False
        self._failed = False

    def add_task(
        self,
        description: str,
        start: bool = True,
        total: Optional[float] = 100.0,
        completed: int = 0,
        visible: bool = True,
        **fields: Any,
    ) -> TaskID:
        task_id = super().add_task(description, start, total, completed, visible, **fields)
        with self._mutex:
            self._lines[task_id] = _Lines(last_at=self.get_time(), last_done=completed)
            if self._stopped:
                return task_id
            if self.interval <= 0:  # every step a line, the start's included
                self._say(task_id)
            else:
                self._arm(task_id, self.interval)
        return task_id

    def update(
        self,
        task_id: TaskID,
        *,
        total: Optional[float] = None,
        completed: Optional[float] = None,
        advance: Optional[float] = None,
        description: Optional[str] = None,
        visible: Optional[bool] = None,
        refresh: bool = False,
        **fields: Any,
    ) -> None:
        super().update(
            task_id,
            total=total,
            completed=completed,
            advance=advance,
            description=description,
            visible=visible,
            refresh=refresh,
            **fields,
        )
        self._changed(task_id)

    def advance(self, task_id: TaskID, advance: float = 1) -> None:
        super().advance(task_id, advance)
        self._changed(task_id)

    def remove_task(self, task_id: TaskID) -> None:
        with self._mutex:
            lines = self._lines.pop(task_id, None)
            if lines and lines.timer:
                lines.timer.cancel()
        super().remove_task(task_id)

    def stop(self) -> None:
        """The end line of each task still open that printed a line, and no line after: `stopped`
        on an exception or for a task short of its total (a sweep given up on said `done` at
        0/10), else `done` (a task of no total ends where it ends)."""
        with self._mutex:
            if not self._stopped:
                for task_id, lines in self._lines.items():
                    if not lines.ended:
                        task = self._tasks[task_id]
                        short = task.total is not None and task.completed < task.total
                        self._end(task_id, "stopped" if self._failed or short else "done")
                self._stopped = True
        super().stop()

    def finish(self) -> None:
        """Each task still open ended `done` at its count, short of its total or not: for a caller
        whose work is over though a total was not reached (optimize's search, converged before
        --max-evals), which `stop` would otherwise end `stopped`."""
        with self._mutex:
            if not self._stopped:
                for task_id, lines in self._lines.items():
                    if not lines.ended:
                        self._end(task_id, "done")

    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc_val: Optional[BaseException],
        exc_tb: Optional[TracebackType],
    ) -> None:
        self._failed = exc_type is not None
        super().__exit__(exc_type, exc_val, exc_tb)

    def line(self, task: Task, end: str = "") -> str:
        """`progress: DESCRIPTION DONE/TOTAL (ELAPSED[, END])`, DONE alone for a task of no total."""
        count = _count(task.completed) + ("" if task.total is None else f"/{_count(task.total)}")
        elapsed = task.finished_time if task.finished_time is not None else task.elapsed
        when = format_elapsed(elapsed or 0.0) + (f", {end}" if end else "")
        return f"progress: {task.description} {count} ({when})"

    def _changed(self, task_id: TaskID) -> None:
        with self._mutex:
            lines = self._lines.get(task_id)
            if lines is None or self._stopped:
                return
            task = self._tasks[task_id]
            if task.total is not None and task.completed >= task.total:
                if not lines.ended:
                    self._end(task_id, "done")
                return
            if lines.ended:  # a total raised past the count: open again, its heartbeat with it
                lines.ended = False
                self._arm(task_id, max(self.interval - (self.get_time() - lines.last_at), 0.0))
            if task.completed != lines.last_done and self.get_time() - lines.last_at >= self.interval:
                self._say(task_id)

    def _arm(self, task_id: TaskID, delay: float) -> None:
        """The task's timer, `delay` seconds from now, in place of the one before (of interval 0: none)."""
        lines = self._lines[task_id]
        if lines.timer:
            lines.timer.cancel()
        if self.interval <= 0:
            lines.timer = None
            return
        lines.armed += 1
        lines.timer = threading.Timer(delay, self._overdue, (task_id, lines.armed))
        lines.timer.daemon = True
        lines.timer.start()

    def _overdue(self, task_id: TaskID, armed: Optional[int] = None) -> None:
        """The timer's (`armed` its number; a test calls it without): a line of a task still open
        `interval` after its last line (or its start), advanced or not, and the timer again; early
        (a clock of its own, a timer woken early), the timer again for what is left."""
        with self._mutex:
            lines = self._lines.get(task_id)
            if lines is None or self._stopped or lines.ended:
                return
            if armed is not None and armed != lines.armed:  # replaced while it waited for the lock
                return
            left = self.interval - (self.get_time() - lines.last_at)
            if left > 0:
                self._arm(task_id, left)
            else:
                self._say(task_id)

    def _end(self, task_id: TaskID, how: str) -> None:
        lines = self._lines[task_id]
        lines.ended = True
        if lines.timer:
            lines.timer.cancel()
        if lines.printed:
            self._say(task_id, how)

    def _say(self, task_id: TaskID, end: str = "") -> None:
        """The task's line; unless its end, its timer re-armed: the next line `interval` from now."""
        task = self._tasks[task_id]
        lines = self._lines[task_id]
        lines.printed, lines.last_done = True, task.completed
        if not end and not lines.ended:
            self._arm(task_id, self.interval)
        self.console.print(
            self.line(task, end), markup=False, highlight=False, emoji=False, soft_wrap=True, style=None
        )
        # the next line is due `interval` after this one was written, not after it was begun: a write
        # held up on a loaded machine put the next one closer than `interval` behind it
        lines.last_at = self.get_time()
