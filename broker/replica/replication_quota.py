"""Replication throttling (Kafka's ReplicationQuotaManager, KIP-73; docs/design.md "Replication
throttling"): a byte-rate bound on the replication traffic of chosen replicas, used while a
reassignment copies a partition to new brokers.

Two managers per broker, as in Kafka: LeaderReplication bounds what this broker sends to
followers of its throttled partitions, FollowerReplication what it fetches for its own throttled
partitions. A partition is throttled when the topic's ``leader.replication.throttled.replicas``
(``follower.replication.throttled.replicas``) names it with this broker (``partition:broker``) or
is ``*``; the bound is the broker's ``leader.replication.throttled.rate``
(``follower.replication.throttled.rate``). Only a replica that is not in sync is held back (the
callers check that): a throttle never pushes an in-sync follower out of the ISR.

Whether the bound is exceeded is decided by a token bucket (KIP-599's TokenBucket, which Kafka
later chose for its mutation quotas): tokens accrue at the bound, up to a burst of the bound times
``replication.quota.window.num`` x ``replication.quota.window.size.seconds``; each byte replicated
takes one; the quota is exceeded while the bucket is in debt. KIP-73's SampledStat Rate (kept for
the byte-rate gauge, :meth:`ReplicationQuotaManager.rate`) lets a copy through in lumps: one
fetch burst fills one sample, the window then stays over the bound until that sample expires,
and the next burst fills the next one, so the copy advanced in 35 MB steps every 5 s in
tests/integration/test_replication_throttle.py (docs/design.md "Replication throttling").
Sans-IO: every call takes the time.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from client.types import TopicPartition

UNBOUNDED = 2**63 - 1  # Kafka's Long.MaxValue: no throttle
ALL_REPLICAS = "*"


def parse_throttled_replicas(value: str) -> str | list[tuple[int, int]]:
    """Kafka's ThrottledReplicaListValidator: ``*``, or ``partition:broker`` entries separated by
    commas (blank: none). Raises ValueError naming the bad entry."""
    text = value.strip()
    if text == ALL_REPLICAS:
        return ALL_REPLICAS
    entries = []
    for item in (i.strip() for i in text.split(",")):
        if not item:
            continue
        partition, sep, broker = item.partition(":")
        if not sep or not partition.strip().isdigit() or not broker.strip().lstrip("-").isdigit():
            raise ValueError(
                f"{item!r} must be of the form [PartitionId]:[BrokerId],[PartitionId]:[BrokerId],... "
                f"or the wildcard '*'"
            )
        entries.append((int(partition), int(broker)))
    return entries


def throttled_partitions(value: str, broker_id: int) -> str | set[int]:
    """The partitions a throttled-replicas value throttles on ``broker_id`` (Kafka's
    parseThrottledPartitions): ``*`` for all of them."""
    parsed = parse_throttled_replicas(value)
    if parsed == ALL_REPLICAS:
        return ALL_REPLICAS
    return {p for p, b in parsed if b == broker_id}


@dataclass
class ReplicationQuotaManager:
    name: str  # "LeaderReplication" or "FollowerReplication", as Kafka's metrics name them
    window_num: int = 11
    window_size_ms: int = 1000
    bound: int = UNBOUNDED
    #: topic -> throttled partitions on this broker ("*": all)
    throttled: dict[str, str | set[int]] = field(default_factory=dict)
    _samples: deque[list[int]] = field(default_factory=deque)  # [window start ms, bytes]

    # -- what is throttled ------------------------------------------------------------------------
    def mark_throttled(self, topic: str, partitions: str | Iterable[int]) -> None:
        if partitions == ALL_REPLICAS:
            self.throttled[topic] = ALL_REPLICAS
        else:
            chosen = set(partitions)
            if chosen:
                self.throttled[topic] = chosen
            else:
                self.throttled.pop(topic, None)

    def remove_throttle(self, topic: str) -> None:
        self.throttled.pop(topic, None)

    def is_throttled(self, tp: TopicPartition) -> bool:
        chosen = self.throttled.get(tp[0])
        return chosen is not None and (chosen == ALL_REPLICAS or tp[1] in chosen)

    # -- the bound: a token bucket -----------------------------------------------------------------
    _tokens: float | None = None  # None: a full bucket (set at the first use)
    _refilled_ms: int | None = None

    @property
    def burst(self) -> float:
        return self.bound * self.window_num * self.window_size_ms / 1000

    def update_quota(self, bound: int) -> None:
        self.bound = bound
        if self._tokens is not None:
            self._tokens = min(self._tokens, self.burst)

    def _refill(self, now_ms: int) -> float:
        if self._tokens is None or self._refilled_ms is None:
            self._tokens, self._refilled_ms = self.burst, now_ms
        elapsed_ms = max(0, now_ms - self._refilled_ms)
        self._tokens = min(self.burst, self._tokens + elapsed_ms * self.bound / 1000)
        self._refilled_ms = now_ms
        return self._tokens

    def record(self, nbytes: int, now_ms: int) -> None:
        self._expire(now_ms)
        if not self._samples or now_ms - self._samples[-1][0] >= self.window_size_ms:
            self._samples.append([now_ms, 0])
        self._samples[-1][1] += nbytes
        if self.bound != UNBOUNDED:
            self._tokens = self._refill(now_ms) - nbytes

    def is_quota_exceeded(self, now_ms: int) -> bool:
        return self.bound != UNBOUNDED and self._refill(now_ms) < 0

    # -- the byte rate (the gauge): Kafka's SampledStat Rate ------------------------------------------
    def rate(self, now_ms: int) -> float:
        """Bytes per second over the samples in the window (Kafka's Rate.measure)."""
        self._expire(now_ms)
        total = sum(b for _, b in self._samples)
        if not self._samples:
            return 0.0
        elapsed_ms = now_ms - self._samples[0][0]
        full_windows = elapsed_ms // self.window_size_ms
        if full_windows < self.window_num - 1:
            elapsed_ms += (self.window_num - 1 - full_windows) * self.window_size_ms
        return total * 1000.0 / max(elapsed_ms, 1)

    def _expire(self, now_ms: int) -> None:
        """Kafka's purgeObsoleteSamples: a sample started ``window_num`` windows ago is gone."""
        while self._samples and now_ms - self._samples[0][0] >= self.window_num * self.window_size_ms:
            self._samples.popleft()


@dataclass
class ReplicationQuotas:
    """The broker's two replication quota managers (Kafka's QuotaManagers.leader / .follower)."""

    leader: ReplicationQuotaManager
    follower: ReplicationQuotaManager

    @classmethod
    def create(
        cls, window_num: int, window_size_ms: int, leader_rate: int, follower_rate: int
    ) -> ReplicationQuotas:
        return cls(
            ReplicationQuotaManager("LeaderReplication", window_num, window_size_ms, leader_rate),
            ReplicationQuotaManager("FollowerReplication", window_num, window_size_ms, follower_rate),
        )

    def apply_topic_config(self, topic: str, overrides: dict[str, str], broker_id: int) -> None:
        """A topic's throttled-replicas configs (the whole of its overrides), for this broker."""
        for manager, key in (
            (self.leader, "leader.replication.throttled.replicas"),
            (self.follower, "follower.replication.throttled.replicas"),
        ):
            value = overrides.get(key, "")
            manager.mark_throttled(topic, throttled_partitions(value, broker_id))
