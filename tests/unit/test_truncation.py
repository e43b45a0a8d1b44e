"""Truncation decisions of KIP-101/KIP-279 (seeds 001, 002), with the exact offsets."""

from broker.replica.truncation import (
    TruncationDecision,
    truncation_by_high_watermark,
    truncation_by_leader_epoch,
)


def test_same_epoch_truncates_to_min_of_leader_end_and_own():
    # Follower's latest epoch 1 ends at LEO 25; leader says epoch 1 ends at 20 -> truncate to 20.
    assert truncation_by_leader_epoch(1, 20, (1, 25), local_log_end_offset=25, local_high_watermark=18) == (
        TruncationDecision(20, True)
    )


def test_follower_behind_does_not_truncate():
    assert truncation_by_leader_epoch(3, 120, (3, 100), 100, 90) == TruncationDecision(100, True)


def test_kip_279_unknown_leader_epoch_truncates_to_own_epoch_end_and_asks_again():
    # Follower epochs (1,0) (3,10), LEO 15; leader never had epoch 3: it answers (2, 12).
    # Our largest epoch <= 2 is 1, ending at 10: truncate to 10 and ask again.
    assert truncation_by_leader_epoch(2, 12, (1, 10), 15, 5) == TruncationDecision(10, False)


def test_undefined_leader_answer_falls_back_to_hw():
    assert truncation_by_leader_epoch(-1, -1, (1, 10), 15, 7) == TruncationDecision(7, True)


def test_follower_without_older_epochs_truncates_to_leader_end():
    assert truncation_by_leader_epoch(0, 4, None, 9, 2) == TruncationDecision(4, True)


def test_high_watermark_policy():
    assert truncation_by_high_watermark(3, 9) == TruncationDecision(3, True)
    assert truncation_by_high_watermark(9, 3) == TruncationDecision(3, True)
