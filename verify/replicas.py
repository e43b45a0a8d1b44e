"""The replicas in a set of log dirs and their checkpoint files, read in the driver.

A log dir (``<cluster>/broker-<id>/data`` for the local runner) holds one directory per replica,
``<topic>-<partition>``, with ``<20-digit base offset>.log`` segments and a
``leader-epoch-checkpoint``, and three offset checkpoints of its own (docs/operations.md "Local
cluster layout"). The files are small, so the job reads them here in plain Python and hands Spark
small DataFrames; only the segments go through a Spark data source (:mod:`verify.sources`).

Both checkpoint formats are Kafka's text files, parsed here from their documented layout
(``verify`` may not import ``broker``)::

    replication-offset-checkpoint,          leader-epoch-checkpoint
    log-start-offset-checkpoint

    0                                       0
    <count>                                 <count>
    <topic> <partition> <offset>            <epoch> <start offset>
    ...                                     ...

A file that does not follow the format raises :class:`CheckpointError` naming the file and line;
:func:`list_replicas` turns an unreadable ``replication-offset-checkpoint`` or
``log-start-offset-checkpoint`` into a skipped input (:mod:`verify.inputs`), since the offline
HW and the committed log's start rest on them.
The broker id of a log dir comes from a ``broker-<id>`` component of its path, else from a
``meta.properties`` ``broker.id`` line, else from its position in the list (1-based).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from verify.segments import segment_files

HIGH_WATERMARK_CHECKPOINT = "replication-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
CHECKPOINT_VERSION = "0"
BROKER_DIR = re.compile(r"^broker-(\d+)$")


class CheckpointError(ValueError):
    """A checkpoint file that does not follow Kafka's text format."""


@dataclass(frozen=True)
class Replica:
    """One replica directory and what its log dir's checkpoints say about it."""

    broker: int
    log_dir: str
    topic: str
    partition: int
    path: str
    first_segment_base: int | None  # None: no segment file at all
    last_segment_base: int | None
    checkpointed_hw: int | None
    checkpointed_log_start: int | None
    epoch_entries: tuple[tuple[int, int], ...] | None  # None: no leader-epoch-checkpoint
    epoch_error: str | None = None  # the checkpoint exists but cannot be read
    #: its log dir's log-start-offset-checkpoint exists but cannot be read: the log start is
    #: unknown (``first_segment_base`` is all that is left, a lower bound)
    log_start_unknown: bool = False


@dataclass
class Inventory:
    replicas: list[Replica] = field(default_factory=list)
    #: Problems with a log dir's own checkpoint files (reported, not fatal).
    notes: list[str] = field(default_factory=list)
    #: The broker id of every log dir read.
    brokers: dict[int, str] = field(default_factory=dict)
    #: Log dirs holding replicas whose ``replication-offset-checkpoint`` is absent or unreadable:
    #: hw_above_leo cannot see their replicas (a skipped input, :mod:`verify.inputs`).
    missing_hw_checkpoints: list[str] = field(default_factory=list)
    #: Log dirs holding replicas whose ``log-start-offset-checkpoint`` exists but cannot be read:
    #: their log starts are unknown (a skipped input). A missing one is not listed: the broker
    #: writes it every ``log.flush.start.offset.checkpoint.interval.ms``, after a truncation and at
    #: a clean shutdown, so a broker killed early has none, and every log then starts at its first
    #: segment, as Kafka's LogLoader reads it.
    unreadable_log_start_checkpoints: list[str] = field(default_factory=list)
    #: Per broker read, the partitions its ``replication-offset-checkpoint`` lists (of the topics
    #: asked for): every partition it hosted at its last checkpoint, directory or not.
    checkpointed: dict[int, set[tuple[str, int]]] = field(default_factory=dict)

    def topics(self) -> set[str]:
        return {r.topic for r in self.replicas}

    def max_checkpointed_hw(self) -> dict[tuple[str, int], int]:
        """Per partition, the highest HW any replica checkpointed."""
        out: dict[tuple[str, int], int] = {}
        for r in self.replicas:
            if r.checkpointed_hw is not None:
                key = (r.topic, r.partition)
                out[key] = max(out.get(key, 0), r.checkpointed_hw)
        return out


def split_log_dirs(value: str | Iterable[str] | None) -> list[str]:
    """``"D1,D2"`` or ``["D1", "D2,D3"]`` -> ``["D1", "D2", "D3"]``."""
    if value is None:
        return []
    items = [value] if isinstance(value, str) else list(value)
    return [part.strip() for item in items for part in item.split(",") if part.strip()]


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    """``"my.topic-3"`` -> ``("my.topic", 3)``; None for anything else (``t-0.abc-delete``...)."""
    topic, sep, partition = name.rpartition("-")
    if not sep or not topic or not partition.isdigit():
        return None
    return topic, int(partition)


def broker_id_for(log_dir: Path, position: int) -> int:
    for part in reversed(log_dir.resolve().parts):
        match = BROKER_DIR.match(part)
        if match:
            return int(match.group(1))
    meta = log_dir / "meta.properties"
    if meta.exists():
        for line in meta.read_text(encoding="utf-8", errors="replace").splitlines():
            key, sep, value = line.partition("=")
            if sep and key.strip() == "broker.id" and value.strip().lstrip("-").isdigit():
                return int(value.strip())
    return position


def _checkpoint_lines(path: Path, fields: int) -> list[list[str]] | None:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path}: unreadable ({e})") from None
    lines = text.splitlines()
    if not lines or lines[0].strip() != CHECKPOINT_VERSION:
        raise CheckpointError(f"{path}: line 1: expected version {CHECKPOINT_VERSION}")
    try:
        count = int(lines[1].strip()) if len(lines) > 1 else -1
    except ValueError:
        count = -1
    body = [line for line in lines[2:] if line.strip()]
    if count < 0 or count != len(body):
        raise CheckpointError(f"{path}: line 2: the entry count does not match the {len(body)} entries")
    rows = []
    for number, line in enumerate(body, start=3):
        tokens = line.split()
        if len(tokens) != fields or not all(t.lstrip("-").isdigit() for t in tokens[fields - 2 :]):
            raise CheckpointError(f"{path}: line {number}: expected {fields} fields, got {line!r}")
        rows.append(tokens)
    return rows


def read_offset_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    """``{(topic, partition): offset}`` of a ``replication-offset-checkpoint``-style file ({} if absent)."""
    rows = _checkpoint_lines(path, 3) or []
    return {(topic, int(partition)): int(offset) for topic, partition, offset in rows}


def read_epoch_checkpoint(path: Path) -> list[tuple[int, int]] | None:
    """``[(epoch, start offset)]`` of a ``leader-epoch-checkpoint`` in file order (None if absent)."""
    rows = _checkpoint_lines(path, 2)
    return None if rows is None else [(int(epoch), int(start)) for epoch, start in rows]


def list_replicas(log_dirs: Sequence[str], topics: set[str] | None = None) -> Inventory:
    """Every replica directory in ``log_dirs`` (only ``topics``' when given), with its checkpoints."""
    inventory = Inventory()
    for position, name in enumerate(log_dirs, start=1):
        log_dir = Path(name)
        if not log_dir.is_dir():
            raise FileNotFoundError(f"log dir {log_dir} does not exist")
        broker = broker_id_for(log_dir, position)
        inventory.brokers[broker] = str(log_dir)
        offsets: dict[str, dict[tuple[str, int], int]] = {}
        hw_problem = None if (log_dir / HIGH_WATERMARK_CHECKPOINT).exists() else "absent"
        log_start_problem = None
        for checkpoint in (HIGH_WATERMARK_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT):
            try:
                offsets[checkpoint] = read_offset_checkpoint(log_dir / checkpoint)
            except CheckpointError as e:
                inventory.notes.append(f"broker {broker}: {e}")
                offsets[checkpoint] = {}
                if checkpoint == HIGH_WATERMARK_CHECKPOINT:
                    hw_problem = "unreadable"
                else:
                    log_start_problem = str(e)
        inventory.checkpointed[broker] = {
            tp for tp in offsets[HIGH_WATERMARK_CHECKPOINT] if topics is None or tp[0] in topics
        }
        before = len(inventory.replicas)
        for child in sorted(log_dir.iterdir()):
            parsed = parse_partition_dir(child.name) if child.is_dir() else None
            if parsed is None or (topics is not None and parsed[0] not in topics):
                continue
            segments = segment_files(child)
            entries: list[tuple[int, int]] | None
            error = None
            try:
                entries = read_epoch_checkpoint(child / LEADER_EPOCH_CHECKPOINT)
            except CheckpointError as e:
                entries, error = None, str(e)
            inventory.replicas.append(
                Replica(
                    broker=broker,
                    log_dir=str(log_dir),
                    topic=parsed[0],
                    partition=parsed[1],
                    path=str(child),
                    first_segment_base=segments[0][0] if segments else None,
                    last_segment_base=segments[-1][0] if segments else None,
                    checkpointed_hw=offsets[HIGH_WATERMARK_CHECKPOINT].get(parsed),
                    checkpointed_log_start=offsets[LOG_START_OFFSET_CHECKPOINT].get(parsed),
                    epoch_entries=None if entries is None else tuple(entries),
                    epoch_error=error,
                    log_start_unknown=log_start_problem is not None,
                )
            )
        if hw_problem and len(inventory.replicas) > before:
            inventory.missing_hw_checkpoints.append(
                f"broker {broker}: {HIGH_WATERMARK_CHECKPOINT} {hw_problem} in {log_dir}"
            )
        if log_start_problem and len(inventory.replicas) > before:
            inventory.unreadable_log_start_checkpoints.append(f"broker {broker}: {log_start_problem}")
    return inventory
