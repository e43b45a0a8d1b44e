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

Running out of a resource is not a failed disk (issue 19 item 6; docs/design.md "The file
budget"): EMFILE, ENFILE, ENOMEM and ENOBUFS (:data:`RESOURCE_ERRNOS`) say the process or the
machine lacks a file descriptor or memory, and the data in the dir is intact. Kafka's
LogDirFailureChannel takes the dir offline on any IOException, and a broker whose only dir
went offline halts: one topic too many then halts every broker. Here such an error never takes a
dir offline: it is counted (:attr:`LogDirFailureChannel.resource_errors`, the
``kafka_log_logdirfailurechannel_resourceerrors`` metric) and the operation fails with
:class:`KafkaResourceError`, REQUEST_TIMED_OUT: retriable for clients (the append was undone,
all or nothing) and not a final answer to the controller, which resends the LeaderAndIsr
partition later (controller/leader_and_isr_retry.py). A caller whose operation cannot be left
half done (a truncation, which has changed segments before it rewrites the epoch cache and
reloads the producer state) passes ``resource_retriable=False``: the dir fails as before.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

from client.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

OfflineListener = Callable[[Path, str], None]

#: errnos that mean the process or the machine lacks a resource, not that the disk failed:
#: too many open files (per process, system-wide), out of memory, out of buffer space.
RESOURCE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})


def is_resource_exhaustion(error: BaseException | None) -> bool:
    """True when ``error`` (or the OSError it was raised from) is a :data:`RESOURCE_ERRNOS` one."""
    while error is not None:
        if isinstance(error, OSError) and error.errno in RESOURCE_ERRNOS:
            return True
        error = error.__cause__
    return False


class KafkaStorageError(KafkaError):
    """An operation failed because of an I/O error in a log dir, or the dir is offline.
    Clients see KAFKA_STORAGE_ERROR (56), which is retriable: they refresh metadata and find
    the new leader."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.KAFKA_STORAGE_ERROR, message)


class KafkaResourceError(KafkaError):
    """An operation failed because the broker ran out of file descriptors or memory (EMFILE,
    ENFILE, ENOMEM, ENOBUFS); its log dir stays online. Kafka has no code for it: answered as
    REQUEST_TIMED_OUT (7), which clients retry without a metadata refresh (the leader has not
    moved) and which the controller's LeaderAndIsr resend does not treat as final."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.REQUEST_TIMED_OUT, message)


class LogDirFailureChannel:
    def __init__(self) -> None:
        self._offline: set[Path] = set()
        self._lock = threading.Lock()
        self._listeners: list[OfflineListener] = []
        #: resource errors seen (never a dir failure), by errno name: EMFILE, ENFILE, ...
        self._resource_errors: Counter[str] = Counter()

    def add_listener(self, listener: OfflineListener) -> None:
        self._listeners.append(listener)

    def is_offline(self, log_dir: Path) -> bool:
        return log_dir in self._offline

    @property
    def offline_dirs(self) -> set[Path]:
        with self._lock:
            return set(self._offline)

    @property
    def resource_errors(self) -> dict[str, int]:
        """How many resource errors (never dir failures) were met, by errno name."""
        with self._lock:
            return dict(self._resource_errors)

    def record_resource_error(self, message: str, error: BaseException) -> None:
        """Count a resource error (EMFILE, ...) met while doing ``message``; no dir goes offline."""
        cause = error
        while cause is not None and not (isinstance(cause, OSError) and cause.errno in RESOURCE_ERRNOS):
            cause = cause.__cause__
        name = errno.errorcode.get(cause.errno, "?") if isinstance(cause, OSError) else "?"
        with self._lock:
            self._resource_errors[name] += 1
        log.warning("%s: %s; out of a resource, not a disk failure: the log dir stays online", message, error)

    @contextlib.contextmanager
    def io_errors(
        self, log_dir: Path, message: str, reraise: bool = True, resource_retriable: bool = True
    ) -> Iterator[None]:
        """Report an OSError in the block as a failure of ``log_dir`` (``message`` says what was
        being done), then raise it as KAFKA_STORAGE_ERROR, or, with ``reraise`` False, go on.
        A resource error (:func:`is_resource_exhaustion`) is only counted, and raised as
        :class:`KafkaResourceError` (or, with ``reraise`` False, swallowed); with
        ``resource_retriable`` False it fails the dir like any other."""
        try:
            yield
        except OSError as e:
            if resource_retriable and is_resource_exhaustion(e):
                self.record_resource_error(message, e)
                if reraise:
                    raise KafkaResourceError(f"{message}: {e}") from e
                return
            self.maybe_add_offline_log_dir(log_dir, message, e, resource_retriable=False)
            if reraise:
                raise KafkaStorageError(f"{message}: {e}") from e

    def maybe_add_offline_log_dir(
        self,
        log_dir: Path,
        message: str,
        error: BaseException | None = None,
        resource_retriable: bool = True,
    ) -> None:
        """Mark ``log_dir`` offline (once) and tell the listeners. ``message`` says what failed.
        A resource error (EMFILE, ...) is only counted, unless ``resource_retriable`` is False."""
        if resource_retriable and is_resource_exhaustion(error):
            self.record_resource_error(message, error)  # type: ignore[arg-type]
            return
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
