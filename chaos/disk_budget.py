"""How large each broker's faultable disk must be for a chaos run (docs/operations.md "Disk faults",
"In chaos runs"; issue 19 item 7).

A run with ``disk-full`` or ``disk-error`` puts every broker's log dir on a tmpfs
(devcluster/disk.py). A tmpfs of a fixed size fills for real on a long run (a 20-minute run at
2,500 records/s with replication factor 3 filled 64 MiB on every broker after about 900,000
records, and the brokers halted on an ENOSPC nobody injected), so the runner sizes the disk for
the run instead, and says which of two bases it used:

* ``run``: the records the workload can write at most (its rate is a ceiling: it never bursts to
  catch up) over the run and the heal, times the bytes one record takes on disk when every
  batch holds one record (the worst case: a RecordBatch v2 header, Kafka's
  ``DefaultRecordBatch.RECORD_BATCH_OVERHEAD`` of 61 bytes, per record), times the share of the
  replicas the fullest broker hosts, with headroom;
* ``retention``: when the brokers' ``log.retention.bytes`` bounds every log below that, each
  hosted replica's retained bytes plus one ``log.segment.bytes`` (the active segment, which
  retention never deletes; Kafka's ``LogManager.cleanupLogs`` works on whole segments). The
  verification counts every acknowledged record, so records retention deleted are reported
  as lost: this basis suits runs that do not verify.

Sans-IO: the caller measures the data already on the disks and the memory available (a tmpfs
lives in RAM) and passes them in; :func:`check_fits` says whether the plan fits.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

MIB = 1 << 20
RECORD_BATCH_OVERHEAD = 61  # the RecordBatch v2 header, once per batch
RECORD_OVERHEAD = 12  # a record's varints: length, attributes, deltas, key and value lengths, headers
WORKLOAD_KEY_BYTES = 8  # chaos/workload.py's keys: "key-255"
WORKLOAD_VALUE_BYTES = 48  # its values: "<seed>-<unix time>-<pid>/<writer>/<n>"
HEADROOM = 1.25
HEAL_ALLOWANCE_S = 60.0  # the workload writes on while the final heal runs
FIXED_BYTES = 16 * MIB  # checkpoints, producer snapshots, indexes: a page at least per small file
MIN_BYTES = 32 * MIB
MEMORY_SHARE = 0.5  # at most this share of the available memory goes to the disks (tmpfs is RAM)
DEFAULT_SEGMENT_BYTES = 1 << 30  # broker/config.py's log.segment.bytes default


@dataclass(frozen=True)
class DiskPlan:
    size_bytes: int  # whole MiB
    basis: str  # "run" or "retention"
    explanation: str

    @property
    def size(self) -> str:
        """The tmpfs size option (``devcluster.disk.check_size``): whole mebibytes, ``"465m"``."""
        return f"{self.size_bytes // MIB}m"

    def describe(self) -> str:
        return f"{self.size} per broker, sized for the {self.basis}: {self.explanation}"

    def as_dict(self) -> dict[str, object]:
        return {"size": self.size, "basis": self.basis, "explanation": self.explanation}


def bytes_per_record(key_bytes: int = WORKLOAD_KEY_BYTES, value_bytes: int = WORKLOAD_VALUE_BYTES) -> int:
    """On-disk bytes of one record in a batch of its own (the worst case for the workload)."""
    return RECORD_BATCH_OVERHEAD + RECORD_OVERHEAD + key_bytes + value_bytes


def replicas_per_broker(partitions: int, replication_factor: int, brokers: int) -> int:
    """The replicas the fullest broker hosts when placement spreads them evenly (round robin)."""
    return math.ceil(partitions * min(replication_factor, brokers) / brokers)


def _whole_mib(size: float) -> int:
    return max(MIN_BYTES, math.ceil(size / MIB) * MIB)


def plan_disk(
    *,
    records_per_second: float,
    duration_s: float,
    partitions: int,
    replication_factor: int,
    brokers: int,
    overrides: Mapping[str, str] | None = None,
    existing_bytes: int = 0,
) -> DiskPlan:
    """The disk each broker needs for this run; ``existing_bytes`` is the most data one broker's
    log dir already holds (a cluster restarted for the run copies it onto the new tmpfs)."""
    hosted = replicas_per_broker(partitions, replication_factor, brokers)
    records = math.ceil(records_per_second * (duration_s + HEAL_ALLOWANCE_S))
    share = hosted / partitions
    written = records * bytes_per_record() * share
    for_run = _whole_mib((written + existing_bytes) * HEADROOM + FIXED_BYTES)
    run = DiskPlan(
        for_run,
        "run",
        f"{records:,} records at most ({records_per_second:g}/s for {duration_s:g} s + "
        f"{HEAL_ALLOWANCE_S:g} s of heal) x {bytes_per_record()} bytes x {hosted}/{partitions} of the "
        f"partitions per broker"
        + (f" + {existing_bytes / MIB:.1f} MiB already there" if existing_bytes else "")
        + f", x {HEADROOM:g} + {FIXED_BYTES // MIB} MiB",
    )
    props = overrides or {}
    retention = int(props.get("log.retention.bytes", "-1"))
    if retention < 0:
        return run
    segment = int(props.get("log.segment.bytes", str(DEFAULT_SEGMENT_BYTES)))
    bounded = _whole_mib((hosted * (retention + segment) + existing_bytes) * HEADROOM + FIXED_BYTES)
    if bounded >= for_run:
        return run
    return DiskPlan(
        bounded,
        "retention",
        f"log.retention.bytes={retention} + log.segment.bytes={segment} for each of {hosted} "
        f"replicas per broker, x {HEADROOM:g} + {FIXED_BYTES // MIB} MiB (records retention deletes "
        "count as lost in the verification)",
    )


def check_fits(plan: DiskPlan, brokers: int, memory_available_bytes: int | None) -> str | None:
    """Why ``brokers`` disks of this plan cannot be given on this machine, or None when they can."""
    if memory_available_bytes is None:
        return None
    needed = plan.size_bytes * brokers
    allowed = int(memory_available_bytes * MEMORY_SHARE)
    if needed <= allowed:
        return None
    return (
        f"the faultable disks would need {needed / MIB:,.0f} MiB of RAM ({brokers} tmpfs of {plan.size}, "
        f"sized for the {plan.basis}: {plan.explanation}), more than {MEMORY_SHARE:.0%} of the "
        f"{memory_available_bytes / MIB:,.0f} MiB available: lower --rate or --duration, or bound "
        "the logs with --config log.retention.bytes=N --config log.segment.bytes=M"
    )
