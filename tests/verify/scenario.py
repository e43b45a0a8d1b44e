"""A small, clean chaos run on disk that the tests then break in one way each (SPEC 8).

Topic ``t``, partitions 0 and 1, brokers 1-3. Broker 1 leads in epoch 0 (3 batches of 5 records
per partition), a fault moves leadership to broker 2 in epoch 1 (3 more batches), and at the end
broker 1 is elected again in epoch 2 but has not written yet: its leader-epoch-checkpoint ends
with (2, LEO), the one entry that legitimately has no batch. Producer 1000 writes everything with
increasing sequences, every write is in the ledger, and every replica checkpoints HW = LEO.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ledger.format import LedgerWriter
from tests.verify.disk_cluster import DiskCluster

TOPIC = "t"
PARTITIONS = (0, 1)
RECORDS_PER_BATCH = 5
BATCHES_PER_EPOCH = 3


def value(partition: int, batch: int, i: int) -> bytes:
    return f"value-{partition}-{batch}-{i}".encode()


@dataclass
class Scenario:
    root: Path
    disk: DiskCluster
    ledger: LedgerWriter
    epoch1_start: dict[int, int] = field(default_factory=dict)

    @property
    def report_dir(self) -> Path:
        return self.root / "report"

    @property
    def log_dirs(self) -> str:
        return self.disk.log_dirs

    @property
    def total(self) -> int:
        return len(self.disk.written)


def build(
    root: Path,
    plant: Callable[[Scenario], None] | None = None,
    hw_overrides: dict[tuple[int, str, int], int] | None = None,
    ledger_format: str = "parquet",
) -> Scenario:
    """Write the run; ``plant`` runs after the last batch and before the final checkpoints. The
    ledger is written in ``ledger_format`` (``parquet`` or ``jsonl``, :mod:`ledger.format`)."""
    disk = DiskCluster(root)
    ledger = LedgerWriter(root / "report", format=ledger_format, clock_ms=lambda: disk.clock_ms)
    s = Scenario(root, disk, ledger)
    for p in PARTITIONS:
        for b in range(BATCHES_PER_EPOCH):
            disk.produce(
                TOPIC, p, [value(p, b, i) for i in range(RECORDS_PER_BATCH)], epoch=0, leader=1, ledger=ledger
            )
    ledger.fault({"action": "SIGKILL", "broker": 1, "id": "f1"})
    ledger.error(TOPIC, 0, "NOT_LEADER_OR_FOLLOWER")
    for p in PARTITIONS:
        # What ReplicaManager does when broker 2 becomes leader: (new epoch, LEO).
        s.epoch1_start[p] = disk.leo(2, TOPIC, p)
        disk.log(2, TOPIC, p).leader_epoch_cache.assign(1, s.epoch1_start[p])
        ledger.leader_change({"topic": TOPIC, "partition": p, "leader": 2, "leader_epoch": 1})
    for p in PARTITIONS:
        for b in range(BATCHES_PER_EPOCH, 2 * BATCHES_PER_EPOCH):
            disk.produce(
                TOPIC, p, [value(p, b, i) for i in range(RECORDS_PER_BATCH)], epoch=1, leader=2, ledger=ledger
            )
    ledger.heal({"action": "restart", "broker": 1, "id": "f1"})
    if plant is not None:
        plant(s)
    for p in PARTITIONS:
        disk.log(1, TOPIC, p).leader_epoch_cache.assign(2, disk.leo(1, TOPIC, p))
        ledger.leader_change({"topic": TOPIC, "partition": p, "leader": 1, "leader_epoch": 2})
    ledger.close()
    disk.checkpoint(hw_overrides)
    disk.close()
    return s
