"""The broker-wide cache of segment log file descriptors: at most ``log.segment.open.files.max``
of them open, least recently used closed first (docs/design.md "Open files at scale (issue 25)").

Kafka keeps every segment's ``.log`` open for the segment's life (and memory-maps its indexes), so
its descriptors grow with partitions times segments and the operator raises ``ulimit -n``. Here a
:class:`SegmentFile` (one per segment, active ones included) holds a descriptor only while the
:class:`SegmentFileCache` keeps it: every I/O call pins the handle (:meth:`SegmentFile.pinned`),
opening the file on demand (``O_RDWR | O_APPEND``: appends and ``pread`` alike), and unpins it
after; an unpinned handle goes to the most-recently-used end of the cache, and while more
descriptors are open than the bound, the least recently used unpinned ones are closed. A pinned
handle is never closed under its user: a bound smaller than the calls in flight is exceeded for
their duration. Closing a segment closes its handle (after the last pin if one is held).

Running out of descriptors degrades, never fails the broker: an open that meets EMFILE or ENFILE
closes half of the idle handles and tries once more; if that fails too, the OSError goes to the
caller, whose log reports it as a resource error (broker/log/log_dir_failure.py), retriable.

Closing an idle descriptor loses nothing: written bytes are in the page cache, and ``fsync`` on a
descriptor opened later flushes the file's dirty pages whoever wrote them (Linux 4.16 and later
also report to it a writeback error no descriptor has seen).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

#: the bound of a cache built without one (a log or a log manager opened outside a broker)
DEFAULT_SEGMENT_FILES_MAX = 1024
OPEN_FLAGS = os.O_RDWR | os.O_APPEND
_EXHAUSTION_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE})


@dataclass(frozen=True)
class SegmentFileStats:
    """What the cache holds now and has done (the broker's metrics)."""

    open: int
    pinned: int
    max_open: int
    opens: int
    evictions: int
    exhaustion_evictions: int


class SegmentFile:
    """One segment's log file, opened on demand through its cache. ``path`` may change while a
    descriptor is open (the log cleaner renames files): a later open uses the new one."""

    __slots__ = ("_cache", "closed", "fd", "path", "pins")

    def __init__(self, cache: SegmentFileCache, path: Path) -> None:
        self._cache = cache
        self.path = path
        self.fd = -1
        self.pins = 0
        self.closed = False

    def pinned(self) -> _Pin:
        """``with handle.pinned() as fd:`` the descriptor, open and pinned for the block."""
        return _Pin(self)

    def create(self) -> None:
        """Create the file if missing (``O_CREAT``); its descriptor stays cached as most recent."""
        with _Pin(self, os.O_CREAT):
            pass

    def close(self) -> None:
        self._cache.close(self)


class _Pin:
    __slots__ = ("_extra", "_handle")

    def __init__(self, handle: SegmentFile, extra_flags: int = 0) -> None:
        self._handle = handle
        self._extra = extra_flags

    def __enter__(self) -> int:
        return self._handle._cache.acquire(self._handle, self._extra)

    def __exit__(self, *exc: object) -> None:
        self._handle._cache.release(self._handle)


class SegmentFileCache:
    """The LRU of :class:`SegmentFile` descriptors, bounded by ``max_open``; thread-safe."""

    def __init__(self, max_open: int = DEFAULT_SEGMENT_FILES_MAX) -> None:
        self.max_open = max(1, max_open)
        self._lock = threading.Lock()
        self._idle: OrderedDict[SegmentFile, None] = OrderedDict()  # open, unpinned: LRU first
        self._open = 0
        self._pinned = 0
        self._opens = 0
        self._evictions = 0
        self._exhaustion_evictions = 0

    def handle(self, path: Path) -> SegmentFile:
        """A handle for the file at ``path``; nothing is opened yet."""
        return SegmentFile(self, Path(path))

    @property
    def stats(self) -> SegmentFileStats:
        with self._lock:
            return SegmentFileStats(
                self._open,
                self._pinned,
                self.max_open,
                self._opens,
                self._evictions,
                self._exhaustion_evictions,
            )

    def acquire(self, handle: SegmentFile, extra_flags: int = 0) -> int:
        """Pin ``handle`` and return its descriptor, opening the file when it has none."""
        with self._lock:
            if handle.closed:
                raise OSError(errno.EBADF, f"segment file {handle.path} is closed")
            if handle.fd >= 0:
                if handle.pins == 0:
                    del self._idle[handle]
                    self._pinned += 1
                handle.pins += 1
                return handle.fd
            handle.fd = self._open_file(handle.path, OPEN_FLAGS | extra_flags)
            handle.pins = 1
            self._open += 1
            self._pinned += 1
            self._opens += 1
            self._evict(self.max_open)
            return handle.fd

    def release(self, handle: SegmentFile) -> None:
        with self._lock:
            handle.pins -= 1
            if handle.pins:
                return
            self._pinned -= 1
            if handle.closed:
                self._close_fd(handle)
                return
            self._idle[handle] = None
            self._evict(self.max_open)

    def close(self, handle: SegmentFile) -> None:
        """Close ``handle`` for good (now, or at its last unpin); every later acquire fails."""
        with self._lock:
            if handle.closed:
                return
            handle.closed = True
            if handle.fd >= 0 and handle.pins == 0:
                del self._idle[handle]
                self._close_fd(handle)

    def close_idle(self) -> int:
        """Close every unpinned descriptor (they reopen on demand); returns how many."""
        with self._lock:
            closed = len(self._idle)
            self._evict(0)
            return closed

    # -- under the lock ----------------------------------------------------------------------------

    def _open_file(self, path: Path, flags: int) -> int:
        try:
            return os.open(path, flags, 0o644)
        except OSError as e:
            if e.errno not in _EXHAUSTION_ERRNOS or not self._idle:
                raise
            freed = max(1, len(self._idle) // 2)
            log.warning(
                "out of file descriptors opening %s (%s): closing %d idle segment file(s) of %d open",
                path,
                e,
                freed,
                self._open,
            )
            self._exhaustion_evictions += freed
            self._evict(self._open - freed)
            return os.open(path, flags, 0o644)

    def _evict(self, bound: int) -> None:
        """Close least recently used idle descriptors while more than ``bound`` are open."""
        while self._open > bound and self._idle:
            handle, _ = self._idle.popitem(last=False)
            self._close_fd(handle)
            self._evictions += 1

    def _close_fd(self, handle: SegmentFile) -> None:
        fd, handle.fd = handle.fd, -1
        self._open -= 1
        with contextlib.suppress(OSError):  # a regular file's close does not fail on Linux
            os.close(fd)
