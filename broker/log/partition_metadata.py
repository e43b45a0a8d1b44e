"""``partition.metadata``: the topic id (KIP-516) of the partition a log directory belongs to
(Kafka's ``PartitionMetadataFile`` and ``PartitionMetadataReadBuffer``; docs/design.md "Topic
ids (KIP-516)").

The file is Kafka's, byte for byte: ``version: 0\\ntopic_id: <base64 uuid>`` (no trailing
newline), written to ``partition.metadata.tmp``, fsynced and renamed over the file (Kafka's
``maybeFlush``; :func:`broker.log.checkpoint.atomic_write_text`, which also fsyncs the
directory). Reading accepts what Kafka's reader accepts: a version line and a topic-id line of
two whitespace-separated fields each, a version of at least 0, and a topic id other than
``ZERO_UUID``; anything else is :class:`CorruptPartitionMetadata`, an ``OSError`` as Kafka's
``IOException`` is, so the caller's log-dir failure handling (KIP-112) takes the dir offline,
as Kafka's ``LogDirFailureChannel`` does.

:class:`TopicIds` is the LogManager's record of its logs' files (Kafka's ``UnifiedLog._topicId``):
read at a log's first :meth:`TopicIds.get`, written by :meth:`TopicIds.assign` (Kafka's
``UnifiedLog.assignTopicId``), which refuses another id with INCONSISTENT_TOPIC_ID as Kafka's
``LogManager.getOrCreateLog`` does. Which logs are strays is the replica layer's to decide.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from broker.log.checkpoint import Relieve, atomic_write_text
from client.protocol.errors import ErrorCode, KafkaError
from client.protocol.topic_id import ZERO_UUID, parse_uuid
from client.types import TopicPartition

if TYPE_CHECKING:
    from broker.log.log import Log
    from broker.log.log_dir_failure import LogDirFailureChannel

log = logging.getLogger(__name__)

PARTITION_METADATA_FILE = "partition.metadata"
CURRENT_VERSION = 0
_WHITE_SPACES = re.compile(r"\s+")


class CorruptPartitionMetadata(OSError):
    """The file is not a partition metadata file Kafka would read."""


def encode(topic_id: str) -> str:
    """Kafka's ``PartitionMetadata.encode``."""
    return f"version: {CURRENT_VERSION}\ntopic_id: {topic_id}"


def decode(text: str, location: str = PARTITION_METADATA_FILE) -> str:
    """The topic id of a partition metadata file's ``text`` (Kafka's
    ``PartitionMetadataReadBuffer.read``)."""
    lines = text.split("\n")
    version_fields = _WHITE_SPACES.split(lines[0].strip()) if lines else []
    if len(version_fields) != 2:
        raise CorruptPartitionMetadata(f"Malformed line in checkpoint file [{location}]: {lines[0]!r}")
    try:
        version = int(version_fields[1])
    except ValueError:
        raise CorruptPartitionMetadata(
            f"Malformed line in checkpoint file [{location}]: {lines[0]!r}"
        ) from None
    if version < CURRENT_VERSION:
        raise CorruptPartitionMetadata(
            f"Unrecognized version of partition metadata file ({location}): {version}"
        )
    id_line = lines[1].strip() if len(lines) > 1 else ""
    id_fields = _WHITE_SPACES.split(id_line)
    if len(id_fields) != 2:
        raise CorruptPartitionMetadata(f"Malformed line in checkpoint file [{location}]: {id_line!r}")
    try:
        topic_id = parse_uuid(id_fields[1])
    except ValueError as exc:
        raise CorruptPartitionMetadata(f"Malformed line in checkpoint file [{location}]: {exc}") from None
    if topic_id == ZERO_UUID:
        raise CorruptPartitionMetadata(f"Invalid topic ID in partition metadata file ({location})")
    return topic_id


def path_of(log_dir: Path) -> Path:
    """The file in a partition's directory (``<log dir>/<topic>-<partition>``)."""
    return log_dir / PARTITION_METADATA_FILE


def read(partition_dir: Path) -> str | None:
    """The directory's topic id; None when it has no file (a log of a version before topic ids,
    or created before its first LeaderAndIsr with an id). OSError as raised."""
    path = path_of(partition_dir)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    return decode(text, str(path))


def write(partition_dir: Path, topic_id: str, relieve: Relieve | None = None) -> None:
    """Record ``topic_id`` durably (tmp file, fsync, rename, directory fsync)."""
    if topic_id == ZERO_UUID:
        raise ValueError("ZERO_UUID is no topic id")
    atomic_write_text(path_of(partition_dir), encode(topic_id), relieve)


class TopicIds:
    """Each log's topic id as its ``partition.metadata`` records it (None: the log has none),
    read once and kept; ``lookup`` finds a partition's log (LogManager.get_log). I/O errors fail
    the log's dir through ``failure_channel`` and raise KAFKA_STORAGE_ERROR."""

    def __init__(
        self,
        lookup: Callable[[str, int], Log | None],
        failure_channel: LogDirFailureChannel,
        relieve: Relieve | None = None,
    ) -> None:
        self._lookup = lookup
        self._failure_channel = failure_channel
        self._relieve = relieve
        self._ids: dict[TopicPartition, str | None] = {}
        self._lock = threading.RLock()

    def get(self, topic: str, partition: int) -> str | None:
        """The topic id of the partition's log; None: no such log, or a log without one (created
        before topic ids, or not yet told its id)."""
        tp = (topic, partition)
        with self._lock:
            lg = self._lookup(topic, partition)
            if lg is None:
                return None
            if tp not in self._ids:
                what = (
                    f"Error while reading partition metadata file of {topic}-{partition} in dir {lg.log_dir}"
                )
                with self._failure_channel.io_errors(lg.log_dir, what):
                    self._ids[tp] = read(lg.dir)
            return self._ids[tp]

    def assign(self, topic: str, partition: int, topic_id: str) -> None:
        """Record ``topic_id`` unless the log records it already; INCONSISTENT_TOPIC_ID if it
        records another (its records belong to another incarnation of the topic)."""
        with self._lock:
            current = self.get(topic, partition)
            if current == topic_id:
                return
            lg = self._lookup(topic, partition)
            if lg is None:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no log for {topic}-{partition}")
            if current is not None:
                raise KafkaError(
                    ErrorCode.INCONSISTENT_TOPIC_ID,
                    f"the log of {topic}-{partition} in {lg.log_dir} has topic id {current}, not {topic_id}",
                )
            what = f"Error while writing partition metadata file of {topic}-{partition} in dir {lg.log_dir}"
            with self._failure_channel.io_errors(lg.log_dir, what):
                write(lg.dir, topic_id, self._relieve)
            self._ids[(topic, partition)] = topic_id
            log.info("recorded topic id %s for %s-%d", topic_id, topic, partition)

    def recorded(self) -> dict[TopicPartition, str | None]:
        """The ids read or written so far (no I/O: the simulator's invariants read these)."""
        with self._lock:
            return dict(self._ids)

    def forget(self, tp: TopicPartition) -> None:
        """The log is gone (deleted, or its dir offline)."""
        with self._lock:
            self._ids.pop(tp, None)

    def forget_all(self) -> None:
        with self._lock:
            self._ids.clear()
