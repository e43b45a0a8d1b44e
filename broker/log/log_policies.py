"""The log manager's periodic policies over every online log (docs/design.md "Log dir
failure"): Kafka's LogManager scheduler tasks ``kafka-log-retention`` (retention by time and
size), ``kafka-log-flusher`` (``flush.ms``) and PeriodicProducerExpirationCheck
(``producer.id.expiration.ms``). Each takes the logs as :meth:`LogManager.all_logs` lists them
and skips those whose dir is offline; the scheduler calls them through the manager.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable

from broker.log.log import Log
from broker.log.log_dir_failure import KafkaStorageError

log = logging.getLogger(__name__)


def cleanup_logs(logs: Iterable[Log]) -> int:
    """Retention on every log; returns the number of segments deleted."""
    total = 0
    for lg in logs:
        if lg.is_offline:
            continue
        with contextlib.suppress(KafkaStorageError):  # its dir went offline: the channel has it
            total += lg.delete_old_segments()
    return total


def remove_expired_producers(logs: Iterable[Log], now_ms: int) -> int:
    """Drop producers idle for ``producer.id.expiration.ms`` from every online log; returns how
    many were dropped."""
    total = sum(lg.remove_expired_producers(now_ms) for lg in logs if not lg.is_offline)
    if total:
        log.info("expired %d idle producer id(s)", total)
    return total


def flush_dirty_logs(logs: Iterable[Log], now_ms: int) -> None:
    """Flush logs whose flush.ms has passed since their last flush; also flush segments that
    were rolled but not yet flushed (each roll schedules that flush, as Kafka's does: this only
    catches a job that failed), so recovery after a crash re-scans the active segment."""
    for lg in logs:
        if lg.is_offline:
            continue
        try:
            if now_ms - lg.last_flush_ms >= lg.config.flush_interval_ms:
                lg.flush()
            elif lg.recovery_point < lg.active_segment.base_offset:
                lg.flush_rolled(lg.active_segment.base_offset)
        except Exception:
            log.exception("flushing %s failed", lg.dir)
