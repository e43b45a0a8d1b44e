"""Callbacks a group member runs around a rebalance (Kafka's ConsumerRebalanceListener, aiokafka's
abc.ConsumerRebalanceListener; docs/design.md "Consumer groups").

``on_partitions_revoked`` runs before the member rejoins, after its last commit of them (with
auto commit): the place to commit by hand or flush state. ``on_partitions_assigned`` runs once
the new generation's assignment is known and the positions are set from the committed offsets.
"""

from __future__ import annotations

from client.types import TopicPartition


class ConsumerRebalanceListener:
    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        """Called with the partitions given up, before joining the next generation."""

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        """Called with the partitions of the new generation."""
