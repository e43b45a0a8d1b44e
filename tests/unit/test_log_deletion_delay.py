"""A deleted partition's log (Kafka's LogManager.asyncDelete, the "kafka-delete-logs" task): its
directory is renamed ``<topic>-<partition>.<uuid>-delete`` at once, so no load takes it for a
log, and removed only ``file.delete.delay.ms`` later; a manager that stops within the delay
leaves the renamed directory, and the next load removes it. The clock is injected.
"""

from __future__ import annotations

from pathlib import Path

from broker.log.log_config import LogConfig
from broker.log.log_manager import LogManager


def names(log_dir: Path) -> list[str]:
    return sorted(p.name for p in log_dir.iterdir() if p.is_dir())


def test_the_renamed_directory_goes_after_the_delay_not_before(tmp_path: Path) -> None:
    now = [1_000]
    manager = LogManager([tmp_path], LogConfig(file_delete_delay_ms=5_000), lambda: now[0])
    try:
        manager.get_or_create_log("t", 0)
        manager.get_or_create_log("t", 1)
        manager.delete_log("t", 0)
        (renamed,) = [n for n in names(tmp_path) if n.startswith("t-0.")]
        assert renamed.endswith("-delete") and "t-0" not in names(tmp_path)
        assert manager.get_log("t", 0) is None and manager.get_log("t", 1) is not None
        now[0] += 4_999
        manager.delete_doomed_logs()
        assert renamed in names(tmp_path)
        now[0] += 1
        manager.delete_doomed_logs()
        assert names(tmp_path) == ["t-1"]
    finally:
        manager.shutdown()


def test_a_zero_delay_removes_at_once_and_a_leftover_goes_at_the_next_load(tmp_path: Path) -> None:
    now = [0]
    manager = LogManager([tmp_path], LogConfig(file_delete_delay_ms=0), lambda: now[0])
    manager.get_or_create_log("t", 0)
    manager.delete_log("t", 0)
    assert names(tmp_path) == []
    manager.shutdown()

    stopped = LogManager([tmp_path], LogConfig(file_delete_delay_ms=60_000), lambda: now[0])
    stopped.get_or_create_log("u", 0)
    stopped.delete_log("u", 0)
    stopped.shutdown()  # within the delay: the renamed directory stays on disk
    assert [n for n in names(tmp_path) if n.endswith("-delete")]
    again = LogManager([tmp_path], LogConfig(), lambda: now[0])
    try:
        again.load_logs()
        assert names(tmp_path) == []
    finally:
        again.shutdown()
