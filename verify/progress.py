"""Progress and phase timings of the verification job (docs/design.md "Verification job").

Spark's Python workers cannot report to the driver while a task runs, so a data source given the
option ``progress_dir`` has each reader keep the number of rows it has produced in a small file
of its own there (:class:`RowCounter`, rewritten once per Arrow batch of 65,536 rows). While a
phase runs, :class:`Timings` has a thread in the driver print the phase, its elapsed time, the
rows read so far (the sum of those files, :func:`rows_so_far`) and the tasks done in Spark's
running stages every ``interval_s`` seconds.
That works for ``local[N]``, where the workers share the driver's filesystem; elsewhere the
count stays 0 and only the elapsed time is printed.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

HEARTBEAT_S = 10.0


class RowCounter:
    """Rows produced by one reader, kept in ``<directory>/<name>`` (a no-op without a directory)."""

    def __init__(self, directory: str | None, name: str) -> None:
        self.path = Path(directory) / name if directory else None
        self.rows = 0

    def add(self, rows: int) -> None:
        self.rows += rows
        if self.path is None:
            return
        temporary = self.path.with_name(f".{self.path.name}.{os.getpid()}")
        with contextlib.suppress(OSError):
            temporary.write_text(str(self.rows))
            os.replace(temporary, self.path)


def rows_so_far(directory: str | Path | None) -> int:
    if directory is None:
        return 0
    total = 0
    with contextlib.suppress(OSError):
        for path in Path(directory).iterdir():
            if not path.name.startswith("."):
                with contextlib.suppress(OSError, ValueError):
                    total += int(path.read_text() or 0)
    return total


def active_tasks(spark: Any) -> str:
    """``", tasks done 5/16"`` over the session's running stages ("" without any or on failure)."""
    if spark is None:
        return ""
    try:
        tracker = spark.sparkContext.statusTracker()
        stages = [tracker.getStageInfo(i) for i in tracker.getActiveStageIds()]
        stages = [s for s in stages if s is not None]
        done, total = sum(s.numCompletedTasks for s in stages), sum(s.numTasks for s in stages)
    except Exception:  # noqa: BLE001 - progress must never fail the job
        return ""
    return f", tasks done {done}/{total}" if total else ""


class Timings(dict):
    """Seconds per phase; :meth:`measure` times one and reports on it while it runs."""

    def __init__(
        self,
        say: Callable[[str], None] | None = None,
        progress_dir: str | Path | None = None,
        interval_s: float = HEARTBEAT_S,
    ) -> None:
        super().__init__()
        self.say = say
        self.progress_dir = progress_dir
        self.interval_s = interval_s
        self.spark: Any = None  # set once there is a session: the heartbeat then counts its tasks

    @contextmanager
    def measure(self, name: str, record: bool = True) -> Iterator[None]:
        """Time the block as phase ``name`` (``record=False``: only report on it while it runs)."""
        start = time.perf_counter()
        done = threading.Event()
        beat = None
        if self.say is not None and self.interval_s > 0:
            beat = threading.Thread(
                target=self._beat, args=(name, start, done), name="floodmark-progress", daemon=True
            )
            beat.start()
        try:
            yield
        finally:
            done.set()
            if beat is not None:
                beat.join()
            if record:
                self[name] = round(time.perf_counter() - start, 3)

    def _beat(self, name: str, start: float, done: threading.Event) -> None:
        assert self.say is not None
        while not done.wait(self.interval_s):
            rows = rows_so_far(self.progress_dir)
            read = f", {rows:,} rows read from the logs so far" if rows else ""
            self.say(f"  ... {name}: {time.perf_counter() - start:.0f} s{read}{active_tasks(self.spark)}")

    def slowest(self) -> tuple[str, float] | None:
        phases = [(k, v) for k, v in self.items() if k != "total"]
        return max(phases, key=lambda kv: kv[1]) if phases else None
