"""Producer id expiration (Kafka's ``producer.id.expiration.ms`` and
``producer.id.expiration.check.interval.ms``; ProducerStateManager.removeExpiredProducers):
with a fake clock, a producer whose last batch is older than the expiration is forgotten (in
memory, in the next snapshot, and when the state is rebuilt on open) and one within it is kept;
snapshots written before expiration existed still load; the config keys parse and refuse bad
values naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.config import BrokerConfig, ConfigError
from broker.log import Log, LogConfig, LogManager
from broker.log.log_dir_failure import LogDirFailureChannel
from broker.log.producer_state import BatchMetadata, ProducerStateManager
from client.protocol.records import build_batch, parse_header, set_base_offset

EXPIRATION_MS = 60_000
OLD, NEW = 4000, 4001  # producer ids: one that falls silent, one that keeps writing


class Clock:
    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def idem(seq: int, timestamp: int, pid: int, n: int = 2, epoch: int = 0) -> bytes:
    """One idempotent batch of ``n`` records whose max timestamp is ``timestamp``."""
    records = [(None, f"{pid}-{seq + i}".encode(), timestamp - n + 1 + i, []) for i in range(n)]
    return build_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def fold(state: ProducerStateManager, seq: int, timestamp: int, pid: int) -> None:
    buf = bytearray(idem(seq, timestamp, pid))
    set_base_offset(buf, 0, state.map_end_offset)
    state.update(parse_header(buf))


def open_log(path: Path, clock: Clock, **config: int) -> Log:
    return Log.open(path, LogConfig(producer_id_expiration_ms=EXPIRATION_MS, **config), clock)


def snapshot_producers(log: Log) -> set[int]:
    """The producer ids held by the newest ``<offset>.snapshot`` file of ``log``."""
    newest = max(log.dir.glob("*.snapshot"), key=lambda p: int(p.stem))
    return set(ProducerStateManager.from_bytes(newest.read_bytes()).producers)


@pytest.fixture
def clock() -> Clock:
    return Clock()


# -- the sans-IO rule ---------------------------------------------------------------------------


def test_last_timestamp_is_the_max_timestamp_of_the_last_batch():
    state = ProducerStateManager()
    fold(state, 0, 5_000, OLD)
    fold(state, 2, 3_000, OLD)  # a later batch with an earlier CreateTime still sets it
    assert state.last_entry(OLD).last_timestamp == 3_000


def test_expired_producer_dropped_and_recent_one_kept():
    state = ProducerStateManager()
    fold(state, 0, 100_000, OLD)
    fold(state, 0, 150_000, NEW)
    now = 100_000 + EXPIRATION_MS  # exactly the expiration after OLD's last batch: expired (>=)
    assert state.remove_expired_producers(now, EXPIRATION_MS) == [OLD]
    assert set(state.producers) == {NEW}
    assert state.remove_expired_producers(now, EXPIRATION_MS) == []
    assert state.remove_expired_producers(150_000 + EXPIRATION_MS, EXPIRATION_MS) == [NEW]
    assert len(state) == 0 and state.map_end_offset == 4  # the map end offset is untouched


def test_a_producer_writing_again_renews_its_lease():
    state = ProducerStateManager()
    fold(state, 0, 100_000, OLD)
    fold(state, 2, 100_000 + EXPIRATION_MS - 1, OLD)
    assert state.remove_expired_producers(100_000 + EXPIRATION_MS, EXPIRATION_MS) == []
    assert state.last_entry(OLD).last_seq == 3


# -- through the Log ----------------------------------------------------------------------------


def test_log_expires_idle_producer_and_next_snapshot_drops_it(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock)
    log.append_as_leader(idem(0, clock.now, OLD), 0)
    clock.now += EXPIRATION_MS // 2
    log.append_as_leader(idem(0, clock.now, NEW), 0)
    log.take_producer_snapshot()
    assert snapshot_producers(log) == {OLD, NEW}

    clock.now += EXPIRATION_MS // 2 + 1
    assert log.remove_expired_producers(clock.now) == 1
    assert set(log.producer_state.producers) == {NEW}
    log.append_as_leader(idem(2, clock.now, NEW), 0)
    log.take_producer_snapshot()
    assert snapshot_producers(log) == {NEW}


def test_after_expiry_a_late_retry_is_not_recognised_the_documented_trade(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock)
    batch = idem(0, clock.now, OLD)
    assert not log.append_as_leader(batch, 0).duplicate
    assert log.append_as_leader(batch, 0).duplicate  # within the expiration: answered, not written
    clock.now += EXPIRATION_MS
    log.remove_expired_producers(clock.now)
    again = log.append_as_leader(batch, 0)  # unknown producer: any sequence is accepted (KIP-360)
    assert not again.duplicate and (again.first_offset, log.log_end_offset) == (2, 4)


def test_state_rebuilt_from_the_log_without_snapshots_expires_on_open(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock, segment_bytes=2 * len(idem(0, 0, OLD)))
    start = clock.now
    for seq in range(0, 6, 2):
        log.append_as_leader(idem(seq, start, OLD), 0)
    log.append_as_leader(idem(0, start + EXPIRATION_MS, NEW), 0)
    log.close()
    for path in log.dir.glob("*.snapshot"):
        path.unlink()

    clock.now = start + EXPIRATION_MS - 1  # neither is expired yet: both rebuilt from batch headers
    reopened = open_log(log.dir, clock, segment_bytes=log.config.segment_bytes)
    assert set(reopened.producer_state.producers) == {OLD, NEW}
    assert reopened.producer_state.last_entry(OLD).last_timestamp == start
    assert list(reopened.producer_state.last_entry(OLD).batches)[-1] == BatchMetadata(4, 5, 4, 5)
    reopened.close()
    for path in log.dir.glob("*.snapshot"):
        path.unlink()

    clock.now = start + EXPIRATION_MS  # a restart after the expiration: OLD is not resurrected
    reopened = open_log(log.dir, clock, segment_bytes=log.config.segment_bytes)
    assert set(reopened.producer_state.producers) == {NEW}
    assert reopened.producer_state.map_end_offset == reopened.log_end_offset == 8


def test_snapshot_loaded_on_open_is_filtered_like_kafkas_load_from_snapshot(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock)
    log.append_as_leader(idem(0, clock.now, OLD), 0)
    log.append_as_leader(idem(0, clock.now + 10, NEW), 0)
    log.take_producer_snapshot()
    log.close()
    clock.now += EXPIRATION_MS + 5
    reopened = open_log(log.dir, clock)
    assert set(reopened.producer_state.producers) == {NEW}


#: A version-1 snapshot as written before expiration existed (map end offset 12; producer 4000,
#: epoch 0, last timestamp 1000, batches 0..1 and 2..3; producer 4001, epoch 2, last timestamp
#: 50000000, batch 10..11). Frozen bytes: the format must keep loading.
V1_SNAPSHOT = bytes.fromhex(
    "f08c69db93010c9294cd0fa000cd03e8929400010001940203020394cd0fa102ce02faf08091940a0b0a0b"
)


def test_old_format_snapshot_still_loads_and_expires_by_its_stored_timestamps(tmp_path, clock):
    state = ProducerStateManager.from_bytes(V1_SNAPSHOT)
    assert state.map_end_offset == 12
    old, new = state.last_entry(4000), state.last_entry(4001)
    assert (old.producer_epoch, old.last_timestamp, list(old.batches)) == (
        0,
        1_000,
        [BatchMetadata(0, 1, 0, 1), BatchMetadata(2, 3, 2, 3)],
    )
    assert (new.producer_epoch, new.last_timestamp, new.last_seq) == (2, 50_000_000, 11)
    assert state.to_bytes() == V1_SNAPSHOT  # the format did not change
    assert state.remove_expired_producers(50_000_000, EXPIRATION_MS) == [4000]

    # and through a Log: the file is picked up on open and the expiration applied to it
    log = open_log(tmp_path / "t-0", clock)
    for _ in range(6):  # offsets 0..11, no producer id
        log.append_as_leader(build_batch([(None, b"x", 0, []), (None, b"y", 0, [])]), 0)
    log.close()
    (log.dir / f"{12:020d}.snapshot").write_bytes(V1_SNAPSHOT)
    clock.now = 50_000_000
    reopened = open_log(log.dir, clock)
    assert set(reopened.producer_state.producers) == {4001}
    assert reopened.append_as_leader(idem(10, clock.now, 4001, epoch=2), 0).duplicate


# -- the log manager's periodic check -----------------------------------------------------------


def test_log_manager_expires_across_online_logs_and_skips_offline_ones(tmp_path, clock):
    channel = LogDirFailureChannel()
    manager = LogManager(
        [tmp_path / "a", tmp_path / "b"],
        LogConfig(producer_id_expiration_ms=EXPIRATION_MS),
        clock,
        channel,
    )
    logs = [manager.get_or_create_log("t", p) for p in range(3)]
    for lg in logs:
        lg.append_as_leader(idem(0, clock.now, OLD), 0)
    offline = logs[1]
    assert offline.dir.parent != logs[0].dir.parent  # placement spreads them over both dirs
    clock.now += EXPIRATION_MS - 1
    assert manager.remove_expired_producers() == 0
    channel.maybe_add_offline_log_dir(offline.dir.parent, "test", OSError("disk gone"))
    clock.now += 1
    online = [lg for lg in logs if not lg.is_offline]
    assert manager.remove_expired_producers() == len(online) == 2
    assert all(len(lg.producer_state) == 0 for lg in online)
    assert set(offline.producer_state.producers) == {OLD}


# -- configuration ------------------------------------------------------------------------------

BASE = {"broker.id": "1", "zookeeper.connect": "127.0.0.1:2181"}


def test_config_keys_have_kafkas_names_and_defaults():
    cfg = BrokerConfig(BASE)
    assert cfg["producer.id.expiration.ms"] == 86_400_000
    assert cfg["producer.id.expiration.check.interval.ms"] == 600_000
    assert cfg.log_config().producer_id_expiration_ms == 86_400_000
    assert LogConfig().producer_id_expiration_ms == 86_400_000


def test_config_keys_parse_and_reach_every_log_config():
    cfg = BrokerConfig(
        {**BASE, "producer.id.expiration.ms": "3600000", "producer.id.expiration.check.interval.ms": "1000"}
    )
    assert cfg["producer.id.expiration.ms"] == 3_600_000
    assert cfg["producer.id.expiration.check.interval.ms"] == 1000
    # broker-wide: a topic override of other settings keeps it
    assert cfg.log_config({"segment.bytes": "2048"}).producer_id_expiration_ms == 3_600_000


@pytest.mark.parametrize("key", ["producer.id.expiration.ms", "producer.id.expiration.check.interval.ms"])
@pytest.mark.parametrize("value", ["0", "-1", "soon", str(2**31)])
def test_config_keys_reject_bad_values_naming_the_key(key, value):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        BrokerConfig({**BASE, key: value})


def test_log_config_rejects_a_non_positive_expiration():
    with pytest.raises(ValueError, match="producer_id_expiration_ms"):
        LogConfig(producer_id_expiration_ms=0)
