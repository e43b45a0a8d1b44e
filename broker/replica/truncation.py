"""Where a follower truncates its log before fetching from a new leader (Kafka KIP-101 and KIP-279;
docs/guarantees.md "No acknowledged write lost, no divergence"). Sans-IO: the fetcher asks the
leader, this module decides.

Two policies, chosen by ``replica.truncation.policy``:

* ``high-watermark`` (pre-0.11, unsafe): truncate to the local HW. docs/guarantees.md
  "No acknowledged write lost, no divergence" shows how this loses acknowledged data and lets
  replicas diverge.
* ``leader-epoch`` (default): send the leader our latest epoch; the leader answers with the
  largest epoch it knows that is <= ours and that epoch's end offset. If the leader's epoch
  is one we also know, truncate to min(its end offset, our end offset for it). If not
  (KIP-279), truncate to our end offset for that epoch and ask again with our next-lower epoch.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class TruncationPolicy(StrEnum):
    LEADER_EPOCH = "leader-epoch"
    HIGH_WATERMARK = "high-watermark"


@dataclass(frozen=True)
class TruncationDecision:
    offset: int
    completed: bool  # False: truncate to ``offset`` and ask the leader again (KIP-279)


def truncation_by_high_watermark(local_high_watermark: int, local_log_end_offset: int) -> TruncationDecision:
    return TruncationDecision(min(local_high_watermark, local_log_end_offset), True)


def truncation_by_leader_epoch(
    leader_epoch: int,
    leader_end_offset: int,
    follower_end_offset_for: tuple[int, int] | None,
    local_log_end_offset: int,
    local_high_watermark: int,
) -> TruncationDecision:
    """Kafka's AbstractFetcherThread.getOffsetTruncationState.

    ``leader_epoch``/``leader_end_offset``: the leader's OffsetsForLeaderEpoch answer.
    ``follower_end_offset_for``: our own (epoch, end offset) for ``leader_epoch`` from our
    cache (largest epoch <= it), or None when we have no such epoch.
    """
    if leader_end_offset == UNDEFINED_EPOCH_OFFSET:
        # The leader knows nothing older than our epoch: fall back to the HW, as Kafka does.
        return truncation_by_high_watermark(local_high_watermark, local_log_end_offset)
    if follower_end_offset_for is None or follower_end_offset_for[0] == UNDEFINED_EPOCH:
        return TruncationDecision(min(leader_end_offset, local_log_end_offset), True)
    follower_epoch, follower_end_offset = follower_end_offset_for
    if follower_epoch != leader_epoch:
        # KIP-279: we do not know the leader's epoch; cut back to the end of our largest epoch
        # below it and ask again.
        return TruncationDecision(min(follower_end_offset, local_log_end_offset), False)
    return TruncationDecision(min(follower_end_offset, leader_end_offset, local_log_end_offset), True)
