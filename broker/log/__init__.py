"""The broker's log storage (Kafka's ``kafka.log``): segments, indexes, checkpoints, the leader
epoch cache, recovery and retention. Knows nothing of the network, ZooKeeper or replication."""

from broker.log.checkpoint import CorruptCheckpoint, OffsetCheckpointFile, atomic_write_text
from broker.log.index import OffsetIndex, TimeIndex
from broker.log.leader_epoch import (
    LEADER_EPOCH_CHECKPOINT,
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    EpochEntry,
    LeaderEpochFileCache,
)
from broker.log.log import FetchDataInfo, Log, LogAppendInfo, LogConfig, parse_topic_partition
from broker.log.log_manager import (
    CLEAN_SHUTDOWN_FILE,
    HIGH_WATERMARK_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    LogManager,
)
from broker.log.segment import LogSegment, segment_name

__all__ = [
    "CLEAN_SHUTDOWN_FILE",
    "HIGH_WATERMARK_CHECKPOINT",
    "LEADER_EPOCH_CHECKPOINT",
    "LOG_START_OFFSET_CHECKPOINT",
    "RECOVERY_POINT_CHECKPOINT",
    "UNDEFINED_EPOCH",
    "UNDEFINED_EPOCH_OFFSET",
    "CorruptCheckpoint",
    "EpochEntry",
    "FetchDataInfo",
    "LeaderEpochFileCache",
    "Log",
    "LogAppendInfo",
    "LogConfig",
    "LogManager",
    "LogSegment",
    "OffsetCheckpointFile",
    "OffsetIndex",
    "TimeIndex",
    "atomic_write_text",
    "parse_topic_partition",
    "segment_name",
]
