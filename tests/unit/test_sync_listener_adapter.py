"""client/sync.py's _ListenerAdapter (a synchronous, kafka-python style rebalance listener under the
asyncio consumer): ``on_partitions_lost`` reaches the listener's own callback when it has one, and
its ``on_partitions_revoked`` otherwise (Kafka's ConsumerRebalanceListener.onPartitionsLost
default). Pure logic: the adapter is called directly, as ConsumerCoordinator.onLeavePrepare and
onJoinPrepare call it."""

from __future__ import annotations

from client.sync import _ListenerAdapter
from client.types import TopicPartition

TP = TopicPartition("t", 0)


class WithLost:
    def __init__(self) -> None:
        self.calls: list[tuple[str, set[TopicPartition]]] = []

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.calls.append(("revoked", revoked))

    def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        self.calls.append(("lost", lost))


class OnlyRevoked:
    def __init__(self) -> None:
        self.calls: list[tuple[str, set[TopicPartition]]] = []

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.calls.append(("revoked", revoked))


async def test_lost_reaches_the_listeners_own_callback() -> None:
    listener = WithLost()
    await _ListenerAdapter(listener).on_partitions_lost({TP})
    assert listener.calls == [("lost", {TP})]


async def test_lost_defaults_to_the_revoke_callback() -> None:
    listener = OnlyRevoked()
    await _ListenerAdapter(listener).on_partitions_lost({TP})
    assert listener.calls == [("revoked", {TP})]


async def test_a_listener_with_neither_callback_is_skipped() -> None:
    await _ListenerAdapter(object()).on_partitions_lost({TP})
