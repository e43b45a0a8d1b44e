"""Incremental reads of the replicas' logs for the simulator's full checks (issue 35; docs/design.md
"Simulation"): what :mod:`sim.log_reading` reads from the log start at every check, read once.

A :class:`LogView` remembers, for one ``Log`` object of one broker (so one incarnation: a restart
opens new ``Log`` objects), every batch read so far below its log end offset, byte for byte, and
the records of those batches once they are decoded. Each check reads only from the view's last
batch on: the first read of a refresh starts at that batch (the offset whose read returns it
first) and must give back its bytes unchanged, then the new batches follow. The batches below an
offset (:meth:`LogViews.batches`) and the records below it (:meth:`LogViews.records`) are then
exactly those :func:`sim.log_reading.batches_below` and :func:`sim.log_reading.records_below` give:
the same reads (``Log.read`` from the log start, batch by batch to each batch's next offset), made
once. The readers' filters (a batch read from inside it is not a batch below the offset, its
records at or above the read offset are records) only ever apply to the batch holding the log
start offset, because a log's batches rise (``check_follower_offsets`` and ``assign_offsets``
hold every append to that); a log in which one does not (a batch starting below the previous one's
next offset) is read the original way, from its start, at every check.

A view is dropped, and the log read again from its start, whenever what it holds may no longer be
what the log holds:

* the broker's log of the partition is another ``Log`` object (a new incarnation, a deleted log
  created again);
* the log was truncated (its truncation count moved: a truncation below what was read followed by
  the append of other data leaves the log end offset where it was, so the count is what tells),
  or its log start offset moved, or its log end offset is below what was read;
* a segment that held bytes when the view read it is no longer in its place (the cleaner swapped
  it, retention or a full truncation deleted it);
* the view's last batch no longer reads back byte for byte (a fingerprint of the tail, whatever
  changed it).

The checks observe and never steer: a view reads through the same ``Log.read`` as the original
readers, and reads (so meets a closed or offline log's error) exactly when they would: once per
check whenever the log start offset is below the offset read to.
"""

from __future__ import annotations

import itertools
from bisect import bisect_left
from typing import TYPE_CHECKING

from client.protocol.records import Record, decode_batch, iter_batches
from sim.log_reading import batches_below, records_below

if TYPE_CHECKING:
    from broker.log import Log

_READ_BYTES = 1 << 20

Batch = tuple[int, int, bytes]  # (base offset, last offset, bytes), as batches_below gives them


class _Stale(Exception):
    """The view's tail no longer reads back as it was: read the log again from its start."""


class LogView:
    """What one Log object held below its log end offset when last read (see the module doc)."""

    __slots__ = (
        "log",
        "token",
        "truncations",
        "log_start",
        "segments",
        "end",
        "resume",
        "tail",
        "batches",
        "lasts",
        "head",
        "head_last",
        "records",
        "counts",
        "values",
        "refreshed",
        "irregular",
    )

    def __init__(self, log_: Log, token: int) -> None:
        self.log = log_
        self.token = token  # a new one whenever the view starts again: pair comparisons key on it
        self.truncations = log_._truncations
        self.log_start = log_.log_start_offset
        self.segments: list[tuple[object, int]] = []  # (segment, its size) as of the last read
        self.end = self.log_start  # the next offset after the last batch read
        self.resume = self.log_start  # the read offset that gives back the last batch first
        self.tail = b""  # the last batch's bytes
        self.batches: list[Batch] = []
        self.lasts: list[int] = []  # their last offsets (rising)
        self.head: list[Record] = []  # the records at or above the log start of a batch holding it
        self.head_last = -1  # that batch's last offset (-1: none)
        self.records: list[Record] = []  # the head's, then those of batches[:len(counts)]
        self.counts: list[int] = []  # len(records) after each decoded batch
        self.values: dict[int, bytes | None] = {}  # offset -> value of every decoded record
        self.refreshed = -1  # the check it was last read in
        self.irregular = False  # its batches do not rise: read the original way

    def still_holds(self, log_: Log) -> bool:
        """Nothing that could change what was read happened to the log (the module doc's list,
        but the fingerprint, which the next read checks)."""
        if (
            log_ is not self.log
            or log_._truncations != self.truncations
            or log_.log_start_offset != self.log_start
            or log_.log_end_offset < self.end
        ):
            return False
        segments = log_.segments
        if len(segments) < len(self.segments):
            return False
        return all(size == 0 or segments[i] is segment for i, (segment, size) in enumerate(self.segments))

    def count_below(self, end: int) -> int:
        """How many of the batches read end below ``end``."""
        return bisect_left(self.lasts, end)

    def decode(self, upto: int) -> None:
        """Decode the records of the first ``upto`` batches (those not decoded yet)."""
        records, values, counts = self.records, self.values, self.counts
        for _base, _last, data in self.batches[len(counts) : upto]:
            for record in decode_batch(data):
                records.append(record)
                values[record.offset] = record.value
            counts.append(len(records))


class LogViews:
    """The views of every replica the checks read, by (broker, partition)."""

    def __init__(self) -> None:
        self._views: dict[tuple[int, tuple[str, int]], LogView] = {}
        self._tokens = itertools.count(1)
        self.check = 0  # the check running now: a view is read at most once per check
        self.reads = 0  # Log.read calls made (a cost measure)
        self.restarts = 0  # views dropped and read again from the log start

    def begin_check(self) -> None:
        self.check += 1

    # -- what the original readers give ----------------------------------------------------------
    def batches(self, broker_id: int, tp: tuple[str, int], log_: Log, end: int) -> list[Batch]:
        """``batches_below(log_, end)``."""
        view, count = self.batch_count(broker_id, tp, log_, end)
        return [] if view is None else view.batches[:count]

    def batch_count(
        self, broker_id: int, tp: tuple[str, int], log_: Log, end: int
    ) -> tuple[LogView | None, int]:
        """The view and how many of its batches ``batches_below(log_, end)`` gives (its first
        ones); no view when that read reads nothing. An irregular log's batches are read anew."""
        if log_.log_start_offset >= end:
            return None, 0
        view = self._fresh(broker_id, tp, log_)
        if view.irregular:
            reread = _Reread(view, batches_below(log_, end))
            return reread, len(reread.batches)
        return view, view.count_below(end)

    def records(self, broker_id: int, tp: tuple[str, int], log_: Log, end: int) -> list[Record]:
        """``list(records_below(log_, end))``."""
        if log_.log_start_offset >= end:
            return []
        view = self._fresh(broker_id, tp, log_)
        if view.irregular:
            return list(records_below(log_, end))
        if view.head_last >= end:
            return []  # the batch holding the log start reaches end: nothing below it
        count = view.count_below(end)
        view.decode(count)
        return view.records[: view.counts[count - 1]] if count else list(view.head)

    def values(self, broker_id: int, tp: tuple[str, int], log_: Log) -> dict[int, bytes | None]:
        """``{r.offset: r.value for r in records_below(log_, log_.log_end_offset)}`` (do not
        change it: it is the view's own)."""
        end = log_.log_end_offset
        if log_.log_start_offset >= end:
            return {}
        view = self._fresh(broker_id, tp, log_)
        if view.irregular:
            return {r.offset: r.value for r in records_below(log_, end)}
        view.decode(len(view.batches))
        return view.values

    # -- reading ---------------------------------------------------------------------------------
    def _fresh(self, broker_id: int, tp: tuple[str, int], log_: Log) -> LogView:
        """The view of ``log_``, read to its log end offset in this check."""
        key = (broker_id, tp)
        view = self._views.get(key)
        if view is not None and view.refreshed == self.check and view.log is log_:
            return view
        if view is None or not view.still_holds(log_):
            view = self._start(key, log_)
        try:
            self._read(view, log_)
        except _Stale:
            view = self._start(key, log_)
            self._read(view, log_)
        view.refreshed = self.check
        return view

    def _start(self, key: tuple[int, tuple[str, int]], log_: Log) -> LogView:
        if key in self._views:
            self.restarts += 1
        view = self._views[key] = LogView(log_, next(self._tokens))
        return view

    def _read(self, view: LogView, log_: Log) -> None:
        """Read from the view's last batch to the log end offset, as the original readers'
        loop does from the log start (``Log.read`` of at most 1 MiB, to each batch's next offset)."""
        leo = log_.log_end_offset
        offset = view.resume
        tail = view.tail
        while offset < leo:
            data = bytes(log_.read(offset, _READ_BYTES, max_offset=leo).records)
            self.reads += 1
            if not data:
                break
            start, skip = offset, 0
            if tail:
                if not data.startswith(tail):
                    raise _Stale
                skip, tail = len(tail), b""
                offset = max(offset, view.end)
            for position, header in iter_batches(memoryview(data)[skip:]):
                base, last = header.base_offset, header.last_offset
                at = skip + position
                batch = data[at : at + header.size]
                if base < start and not view.batches and view.head_last < 0:
                    # the batch holding the log start (a fresh view's first): its records from there
                    view.head = [r for r in decode_batch(batch) if r.offset >= start]
                    view.head_last = last
                    view.resume, view.tail = start, batch
                    view.records.extend(view.head)
                    view.values.update((r.offset, r.value) for r in view.head)
                else:
                    if base < view.end:
                        view.irregular = True  # below the previous batch's next offset
                    view.batches.append((base, last, batch))
                    view.lasts.append(last)
                    view.resume, view.tail = base, batch
                offset = max(offset, header.next_offset)
                view.end = max(view.end, header.next_offset)
            if offset <= start:
                raise RuntimeError(
                    f"a read of {log_.topic}-{log_.partition} at {start} returned no batch ending above it"
                )
        view.segments = [(segment, segment.size) for segment in log_.segments]


class _Reread(LogView):
    """An irregular log's batches below an offset, read the original way (see
    :meth:`LogViews.batch_count`): a view of those batches alone, for one comparison."""

    __slots__ = ()

    def __init__(self, view: LogView, batches: list[Batch]) -> None:
        super().__init__(view.log, -next(_REREADS))  # a token no comparison remembers
        self.batches = batches
        self.lasts = [last for _, last, _ in batches]


_REREADS = itertools.count(1)
