"""ListOffsets and OffsetsForLeaderEpoch on the leader (Kafka's ReplicaManager.fetchOffset /
Partition.fetchOffsetForTimestamp and lastOffsetForLeaderEpoch; KIP-101, KIP-279): the offsets a
consumer or a follower asks a partition's leader for, read from its log and leader-epoch cache.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from client.protocol.api import CONSUMER_REPLICA_ID, EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from client.protocol.errors import ErrorCode, KafkaError
from client.types import TopicPartition

if TYPE_CHECKING:
    from broker.replica.replica_manager import ReplicaManager


def list_offset(
    rm: ReplicaManager,
    tp: TopicPartition,
    timestamp: int,
    current_leader_epoch: int,
    replica_id: int = CONSUMER_REPLICA_ID,
) -> dict:
    """ListOffsets. LATEST is the HW for a consumer and the LEO for a follower (as in Kafka:
    a follower handling OFFSET_OUT_OF_RANGE needs the leader's real log end)."""
    try:
        partition, log_ = rm.leader_log(tp, current_leader_epoch)
    except KafkaError as exc:
        return {"error_code": exc.code, "timestamp": -1, "offset": -1, "leader_epoch": -1}
    if timestamp == EARLIEST_TIMESTAMP:
        offset, ts = log_.log_start_offset, -1
    elif timestamp == LATEST_TIMESTAMP:
        offset = log_.high_watermark if replica_id == CONSUMER_REPLICA_ID else log_.log_end_offset
        ts = -1
    else:
        found = log_.offset_for_timestamp(timestamp)
        if found is None or found[0] >= log_.high_watermark:
            offset, ts = -1, -1
        else:
            offset, ts = found
    return {
        "error_code": ErrorCode.NONE,
        "timestamp": ts,
        "offset": offset,
        "leader_epoch": partition.leader_epoch,
    }


def end_offset_for_epoch(
    rm: ReplicaManager, tp: TopicPartition, requested_epoch: int, current_leader_epoch: int
) -> dict:
    """OffsetsForLeaderEpoch (KIP-101): the leader's LEO for its latest epoch, else the start
    offset of the first epoch above the requested one."""
    try:
        _, log_ = rm.leader_log(tp, current_leader_epoch)
    except KafkaError as exc:
        return {"error_code": exc.code, "leader_epoch": -1, "end_offset": -1}
    epoch, end_offset = log_.leader_epoch_cache.end_offset_for(requested_epoch, log_.log_end_offset)
    return {"error_code": ErrorCode.NONE, "leader_epoch": epoch, "end_offset": end_offset}
