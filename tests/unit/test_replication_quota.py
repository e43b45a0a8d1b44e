"""KIP-73's replication quota (broker/replica/replication_quota.py), against Kafka's SampledStat
Rate by hand for the byte rate (bytes over the samples in the window divided by the time they
cover, never less than all but one whole window; samples older than the window forgotten), a
token bucket (KIP-599) by hand for the bound, and the throttled replicas parsed as Kafka's
ThrottledReplicaListValidator parses them."""

from __future__ import annotations

import pytest

from broker.replica.replication_quota import (
    ALL_REPLICAS,
    UNBOUNDED,
    ReplicationQuotaManager,
    parse_throttled_replicas,
    throttled_partitions,
)


def test_the_byte_rate_of_a_first_burst_is_measured_over_all_but_one_window() -> None:
    quota = ReplicationQuotaManager("LeaderReplication", window_num=11, window_size_ms=1000, bound=1000)
    quota.record(5000, now_ms=0)
    assert quota.rate(0) == pytest.approx(500.0)  # 5000 bytes over the padded 10 s
    quota.record(6000, now_ms=100)
    assert quota.rate(100) == pytest.approx(11000 * 1000 / 10100)  # 100 ms + 10 padded windows


def test_the_bound_is_a_token_bucket_with_a_burst_of_the_whole_window() -> None:
    quota = ReplicationQuotaManager("LeaderReplication", window_num=11, window_size_ms=1000, bound=1000)
    assert quota.burst == 11000 and not quota.is_quota_exceeded(0)
    quota.record(5000, now_ms=0)
    assert not quota.is_quota_exceeded(0)  # 6000 tokens left
    quota.record(7000, now_ms=100)  # 6000 + 100 accrued - 7000 = -900: in debt
    assert quota.is_quota_exceeded(100) and quota.is_quota_exceeded(999)
    assert not quota.is_quota_exceeded(1000)  # 900 ms at 1000 B/s paid it back
    assert not quota.is_quota_exceeded(60_000) and quota._tokens == 11000  # never above the burst
    quota.update_quota(100)
    assert quota._tokens == 1100  # a lower bound lowers the burst too


def test_the_rate_spans_the_samples_once_they_cover_the_window() -> None:
    quota = ReplicationQuotaManager("FollowerReplication", window_num=3, window_size_ms=1000, bound=10)
    for second in range(6):
        quota.record(100, now_ms=second * 1000)
    # samples older than 3 windows are gone: those of seconds 3, 4 and 5 remain
    assert quota.rate(5000) == pytest.approx(300 * 1000 / 2000)
    assert quota.rate(5999) == pytest.approx(300 * 1000 / 2999)
    assert quota.rate(60_000) == 0.0  # all expired


def test_unbounded_is_never_exceeded_and_the_bound_can_change() -> None:
    quota = ReplicationQuotaManager("LeaderReplication", window_num=2, window_size_ms=1000)
    quota.record(10**12, now_ms=0)
    assert quota.bound == UNBOUNDED and not quota.is_quota_exceeded(0)
    quota.update_quota(1000)
    assert not quota.is_quota_exceeded(0)  # a new bound starts with a full bucket
    quota.record(3000, now_ms=0)
    assert quota.is_quota_exceeded(0)


def test_throttled_replicas_are_parsed_as_kafka_does() -> None:
    assert parse_throttled_replicas("*") == ALL_REPLICAS
    assert parse_throttled_replicas(" 0:1 , 1:2,") == [(0, 1), (1, 2)]
    assert parse_throttled_replicas("") == []
    for bad in ("0", "x:1", "1:y", "0:1,*"):
        with pytest.raises(ValueError, match="PartitionId"):
            parse_throttled_replicas(bad)
    assert throttled_partitions("0:1,1:2,2:1", broker_id=1) == {0, 2}
    assert throttled_partitions("*", broker_id=7) == ALL_REPLICAS


def test_marking_and_removing_throttled_partitions() -> None:
    quota = ReplicationQuotaManager("LeaderReplication")
    quota.mark_throttled("t", {0, 2})
    assert [quota.is_throttled(("t", p)) for p in range(3)] == [True, False, True]
    quota.mark_throttled("u", ALL_REPLICAS)
    assert quota.is_throttled(("u", 99))
    quota.mark_throttled("t", set())
    quota.remove_throttle("u")
    assert not quota.throttled
