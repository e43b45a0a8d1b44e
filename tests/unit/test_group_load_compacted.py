"""Loading a compacted ``__consumer_offsets`` partition (broker/coordinator/group_metadata_manager.py,
Kafka's GroupMetadataManager.doLoadGroupsAndOffsets; docs/design.md "Consumer groups").

The logs here are real broker.log Logs named ``__consumer_offsets-0``, compacted by the real
cleaner (tests/unit/cleaner_harness.py) or cut by the real retention, so the batches the loader
meets are the ones a broker writes:

* the cleaner keeps the last batch of every cleaned segment even when all its records were
  superseded: an empty batch, header and no records. A read of such a segment returns that batch
  alone; the load must move to the batch's next offset (Kafka: ``currOffset = batch.nextOffset``,
  once per batch), not inside the loop over its records, where it never moves;
* with ``cleanup.policy=compact,delete`` retention moves the log start offset above 0, and
  ``Log.read(0)`` is OFFSET_OUT_OF_RANGE: the load starts at the log start (Kafka:
  ``currOffset = log.logStartOffset``);
* a load that fails is retried with a bounded backoff while it is still the partition's latest
  load; meanwhile the partition's groups answer COORDINATOR_LOAD_IN_PROGRESS, never as an empty
  coordinator would.

Every load reads through :class:`BoundedReader`, which ends the log after a fixed number of reads,
so a loader that spins fails its assertion instead of hanging the run.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

from broker.coordinator.coordinator_config import GroupConfig
from broker.coordinator.group_metadata import CommittedOffset
from broker.coordinator.group_metadata_manager import GROUP_METADATA_TOPIC, LOAD_CHUNK_BYTES
from broker.coordinator.group_records import offset_key, offset_value
from broker.log import Log
from client.protocol.errors import ErrorCode, KafkaError
from client.protocol.records import iter_batches
from client.types import TopicPartition
from tests.unit.cleaner_harness import Clock, append, cleaner_for, compact_config, headers, open_log
from tests.unit.group_harness import GroupEnv

E = ErrorCode
T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)
MAX_READS = 50


class BoundedReader:
    """``read_log`` over a real Log: records each read's offset and answers b"" (the end of the
    log) once ``MAX_READS`` reads were made."""

    def __init__(self, lg: Log) -> None:
        self.lg = lg
        self.reads: list[int] = []

    def __call__(self, tp: TopicPartition, offset: int, max_bytes: int) -> bytes:
        assert tp == TopicPartition(GROUP_METADATA_TOPIC, 0)
        self.reads.append(offset)
        if len(self.reads) > MAX_READS:
            return b""
        return bytes(self.lg.read(offset, max_bytes).records)

    def log_start_offset(self, tp: TopicPartition) -> int:
        return self.lg.log_start_offset


def offsets_log(tmp_path: Path, clock: Clock, **config: object) -> Log:
    return open_log(tmp_path / f"{GROUP_METADATA_TOPIC}-0", clock, compact_config(**config))


def commit(lg: Log, clock: Clock, tp: TopicPartition, offset: int, group_id: str = "g") -> None:
    """One OffsetCommit as the coordinator writes it: one batch of one offset record."""
    append(lg, clock, [(offset_key(group_id, tp), offset_value(CommittedOffset(offset, -1, "", clock.now)))])


def env_over(reader: BoundedReader, **fields: object) -> GroupEnv:
    return GroupEnv(
        config=GroupConfig(initial_rebalance_delay_ms=3000, offsets_topic_num_partitions=1),
        own_all=False,
        read_log=reader,
        log_start_offset=reader.log_start_offset,
        **fields,
    )


async def test_a_load_moves_past_the_empty_batch_the_cleaner_keeps(tmp_path: Path) -> None:
    """Interleaving: 30 commits of one offset fill several segments; the real cleaner compacts all
    but the (empty) active segment, and each cleaned segment but the last keeps only its last batch,
    emptied. The new coordinator's first read (one segment per read) returns that empty batch alone."""
    clock = Clock()
    lg = offsets_log(tmp_path, clock)
    for offset in range(30):
        commit(lg, clock, T0, offset)
    lg.roll()
    assert await cleaner_for(lg, clock).clean_filthiest_log()
    first_read = [h for _, h in iter_batches(lg.read(0, LOAD_CHUNK_BYTES).records)]
    assert [h.record_count for h in first_read] == [0], (
        "the cleaner kept the first segment's last batch empty"
    )
    assert sum(h.record_count == 0 for h in headers(lg)) == len(lg.segments) - 2

    reader = BoundedReader(lg)
    env = env_over(reader)
    await env.manager.load(0, 1, env.coordinator.on_groups_loaded)

    # one read per segment, each from where the previous one's last batch ended, then the end
    expected = [s.base_offset for s in lg.segments]
    assert expected[-1] == lg.log_end_offset  # the empty active segment: the read that ends the load
    assert reader.reads == expected, f"the load read at {reader.reads[:8]}... ({len(reader.reads)} reads)"
    assert env.fetch() == (E.NONE, {T0: 29})
    assert not env.manager.loading


async def test_a_load_starts_at_the_log_start_offset(tmp_path: Path) -> None:
    """Interleaving: ``cleanup.policy=compact,delete``; the old segments outlive retention.ms and
    retention deletes them, so the log starts above 0 when the new coordinator loads it."""
    clock = Clock()
    lg = offsets_log(tmp_path, clock, cleanup_policy=("compact", "delete"), retention_ms=60_000)
    for offset in range(10):
        commit(lg, clock, T0, offset)
    lg.roll()
    clock.now += 60_001
    commit(lg, clock, T1, 7)
    commit(lg, clock, T0, 10)
    assert lg.delete_old_segments() > 0
    assert lg.log_start_offset == 10

    reader = BoundedReader(lg)
    env = env_over(reader)
    await env.manager.load(0, 1, env.coordinator.on_groups_loaded)

    assert env.fetch() == (E.NONE, {T0: 10, T1: 7})
    assert reader.reads == [10, 12]


def failing_env(
    fail_reads: int, during_wait: Callable[[GroupEnv], Awaitable[None]] | None = None
) -> tuple[GroupEnv, list[tuple[float, int, dict]]]:
    """A fake log whose first ``fail_reads`` reads fail with KAFKA_STORAGE_ERROR; the load's
    backoff is stepped by the test: each wait records what the group answered meanwhile, then
    runs ``during_wait``."""
    waits: list[tuple[float, int, dict]] = []

    async def sleep(seconds: float) -> None:
        waits.append((seconds, env.fetch()[0], env.commit({T0: 99}).value))
        if len(waits) == fail_reads:
            env.log.fail = None
        if during_wait is not None:
            await during_wait(env)

    env = GroupEnv(
        config=GroupConfig(initial_rebalance_delay_ms=3000, offsets_topic_num_partitions=1),
        own_all=False,
        load_sleep=sleep,
    )
    env.log.append(TopicPartition(GROUP_METADATA_TOPIC, 0), [(offset_key("g", T0), committed(1))])
    env.log.fail = KafkaError(E.KAFKA_STORAGE_ERROR, "the log dir is failing")
    return env, waits


def committed(offset: int) -> bytes:
    return offset_value(CommittedOffset(offset, -1, "", 0))


async def test_a_failed_load_retries_with_a_bounded_backoff_and_never_serves_an_empty_group() -> None:
    """Interleaving: the first six reads of the load fail; between them the group is asked for
    its offsets and sent a commit; the seventh read succeeds."""
    env, waits = failing_env(6)
    loaded: list = []
    await env.manager.load(0, 1, loaded.append)

    assert [seconds for seconds, _, _ in waits] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert all(code == E.COORDINATOR_LOAD_IN_PROGRESS for _, code, _ in waits)
    assert all(answer == {T0: E.COORDINATOR_LOAD_IN_PROGRESS} for _, _, answer in waits)
    assert len(env.log.reads) == 8 and len(loaded) == 1  # six failed, then the log and its end
    assert env.fetch() == (E.NONE, {T0: 1})
    assert not env.manager.loading and env.manager.owned == {0: 1}


async def test_a_resignation_during_the_backoff_ends_the_load() -> None:
    """Interleaving: the load's first read fails; during its backoff the partition resigns."""

    async def resign(env: GroupEnv) -> None:
        env.coordinator.on_groups_unloaded(env.manager.unload(0, 1))

    env, waits = failing_env(1, resign)
    loaded: list = []
    await env.manager.load(0, 1, loaded.append)

    assert env.manager.owned == {} and not env.manager.loading
    assert env.fetch()[0] == E.NOT_COORDINATOR
    assert len(waits) == 1 and len(env.log.reads) == 1 and loaded == []  # no read after the resignation


async def test_a_newer_election_during_the_backoff_supersedes_the_retrying_load() -> None:
    """Interleaving: the load of epoch 1 fails and backs off; meanwhile the partition is elected
    again at epoch 2 and that load succeeds; the epoch-1 load then stops without reading again."""
    loaded: dict[int, list] = {1: [], 2: []}

    async def reelect(env: GroupEnv) -> None:
        await env.manager.load(0, 2, loaded[2].append)

    env, _ = failing_env(1, reelect)
    await env.manager.load(0, 1, loaded[1].append)

    assert env.fetch() == (E.NONE, {T0: 1})
    assert loaded[1] == [] and len(loaded[2]) == 1
    assert [offset for _, offset in env.log.reads] == [0, 0, 1]  # the failed read, then epoch 2's
    assert env.manager.owned == {0: 2} and not env.manager.loading
