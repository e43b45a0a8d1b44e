"""Adversarial review of the group coordinator's offsets (broker/coordinator/group_offsets.py,
group_metadata.py) against Kafka 3.7's GroupMetadata.scala (prepareOffsetCommit,
onOffsetCommitAppend, removeOffsets) and GroupCoordinator.handleDeletedPartitions. Driven by
tests/unit/group_harness.py with writes acknowledged when the test says."""

from __future__ import annotations

from broker.coordinator import group_offsets
from client.types import TopicPartition
from tests.unit.group_harness import E, GroupEnv

T0 = TopicPartition("t", 0)
U0 = TopicPartition("u", 0)


def test_a_commit_of_a_recreated_topic_survives_the_deleted_topics_late_write():
    """Interleaving: group g (a standalone consumer, generation -1) has u-0 committed and a
    commit of t-0 = 1000 whose write is not acknowledged yet (W1). Topic t is deleted
    (handleDeletedPartitions: t-0's offset and pending commit forgotten) and re-created; the
    consumer commits t-0 = 5 of the new topic (W2, pending too). W1 is acknowledged, then W2.
    Kafka (GroupMetadata.onOffsetCommitAppend): W1 finds t-0 pending (W2's staged offset) and
    puts 1000, but W2 then puts 5 (its record is later) and clears the pending entry: OffsetFetch
    answers 5, as the log does (W2 lies after W1 and the tombstone). floodmark counts pending
    commits per partition: the deletion dropped W1's count, so W1's acknowledgement takes W2's
    count and applies 1000, and W2's finds nothing pending and is dropped: OffsetFetch answers
    the deleted topic's 1000 (the consumer skips 995 records of the new t, or reads past its
    end) although W2 was acknowledged."""
    env = GroupEnv(auto_ack=False)
    env.commit({U0: 7})
    env.append.complete_all()
    w1_reply = env.commit({T0: 1000})
    w1 = env.append.last()
    group_offsets.handle_deleted_partitions(env.coordinator, [T0])
    for write in env.append.pending():
        if write is not w1:
            env.append.complete(write)  # the tombstones
    w2_reply = env.commit({T0: 5})
    w2 = env.append.last()
    env.append.complete(w1)
    env.append.complete(w2)
    assert w1_reply.value == {T0: E.NONE} and w2_reply.value == {T0: E.NONE}
    assert env.fetch("g", [T0]) == (E.NONE, {T0: 5})
