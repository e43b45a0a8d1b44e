"""Kafka's LogDirFailureChannel (KIP-112; docs/guarantees.md "Disk faults", docs/design.md
"Log dir failure").

Every I/O error a log hits (a failed write, fsync, truncate, read or checkpoint: ENOSPC, EIO,
...) is reported here with the log dir it happened in. The first report of a dir marks it
offline at once: every :class:`broker.log.log.Log` in that dir checks the channel before each
operation, so no byte is appended after a failed write, whatever thread noticed it. The
listeners (the broker's handler, which stops serving the dir's partitions, tells the controller
and halts the broker when no dir is left) run once per dir, on the thread that hit the error:
they must only hand the work to the event loop.

A dir stays offline until the broker restarts; recovery then truncates any torn tail
(:meth:`broker.log.segment.LogSegment.recover`) and the replicas catch up from their leaders.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from client.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

OfflineListener = Callable[[Path, str], None]


class KafkaStorageError(KafkaError):
    """An operation failed because of an I/O error in a log dir, or the dir is offline.
    Clients see KAFKA_STORAGE_ERROR (56), which is retriable: they refresh metadata and find
    the new leader."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.KAFKA_STORAGE_ERROR, message)


class LogDirFailureChannel:
    def __init__(self) -> None:
        self._offline: set[Path] = set()
        self._lock = threading.Lock()
        self._listeners: list[OfflineListener] = []

    def add_listener(self, listener: OfflineListener) -> None:
        self._listeners.append(listener)

    def is_offline(self, log_dir: Path) -> bool:
        return log_dir in self._offline

    @property
    def offline_dirs(self) -> set[Path]:
        with self._lock:
            return set(self._offline)

    @contextlib.contextmanager
    def io_errors(self, log_dir: Path, message: str, reraise: bool = True) -> Iterator[None]:
        """Report an OSError in the block as a failure of ``log_dir`` (``message`` says what was
        being done), then raise it as KAFKA_STORAGE_ERROR, or, with ``reraise`` False, go on."""
        try:
            yield
        except OSError as e:
            self.maybe_add_offline_log_dir(log_dir, message, e)
            if reraise:
                raise KafkaStorageError(f"{message}: {e}") from e

    def maybe_add_offline_log_dir(
        self, log_dir: Path, message: str, error: BaseException | None = None
    ) -> None:
        """Mark ``log_dir`` offline (once) and tell the listeners. ``message`` says what failed."""
        log_dir = Path(log_dir)
        with self._lock:
            if log_dir in self._offline:
                return
            self._offline.add(log_dir)
        log.error("%s: %s; log dir %s is now offline", message, error, log_dir)
        for listener in list(self._listeners):
            try:
                listener(log_dir, message)
            except Exception:
                log.exception("log dir failure listener failed for %s", log_dir)
