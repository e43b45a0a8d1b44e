"""A failed write never corrupts a log (KIP-112; docs/guarantees.md "Disk faults").

Each test makes one file's write fail half way at the ``os.write`` (or fsync, or rename)
boundary, the way a full disk or a dying one does, and checks that the files, the indexes and
the in-memory state are exactly as before, that the caller gets KAFKA_STORAGE_ERROR, that the
log dir is reported offline, and that the next append (after a restart, as an operator would
do) lands where the failed one would have, byte-identical to a log that never failed.
kafka-python (the independent oracle) decodes every segment and checks every CRC.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from kafka.record.memory_records import MemoryRecords

from broker.log import Log, LogConfig, LogManager
from broker.log.log_dir_failure import KafkaStorageError, LogDirFailureChannel
from broker.log.segment import LogSegment, SegmentUnwritable
from client.protocol.errors import ErrorCode
from client.protocol.records import build_batch, iter_batches

REAL_WRITE = os.write
REAL_FSYNC = os.fsync
REAL_REPLACE = os.replace
REAL_FTRUNCATE = os.ftruncate


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        self.now += 1
        return self.now


def batch(n: int, tag: str, ts: int = 1_000) -> bytes:
    return build_batch([(None, f"{tag}{i}".encode(), ts + i, []) for i in range(n)])


def fd_path(fd: int) -> str:
    return os.readlink(f"/proc/self/fd/{fd}")


@contextmanager
def torn_write(monkeypatch: pytest.MonkeyPatch, suffix: str, err: int = errno.ENOSPC) -> Iterator[list[int]]:
    """The next ``os.write`` to a file ending in ``suffix`` writes half its bytes, then fails
    with ``err``: what a disk filling up in the middle of a write does. Yields the list of
    byte counts that really reached the file (so a test can show bytes were torn)."""
    torn: list[int] = []

    def write(fd: int, data) -> int:  # noqa: ANN001
        if not torn and fd_path(fd).endswith(suffix):
            half = max(1, len(data) // 2)
            torn.append(REAL_WRITE(fd, memoryview(data)[:half]))
            raise OSError(err, os.strerror(err))
        return REAL_WRITE(fd, data)

    monkeypatch.setattr(os, "write", write)
    yield torn
    monkeypatch.setattr(os, "write", REAL_WRITE)


def failing(real: Callable, match: Callable[..., bool], err: int = errno.EIO) -> Callable:
    def call(*args):  # noqa: ANN002
        if match(*args):
            raise OSError(err, os.strerror(err))
        return real(*args)

    return call


def files(dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(dir.iterdir()) if p.is_file()}


def oracle_records(log_dir: Path) -> list[tuple[int, bytes]]:
    """(offset, value) of every record in every segment, decoded by kafka-python, every CRC checked."""
    out: list[tuple[int, bytes]] = []
    for segment in sorted(log_dir.glob("*.log")):
        records = MemoryRecords(segment.read_bytes())
        while records.has_next():
            b = records.next_batch()
            assert b.validate_crc(), f"bad CRC in {segment}"
            out.extend((r.offset, r.value) for r in b)
    return out


def open_log(root: Path, channel: LogDirFailureChannel | None = None, **config) -> Log:
    return Log.open(root / "t-0", LogConfig(**config), Clock(), failure_channel=channel)


def reference_log(root: Path, appends: list[bytes], **config) -> dict[str, bytes]:
    """The files of a log that received ``appends`` with no failure (same epoch)."""
    ref = open_log(root, **config)
    for records in appends:
        ref.append_as_leader(records, leader_epoch=0)
    ref.close()
    return {k: v for k, v in files(root / "t-0").items() if k.endswith((".log", ".index", ".timeindex"))}


@pytest.mark.parametrize(
    ("suffix", "operation"), [(".log", "append"), (".index", "flush"), (".timeindex", "flush")]
)
def test_a_torn_write_leaves_the_segment_as_it_was(tmp_path: Path, monkeypatch, suffix: str, operation: str):
    """The ``.log`` is written by the append; the indexes, which hold their new entries in memory
    (docs/design.md "Open files at scale (issue 25)"), by the flush."""
    channel = LogDirFailureChannel()
    # index.interval.bytes 0: every batch adds an offset-index entry; rising timestamps add
    # time-index entries, so each of the three files has something to write.
    lg = open_log(tmp_path / "a", channel, index_interval_bytes=0)
    lg.append_as_leader(batch(5, "a", ts=1_000), leader_epoch=0)
    lg.append_as_leader(batch(5, "b", ts=2_000), leader_epoch=0)
    if operation == "flush":
        lg.flush()  # the first two batches' entries are on disk: the torn flush adds to them
        lg.append_as_leader(batch(5, "c", ts=3_000), leader_epoch=0)
    before = files(lg.dir)
    segment = lg.active_segment
    state = (
        segment.size,
        segment.next_offset,
        segment.max_timestamp,
        len(segment.index),
        len(segment.time_index),
    )

    with torn_write(monkeypatch, suffix) as torn, pytest.raises(KafkaStorageError) as failure:
        if operation == "append":
            lg.append_as_leader(batch(5, "c", ts=3_000), leader_epoch=0)
        else:
            lg.flush()
    assert torn and torn[0] > 0, "the injected failure must have left bytes in the file"
    assert failure.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    after = files(lg.dir)
    if operation == "append":
        assert after == before, "a failed append left bytes behind"
    else:  # the other index may have been written by the same flush: a valid prefix of memory
        assert {k: v for k, v in after.items() if k.endswith(suffix)} == {
            k: v for k, v in before.items() if k.endswith(suffix)
        }, "a failed index write left bytes behind"
    assert (
        segment.size,
        segment.next_offset,
        segment.max_timestamp,
        len(segment.index),
        len(segment.time_index),
    ) == state
    assert lg.log_end_offset == (10 if operation == "append" else 15)
    assert lg.recovery_point == (0 if operation == "append" else 10), (
        "a failed flush moved the recovery point"
    )
    assert channel.is_offline(tmp_path / "a"), "the log dir was not reported offline"
    # KIP-112: the log is closed for writing until the broker restarts.
    with pytest.raises(KafkaStorageError):
        lg.append_as_leader(batch(5, "c", ts=3_000), leader_epoch=0)
    with pytest.raises(KafkaStorageError):
        lg.read(0, 1 << 20)
    lg.close()

    # The restart: recovery finds nothing torn, and the retried append lands at offset 10.
    reopened = open_log(tmp_path / "a", index_interval_bytes=0)
    if operation == "append":
        info = reopened.append_as_leader(batch(5, "c", ts=3_000), leader_epoch=0)
        assert (info.first_offset, info.last_offset) == (10, 14)
    assert reopened.log_end_offset == 15
    reopened.close()
    expected = reference_log(
        tmp_path / "ref",
        [batch(5, "a", 1_000), batch(5, "b", 2_000), batch(5, "c", 3_000)],
        index_interval_bytes=0,
    )
    after = {k: v for k, v in files(tmp_path / "a" / "t-0").items() if k in expected}
    assert after == expected, "the log differs from one that never failed"
    assert [v for _, v in oracle_records(tmp_path / "a" / "t-0")] == [
        f"{t}{i}".encode() for t in "abc" for i in range(5)
    ]


def test_the_next_segment_append_lands_where_the_failed_one_would_have(tmp_path: Path, monkeypatch):
    segment = LogSegment.create(tmp_path, 0, index_interval_bytes=0, max_index_bytes=4096, time_ms=Clock())
    first = batch(3, "a")
    segment.append(first, list(iter_batches(first)))
    second = bytearray(batch(3, "b", ts=2_000))
    second[0:8] = (3).to_bytes(8, "big")  # base offset 3, as the log would assign
    headers = list(iter_batches(second))
    with torn_write(monkeypatch, ".log"), pytest.raises(OSError):
        segment.append(second, headers)
    assert segment.log_path.stat().st_size == len(first) == segment.size
    segment.append(second, headers)  # the same append again, now that the disk has room
    assert segment.log_path.read_bytes() == first + second
    assert [(h.base_offset, h.last_offset) for _, h in iter_batches(segment.log_path.read_bytes())] == [
        (0, 2),
        (3, 5),
    ]
    assert segment.find_batch(4) == (len(first), headers[0][1])


def test_a_segment_whose_undo_fails_refuses_every_later_append(tmp_path: Path, monkeypatch):
    segment = LogSegment.create(tmp_path, 0, index_interval_bytes=4096, max_index_bytes=4096, time_ms=Clock())
    first = batch(3, "a")
    segment.append(first, list(iter_batches(first)))
    monkeypatch.setattr(os, "ftruncate", failing(REAL_FTRUNCATE, lambda fd, size: True))
    with torn_write(monkeypatch, ".log"), pytest.raises(OSError):
        segment.append(first, list(iter_batches(first)))
    monkeypatch.setattr(os, "ftruncate", REAL_FTRUNCATE)
    torn_size = segment.log_path.stat().st_size
    assert torn_size > len(first), "the torn bytes should still be there (the undo failed)"
    with pytest.raises(SegmentUnwritable):
        segment.append(first, list(iter_batches(first)))
    assert segment.log_path.stat().st_size == torn_size, "appended after torn bytes"
    segment.close()


def test_recovery_truncates_the_torn_tail_an_undo_could_not_remove(tmp_path: Path, monkeypatch):
    lg = open_log(tmp_path)
    lg.append_as_leader(batch(4, "a"), leader_epoch=0)
    monkeypatch.setattr(
        os, "ftruncate", failing(REAL_FTRUNCATE, lambda fd, size: fd_path(fd).endswith(".log"))
    )
    with torn_write(monkeypatch, ".log"), pytest.raises(KafkaStorageError):
        lg.append_as_leader(batch(4, "b"), leader_epoch=0)
    monkeypatch.setattr(os, "ftruncate", REAL_FTRUNCATE)
    lg.close()
    reopened = open_log(tmp_path)  # no clean-shutdown marker: the active segment is recovered
    assert reopened.log_end_offset == 4
    assert reopened.append_as_leader(batch(4, "b"), leader_epoch=0).first_offset == 4
    assert [v for _, v in oracle_records(reopened.dir)] == [
        f"{t}{i}".encode() for t in "ab" for i in range(4)
    ]


def test_a_failed_leader_epoch_checkpoint_changes_nothing(tmp_path: Path, monkeypatch):
    channel = LogDirFailureChannel()
    lg = open_log(tmp_path, channel)
    lg.append_as_leader(batch(2, "a"), leader_epoch=3)
    checkpoint = lg.dir / "leader-epoch-checkpoint"
    before = checkpoint.read_bytes()
    monkeypatch.setattr(os, "fsync", failing(REAL_FSYNC, lambda fd: fd_path(fd).endswith("checkpoint.tmp")))
    with pytest.raises(KafkaStorageError):
        lg.assign_leader_epoch(4, lg.log_end_offset)
    assert checkpoint.read_bytes() == before
    assert [(e.epoch, e.start_offset) for e in lg.leader_epoch_cache.entries] == [(3, 0)]
    assert not list(lg.dir.glob("*.tmp")), "a stray temp file was left"
    assert channel.is_offline(tmp_path)


def test_a_failed_producer_snapshot_leaves_no_temp_file(tmp_path: Path, monkeypatch):
    lg = open_log(tmp_path)
    lg.append_as_leader(batch(2, "a"), leader_epoch=0)
    lg.roll()  # writes 00000000000000000002.snapshot
    snapshots = {p.name: p.read_bytes() for p in lg.dir.glob("*.snapshot")}
    assert snapshots
    monkeypatch.setattr(
        os, "replace", failing(REAL_REPLACE, lambda src, dst: str(src).endswith(".snapshot.tmp"))
    )
    lg.append_as_leader(batch(2, "b"), leader_epoch=0)
    with pytest.raises(KafkaStorageError):
        lg.roll()
    assert {p.name: p.read_bytes() for p in lg.dir.glob("*.snapshot")} == snapshots
    assert not list(lg.dir.glob("*.tmp"))


@pytest.mark.parametrize("fail", ["fsync", "replace"])
def test_a_failed_offset_checkpoint_keeps_the_old_file_and_takes_the_dir_offline(
    tmp_path: Path, monkeypatch, fail
):
    dirs = [tmp_path / "d1", tmp_path / "d2"]
    manager = LogManager(dirs, LogConfig(), Clock())
    for p in range(4):
        manager.get_or_create_log("t", p).append_as_leader(batch(2, f"p{p}"), leader_epoch=0)
    for lg in manager.all_logs().values():
        lg.update_high_watermark(2)
    manager.checkpoint_high_watermarks()
    before = {d: (d / "replication-offset-checkpoint").read_bytes() for d in dirs}
    for lg in manager.all_logs().values():
        lg.update_high_watermark(1)
    if fail == "fsync":
        monkeypatch.setattr(
            os,
            "fsync",
            failing(REAL_FSYNC, lambda fd: "/d1/" in fd_path(fd) and fd_path(fd).endswith(".tmp")),
        )
    else:
        monkeypatch.setattr(os, "replace", failing(REAL_REPLACE, lambda src, dst: "/d1/" in str(src)))
    manager.checkpoint_high_watermarks()
    assert (dirs[0] / "replication-offset-checkpoint").read_bytes() == before[dirs[0]]
    assert (dirs[1] / "replication-offset-checkpoint").read_bytes() != before[dirs[1]], "d2 is healthy"
    assert not list(dirs[0].glob("*.tmp"))
    assert manager.failure_channel.offline_dirs == {dirs[0]}
    in_d1 = [lg for lg in manager.all_logs().values() if lg.log_dir == dirs[0]]
    assert in_d1 and all(lg.is_offline for lg in in_d1)
    with pytest.raises(KafkaStorageError):
        in_d1[0].append_as_leader(batch(1, "x"), leader_epoch=0)


def test_jbod_places_new_logs_in_the_online_dir_with_the_fewest_partitions(tmp_path: Path):
    dirs = [tmp_path / "d1", tmp_path / "d2", tmp_path / "d3"]
    manager = LogManager(dirs, LogConfig(), Clock())
    placed = [manager.get_or_create_log("t", p).log_dir for p in range(6)]
    assert sorted(placed) == sorted(dirs * 2)
    manager.failure_channel.maybe_add_offline_log_dir(dirs[1], "test")
    assert manager.handle_log_dir_failure(dirs[1]) == [("t", p) for p in range(6) if placed[p] == dirs[1]]
    more = [manager.get_or_create_log("u", p).log_dir for p in range(4)]
    assert dirs[1] not in more and sorted(more) == sorted([dirs[0], dirs[2]] * 2)
    manager.shutdown()
    assert (dirs[0] / ".kafka_cleanshutdown").exists()
    assert not (dirs[1] / ".kafka_cleanshutdown").exists(), (
        "an offline dir must be recovered at the next start"
    )


def test_every_dir_offline_means_no_new_log(tmp_path: Path):
    manager = LogManager([tmp_path / "only"], LogConfig(), Clock())
    manager.failure_channel.maybe_add_offline_log_dir(tmp_path / "only", "test")
    with pytest.raises(KafkaStorageError):
        manager.get_or_create_log("t", 0)


def test_an_unreadable_dir_at_start_up_goes_offline_and_the_others_load(tmp_path: Path, monkeypatch):
    dirs = [tmp_path / "d1", tmp_path / "d2"]
    manager = LogManager(dirs, LogConfig(), Clock())
    for p in range(2):
        manager.get_or_create_log("t", p).append_as_leader(batch(2, "a"), leader_epoch=0)
    manager.shutdown()
    real_open = os.open
    monkeypatch.setattr(
        os, "open", lambda path, *a, **k: failing(real_open, lambda p, *_: "/d1/" in str(p))(path, *a, **k)
    )
    restarted = LogManager(dirs, LogConfig(), Clock())
    restarted.load_logs()
    assert restarted.failure_channel.offline_dirs == {dirs[0]}
    assert [lg.log_dir for lg in restarted.all_logs().values()] == [dirs[1]]
