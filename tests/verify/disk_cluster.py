"""Replicas on disk written by the real broker log code, for the verification tests (SPEC 8).

``DiskCluster(root)`` lays out ``root/broker-<id>/data/<topic>-<p>/`` like the local runner and
writes batches built by :func:`client.protocol.records.build_batch` through
:class:`broker.log.log.Log`: the leader appends with ``append_as_leader`` (offsets assigned,
epoch stamped, producer sequences checked, epoch cache updated) and the followers copy the
leader's bytes with ``append_as_follower``, as replica fetchers do. ``append_unchecked`` plays
a buggy leader: it stamps offsets and epoch itself and appends as a follower everywhere, so
batches a correct leader would refuse (sequences out of order) reach the log. Every acknowledged
record can go to a :class:`ledger.format.LedgerWriter`. ``checkpoint`` writes each log dir's
``replication-offset-checkpoint`` with the broker's own checkpoint code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from broker.log.checkpoint import OffsetCheckpointFile
from broker.log.log import Log, LogConfig
from client.protocol.records import build_batch, iter_batches, set_base_offset, set_partition_leader_epoch
from ledger.format import LedgerWriter

T0_MS = 1_700_000_000_000


@dataclass
class Written:
    topic: str
    partition: int
    offset: int
    value: bytes
    producer_id: int
    sequence: int


@dataclass
class DiskCluster:
    root: Path
    brokers: tuple[int, ...] = (1, 2, 3)
    config: LogConfig = field(default_factory=LogConfig)
    clock_ms: int = T0_MS
    logs: dict[tuple[int, str, int], Log] = field(default_factory=dict)
    sequences: dict[tuple[int, str, int], int] = field(default_factory=dict)
    written: list[Written] = field(default_factory=list)

    def log_dir(self, broker: int) -> Path:
        return self.root / f"broker-{broker}" / "data"

    @property
    def log_dirs(self) -> str:
        return ",".join(str(self.log_dir(b)) for b in self.brokers)

    def partition_dir(self, broker: int, topic: str, partition: int) -> Path:
        return self.log_dir(broker) / f"{topic}-{partition}"

    def log(self, broker: int, topic: str, partition: int) -> Log:
        key = (broker, topic, partition)
        if key not in self.logs:
            self.logs[key] = Log.open(self.partition_dir(broker, topic, partition), self.config, self._now)
        return self.logs[key]

    def _now(self) -> int:
        return self.clock_ms

    def produce(
        self,
        topic: str,
        partition: int,
        values: list[bytes],
        *,
        epoch: int = 0,
        leader: int = 1,
        producer_id: int = 1000,
        producer_epoch: int = 0,
        ledger: LedgerWriter | None = None,
        keys: list[bytes | None] | None = None,
    ) -> list[int]:
        """One batch through the leader, copied to the other brokers; returns its offsets."""
        base_sequence = -1
        if producer_id >= 0:
            base_sequence = self.sequences.get((producer_id, topic, partition), 0)
            self.sequences[(producer_id, topic, partition)] = base_sequence + len(values)
        batch = self._build(values, keys, producer_id, producer_epoch, base_sequence)
        info = self.log(leader, topic, partition).append_as_leader(batch, epoch)
        data = self.log(leader, topic, partition).read(info.first_offset, 1 << 30).records
        for broker in self.brokers:
            if broker != leader:
                self.log(broker, topic, partition).append_as_follower(data)
        return self._record(
            topic, partition, info.first_offset, values, keys, producer_id, base_sequence, ledger
        )

    def append_unchecked(
        self,
        topic: str,
        partition: int,
        values: list[bytes],
        *,
        epoch: int,
        producer_id: int,
        base_sequence: int,
        producer_epoch: int = 0,
        ledger: LedgerWriter | None = None,
    ) -> list[int]:
        """A batch no correct leader would take (say, a sequence gap), written to every replica."""
        offset = self.log(self.brokers[0], topic, partition).log_end_offset
        batch = bytearray(self._build(values, None, producer_id, producer_epoch, base_sequence))
        set_base_offset(batch, 0, offset)
        set_partition_leader_epoch(batch, 0, epoch)
        for broker in self.brokers:
            self.log(broker, topic, partition).append_as_follower(bytes(batch))
        return self._record(topic, partition, offset, values, None, producer_id, base_sequence, ledger)

    def _build(
        self,
        values: list[bytes],
        keys: list[bytes | None] | None,
        producer_id: int,
        producer_epoch: int,
        base_sequence: int,
    ) -> bytes:
        self.clock_ms += 10
        keys = keys or [None] * len(values)
        return build_batch(
            [(k, v, self.clock_ms, []) for k, v in zip(keys, values, strict=True)],
            producer_id=producer_id,
            producer_epoch=producer_epoch if producer_id >= 0 else -1,
            base_sequence=base_sequence,
        )

    def _record(
        self,
        topic: str,
        partition: int,
        first: int,
        values: list[bytes],
        keys: list[bytes | None] | None,
        producer_id: int,
        base_sequence: int,
        ledger: LedgerWriter | None,
    ) -> list[int]:
        offsets = list(range(first, first + len(values)))
        for i, (offset, value) in enumerate(zip(offsets, values, strict=True)):
            sequence = -1 if base_sequence < 0 else base_sequence + i
            self.written.append(Written(topic, partition, offset, value, producer_id, sequence))
            if ledger is not None:
                ledger.ack(
                    topic,
                    partition,
                    offset,
                    value,
                    key=(keys or [None] * len(values))[i],
                    producer_id=producer_id,
                    sequence=sequence,
                    time_ms=self.clock_ms + 3,
                    latency_ms=3.0 + i,
                )
        return offsets

    def leo(self, broker: int, topic: str, partition: int) -> int:
        return self.log(broker, topic, partition).log_end_offset

    def checkpoint(self, overrides: dict[tuple[int, str, int], int] | None = None) -> None:
        """Every replica caught up: HW = the leader's LEO (or an override per broker/partition)."""
        overrides = overrides or {}
        per_broker: dict[int, dict[tuple[str, int], int]] = {b: {} for b in self.brokers}
        for (broker, topic, partition), log in self.logs.items():
            hw = overrides.get((broker, topic, partition), self.leo(self.brokers[0], topic, partition))
            per_broker[broker][(topic, partition)] = hw
            log.update_high_watermark(min(hw, log.log_end_offset))
        for broker, offsets in per_broker.items():
            OffsetCheckpointFile(self.log_dir(broker) / "replication-offset-checkpoint").write(offsets)

    def close(self) -> None:
        for log in self.logs.values():
            log.flush()
            log.close()
        self.logs.clear()

    def batch_positions(self, broker: int, topic: str, partition: int) -> list[tuple[Path, int, int, int]]:
        """``(segment path, byte position, size, base offset)`` of every batch of a replica."""
        out = []
        for segment in sorted(self.partition_dir(broker, topic, partition).glob("*.log")):
            for pos, header in iter_batches(segment.read_bytes()):
                out.append((segment, pos, header.size, header.base_offset))
        return out
