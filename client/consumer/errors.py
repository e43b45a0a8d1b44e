"""The consumer's own commit failures (Kafka's ``clients.consumer.CommitFailedException`` and
``common.errors.RebalanceInProgressException``; kafka-python's ``CommitFailedError`` and
``RebalanceInProgressError``; docs/design.md "Consumer groups").

Both are :class:`~client.protocol.errors.KafkaError` subclasses, so a caller catching
KafkaError keeps working:

* :class:`CommitFailedError`: the commit cannot be completed because this member is no longer
  part of the generation that owns the partitions (fenced: UNKNOWN_MEMBER_ID,
  ILLEGAL_GENERATION), whether the coordinator said so or the member knew it already and sent
  nothing. Retrying cannot help: the partitions may belong to another member by now. Its code is
  the error that ended the member's generation.
* :class:`RebalanceInProgressError`: the member is between generations (JoinGroup or SyncGroup in
  flight) or the group is rebalancing; ``poll`` completes the rebalance, after which a commit of
  the partitions still owned may be retried.
"""

from __future__ import annotations

from client.protocol.errors import ErrorCode, KafkaError

#: Kafka's CommitFailedException() message
REBALANCED = (
    "Commit cannot be completed since the group has already rebalanced and assigned the "
    "partitions to another member. This means that the time between subsequent calls to poll() "
    "was longer than the configured max.poll.interval.ms, which typically implies that the poll "
    "loop is spending too much time message processing. You can address this either by "
    "increasing max.poll.interval.ms or by reducing the maximum size of batches returned in "
    "poll() with max.poll.records."
)
#: sendOffsetCommitRequest's refusal when generationIfStable() is null and no rebalance runs
NOT_IN_ACTIVE_GROUP = (
    "Offset commit cannot be completed since the consumer is not part of an active group for "
    "auto partition assignment; it is likely that the consumer was kicked out of the group."
)
#: ... and when a rebalance runs
UNDERGOING_REBALANCE = (
    "Offset commit cannot be completed since the consumer is undergoing a rebalance for auto "
    "partition assignment. You can try completing the rebalance by calling poll() and then "
    "retry the operation."
)
#: the coordinator answered REBALANCE_IN_PROGRESS
GROUP_REBALANCING = (
    "Offset commit cannot be completed since the consumer group is executing a rebalance at the "
    "moment. You can try completing the rebalance by calling poll() and then retry commit again"
)
#: a fenced answer to a commit of an older generation while the member joins a newer one
STALE_GENERATION = (
    "Offset commit cannot be completed since the consumer member's generation is already stale, "
    "meaning it has already participated another rebalance and got a new generation. You can try "
    "completing the rebalance by calling poll() and then retry commit again"
)


class CommitFailedError(KafkaError):
    """Kafka's CommitFailedException: this member's generation is over; nothing was committed."""

    def __init__(self, code: int = ErrorCode.UNKNOWN_MEMBER_ID, message: str = REBALANCED) -> None:
        super().__init__(code, message)


class RebalanceInProgressError(KafkaError):
    """Kafka's RebalanceInProgressException: complete the rebalance with ``poll`` first."""

    def __init__(self, message: str = GROUP_REBALANCING) -> None:
        super().__init__(ErrorCode.REBALANCE_IN_PROGRESS, message)
