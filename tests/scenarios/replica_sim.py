"""In-process replicas for replaying the figures of seeds 001 and 002 step by step (SPEC 5.4;
ARCHITECTURE "Testing": scenarios).

A replica is what a broker holds for one partition: a real ``Log`` (opened through a real
``LogManager`` in the replica's own log dir, so a restart reads ``replication-offset-checkpoint``
as Kafka does) and a real ``Partition`` rules object. Only the network, ZooKeeper and the
controller are replaced: the test says who leads which epoch, and requests are direct calls.
Time is a fake clock that moves 1 ms per step.

Each step mirrors one broker code path:

==========================  ==========================================================================
``leader_append``           ReplicaManager._append_to_leader: ``append_as_leader``, then try the HW.
``leader_handle_fetch``     ReplicaManager.read for a follower: remote LEO := fetch offset, HW
                            candidate, read from the fetch offset up to the LEO.
``follower_apply``          ReplicaManager.append_as_follower: append, HW := min(LEO, leader HW).
``follower_fetch``          one FETCH round: the two above (seed 001's figures 4 and 5).
``become_leader``           ReplicaManager._make_leader: ``Partition.make_leader``, cache (epoch, LEO).
``truncate``                ReplicaFetcher._truncate: ``high-watermark`` or ``leader-epoch`` (the
                            KIP-101/KIP-279 loop around ``truncation_by_leader_epoch``).
``crash`` / ``restart``     the broker process dies (optionally with the machine: unflushed bytes are
                            lost); a restart reopens the log from disk with the checkpointed HW.
==========================  ==========================================================================

The HW checkpoint is written after every step that moves an HW (Kafka writes it every
``replica.high.watermark.checkpoint.interval.ms``): the checkpoint is never stale, the most
favourable case for the ``high-watermark`` policy, so the losses the tests show are the policy's.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from broker.log import Log, LogConfig, LogManager
from broker.replica.partition import Partition, PartitionState, follower_high_watermark
from broker.replica.truncation import (
    TruncationPolicy,
    truncation_by_high_watermark,
    truncation_by_leader_epoch,
)
from client.protocol.errors import ErrorCode, KafkaError
from client.protocol.records import build_batch, decode_records, iter_batches

TOPIC = "seed"
PARTITION = 0
START_MS = 1_000_000
LAG_MS = 10_000  # replica.lag.time.max.ms as in seed 001 ("默认是10s")
FETCH_MAX_BYTES = 1 << 20
MAX_TRUNCATION_ROUNDS = 10  # the real fetcher loops until done; here a livelock fails the test


class FakeClock:
    def __init__(self, now_ms: int = START_MS) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms

    def tick(self, ms: int = 1) -> int:
        self.now_ms += ms
        return self.now_ms


@dataclass
class Replica:
    name: str
    broker_id: int
    log_dir: Path
    log_manager: LogManager
    partition: Partition
    alive: bool = True

    @property
    def log(self) -> Log:
        log = self.log_manager.get_log(TOPIC, PARTITION)
        assert log is not None
        return log

    @property
    def leo(self) -> int:
        return self.log.log_end_offset

    @property
    def hw(self) -> int:
        return self.log.high_watermark

    @property
    def epochs(self) -> list[tuple[int, int]]:
        """The leader epoch cache as (epoch, start offset) pairs."""
        return [(e.epoch, e.start_offset) for e in self.log.leader_epoch_cache.entries]

    def batches(self) -> list[tuple[int, bytes]]:
        """(base offset, raw bytes) of every batch in the log, as stored (epoch stamp and CRC included)."""
        out: list[tuple[int, bytes]] = []
        offset = self.log.log_start_offset
        while offset < self.leo:
            data = self.log.read(offset, FETCH_MAX_BYTES).records
            for pos, header in iter_batches(data):
                out.append((header.base_offset, data[pos : pos + header.size]))
                offset = header.next_offset
        return out

    def batches_below_hw(self) -> list[tuple[int, bytes]]:
        return [(base, raw) for base, raw in self.batches() if base < self.hw]

    def values(self) -> list[bytes | None]:
        """The record values from the log start offset to the LEO, in offset order."""
        return [record.value for _, raw in self.batches() for _, record in decode_records(raw)]

    def records(self) -> dict[int, tuple[bytes | None, int]]:
        """offset -> (value, leader epoch of its batch)."""
        return {
            record.offset: (record.value, header.partition_leader_epoch)
            for _, raw in self.batches()
            for header, record in decode_records(raw)
        }

    def segment_bytes(self) -> bytes:
        """The ``.log`` segment files concatenated, straight from disk."""
        return b"".join(path.read_bytes() for path in sorted(self.log.dir.glob("*.log")))

    def __repr__(self) -> str:
        state = "up" if self.alive else "down"
        return f"{self.name}(LEO {self.leo}, HW {self.hw}, epochs {self.epochs}, {state})"


@dataclass(frozen=True)
class FetchResponse:
    error: ErrorCode
    records: bytes
    high_watermark: int


@dataclass(frozen=True)
class Exchange:
    """One OffsetsForLeaderEpoch round (seed 002): what the follower asked, what the leader
    answered, and where the follower truncated."""

    asked_epoch: int
    leader_epoch: int
    leader_end_offset: int
    truncated_to: int
    completed: bool


@dataclass
class Cluster:
    """The replicas of one partition, one truncation policy (``replica.truncation.policy``)."""

    root: Path
    policy: TruncationPolicy
    clock: FakeClock = field(default_factory=FakeClock)
    replicas: dict[str, Replica] = field(default_factory=dict)
    leader_epoch: int = -1  # the controller's latest epoch
    out_of_range_resets: int = 0  # follower fetches answered OFFSET_OUT_OF_RANGE

    @classmethod
    def of(cls, root: Path, names: Iterable[str], policy: TruncationPolicy) -> Cluster:
        cluster = cls(root, policy)
        for broker_id, name in enumerate(names, start=1):
            log_dir = root / f"broker-{name}"
            log_manager = LogManager([log_dir], LogConfig(), cluster.clock)
            log_manager.get_or_create_log(TOPIC, PARTITION)
            cluster.replicas[name] = Replica(
                name, broker_id, log_dir, log_manager, cluster._new_partition(broker_id)
            )
        return cluster

    def __getitem__(self, name: str) -> Replica:
        return self.replicas[name]

    def _new_partition(self, broker_id: int) -> Partition:
        return Partition(TOPIC, PARTITION, local_broker_id=broker_id)

    @property
    def assignment(self) -> tuple[int, ...]:
        return tuple(r.broker_id for r in self.replicas.values())

    def _checkpoint(self, *replicas: Replica) -> None:
        for replica in replicas:
            replica.log_manager.checkpoint_high_watermarks()

    # ------------------------------------------------------------------ controller decisions

    def become_leader(self, replica: Replica, epoch: int, isr: Iterable[Replica]) -> None:
        """LeaderAndIsr makes ``replica`` leader of ``epoch`` (seed 001: the HW is re-evaluated)."""
        assert replica.alive, f"{replica.name} is down"
        assert epoch > self.leader_epoch, "leader epochs only grow"
        self.leader_epoch = epoch
        now = self.clock.tick()
        state = PartitionState(
            1, replica.broker_id, epoch, tuple(r.broker_id for r in isr), epoch, self.assignment
        )
        replica.partition.make_leader(state, replica.leo, now)
        replica.log.leader_epoch_cache.assign(epoch, replica.leo)  # a new leader records (epoch, LEO)
        self._maybe_increment_high_watermark(replica)

    def become_follower(self, replica: Replica, leader: Replica) -> None:
        state = PartitionState(
            1,
            leader.broker_id,
            leader.partition.leader_epoch,
            tuple(sorted(leader.partition.isr)),
            leader.partition.leader_epoch,
            self.assignment,
        )
        replica.partition.make_follower(state)

    # ------------------------------------------------------------------ leader side

    def _maybe_increment_high_watermark(self, leader: Replica) -> None:
        candidate = leader.partition.high_watermark_candidate(leader.leo, leader.hw, self.clock(), LAG_MS)
        if candidate > leader.hw:
            leader.log.update_high_watermark(candidate)
            self._checkpoint(leader)

    def leader_append(self, leader: Replica, *values: bytes) -> int:
        """A producer writes one batch holding ``values``; returns its first offset."""
        assert leader.alive and leader.partition.is_leader, f"{leader.name} is not a live leader"
        now = self.clock.tick()
        batch = build_batch([(None, value, now, []) for value in values])
        info = leader.log.append_as_leader(batch, leader.partition.leader_epoch)
        self._maybe_increment_high_watermark(leader)
        return info.first_offset

    def leader_handle_fetch(self, leader: Replica, follower: Replica, fetch_offset: int) -> FetchResponse:
        """Seed 001's four leader steps: remote LEO := fetch offset, try the HW, read, answer with the HW."""
        assert leader.alive and leader.partition.is_leader, f"{leader.name} is not a live leader"
        now = self.clock.tick()
        leader.partition.update_follower_fetch(follower.broker_id, fetch_offset, leader.leo, now)
        self._maybe_increment_high_watermark(leader)
        try:
            data = leader.log.read(fetch_offset, FETCH_MAX_BYTES)
        except KafkaError as exc:
            return FetchResponse(ErrorCode(exc.code), b"", -1)
        return FetchResponse(ErrorCode.NONE, data.records, leader.hw)

    # ------------------------------------------------------------------ follower side

    def follower_apply(self, follower: Replica, leader: Replica, response: FetchResponse) -> None:
        """Seed 001's two follower steps: append (LEO moves), then HW := min(LEO, leader HW)."""
        assert follower.alive, f"{follower.name} is down"
        if response.error == ErrorCode.OFFSET_OUT_OF_RANGE:
            self._handle_out_of_range(follower, leader)
            return
        assert response.error == ErrorCode.NONE, response.error
        if response.records:
            follower.log.append_as_follower(response.records)
        follower.log.update_high_watermark(follower_high_watermark(follower.leo, response.high_watermark))
        self._checkpoint(follower)

    def follower_fetch(self, follower: Replica, leader: Replica) -> FetchResponse:
        """One FETCH round trip, fetch offset = the follower's LEO."""
        response = self.leader_handle_fetch(leader, follower, follower.leo)
        self.follower_apply(follower, leader, response)
        return response

    def catch_up(self, follower: Replica, leader: Replica, max_rounds: int = 10) -> int:
        """Fetch until everything the leader has is committed on both sides (follower LEO, follower
        HW and leader HW all equal the leader's LEO); returns the FETCH rounds used."""
        for rounds in range(1, max_rounds + 1):
            self.follower_fetch(follower, leader)
            if follower.leo == follower.hw == leader.hw == leader.leo:
                return rounds
        raise AssertionError(f"{follower} did not catch up with {leader} in {max_rounds} rounds")

    def _handle_out_of_range(self, follower: Replica, leader: Replica) -> None:
        """The follower asked beyond the leader's LEO. Under ``leader-epoch`` it truncates again by
        epochs (as ReplicaFetcher does); under ``high-watermark`` it resets to the leader's end
        offset, as pre-0.11 Kafka's ReplicaFetcherThread.handleOffsetOutOfRange did."""
        self.out_of_range_resets += 1
        if self.policy is TruncationPolicy.LEADER_EPOCH:
            self.truncate(follower, leader)
        else:
            follower.log.truncate_to(leader.leo)
            self._checkpoint(follower)

    # ------------------------------------------------------------------ truncation (seeds 001, 002)

    def offsets_for_leader_epoch(self, leader: Replica, requested_epoch: int) -> tuple[int, int]:
        """The leader's OffsetsForLeaderEpoch answer: (epoch, end offset)."""
        return leader.log.leader_epoch_cache.end_offset_for(requested_epoch, leader.leo)

    def truncate(self, follower: Replica, leader: Replica) -> list[Exchange]:
        """Before its first fetch from a new leader, the follower truncates by the cluster's policy.
        Returns the OffsetsForLeaderEpoch exchanges (none under ``high-watermark``)."""
        assert follower.alive and leader.alive
        log = follower.log
        if self.policy is TruncationPolicy.HIGH_WATERMARK:
            log.truncate_to(truncation_by_high_watermark(log.high_watermark, log.log_end_offset).offset)
            self._checkpoint(follower)
            return []
        exchanges: list[Exchange] = []
        for _ in range(MAX_TRUNCATION_ROUNDS):
            asked = log.leader_epoch_cache.latest_epoch
            if asked < 0:  # an empty cache: nothing we could have diverged on beyond the HW
                log.truncate_to(min(log.high_watermark, log.log_end_offset))
                self._checkpoint(follower)
                return exchanges
            leader_epoch, leader_end_offset = self.offsets_for_leader_epoch(leader, asked)
            ours = log.leader_epoch_cache.end_offset_for(leader_epoch, log.log_end_offset)
            decision = truncation_by_leader_epoch(
                leader_epoch,
                leader_end_offset,
                None if ours[0] < 0 else ours,
                log.log_end_offset,
                log.high_watermark,
            )
            log.truncate_to(decision.offset)
            self._checkpoint(follower)
            exchanges.append(
                Exchange(asked, leader_epoch, leader_end_offset, log.log_end_offset, decision.completed)
            )
            if decision.completed:
                return exchanges
        raise AssertionError(f"{follower.name} kept asking {leader.name} without converging: {exchanges}")

    # ------------------------------------------------------------------ failures

    def flush(self, replica: Replica) -> None:
        """The log flusher ran: everything written so far is on disk."""
        replica.log.flush()
        replica.log_manager.checkpoint_recovery_points()

    def crash(self, replica: Replica, lose_page_cache: bool = False) -> None:
        """The broker dies and its in-memory state is gone. With ``lose_page_cache`` the machine
        dies too: segment bytes that were never flushed (at or above the recovery point) are lost,
        as seed 002's second precondition for divergence says."""
        assert replica.alive, f"{replica.name} is already down"
        recovery_point = replica.log.recovery_point
        replica.log.close()
        replica.alive = False
        replica.partition = self._new_partition(replica.broker_id)
        if lose_page_cache:
            for path in replica.log.dir.glob("*.log"):
                _keep_flushed_prefix(path, recovery_point)

    def restart(self, replica: Replica) -> None:
        """Reopen the log dir as a restarting broker does (LogManager.load_logs: recovery, then
        the HW from ``replication-offset-checkpoint``)."""
        assert not replica.alive, f"{replica.name} is running"
        replica.log_manager = LogManager([replica.log_dir], LogConfig(), self.clock)
        replica.log_manager.load_logs()
        replica.alive = True

    def follow(self, replica: Replica, leader: Replica) -> list[Exchange]:
        """LeaderAndIsr makes ``replica`` a follower of ``leader``; it truncates before fetching."""
        self.become_follower(replica, leader)
        return self.truncate(replica, leader)

    def restart_and_truncate(self, replica: Replica, leader: Replica | None) -> list[Exchange]:
        """Restart; when there is a leader, become its follower and truncate before fetching."""
        self.restart(replica)
        return [] if leader is None else self.follow(replica, leader)


def _keep_flushed_prefix(path: Path, recovery_point: int) -> None:
    data = path.read_bytes()
    keep = 0
    for pos, header in iter_batches(data):
        if header.next_offset > recovery_point:
            break
        keep = pos + header.size
    with path.open("r+b") as f:
        f.truncate(keep)


def assert_identical_below_hw(*replicas: Replica) -> None:
    """Every replica holds the same batches, byte for byte, below the HW (they agree on the HW)."""
    first = replicas[0]
    for other in replicas[1:]:
        assert other.hw == first.hw, (first, other)
        assert other.batches_below_hw() == first.batches_below_hw(), (first, other)
