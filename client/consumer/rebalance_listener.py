"""Callbacks a group member runs around a rebalance (Kafka's ConsumerRebalanceListener and
ConsumerRebalanceListenerInvoker, aiokafka's abc.ConsumerRebalanceListener; docs/design.md
"Consumer groups").

Called from the member's join (Kafka's ConsumerCoordinator.onJoinPrepare and onJoinComplete),
always while the partitions they name are still assigned:

* ``on_partitions_revoked`` runs before the member rejoins (the eager protocol gives up every
  partition), after its last auto commit of them and before the assignment is cleared: the
  place to commit by hand (``commit()`` commits their positions, ``position()`` answers) or
  flush state.
* ``on_partitions_lost`` runs instead when the member's generation was reset (it was fenced:
  UNKNOWN_MEMBER_ID or ILLEGAL_GENERATION), before the assignment is cleared: the partitions may
  belong to another member already, so a commit of them is refused (CommitFailedError).
  By default it calls ``on_partitions_revoked``, as Kafka's does.
* ``on_partitions_assigned`` runs once the new generation's assignment is known and the positions
  are set from the committed offsets.

A listener need not subclass :class:`ConsumerRebalanceListener`: the invokers below fall back to
``on_partitions_revoked`` for one without ``on_partitions_lost``.
"""

from __future__ import annotations

from typing import Any

from client.types import TopicPartition


class ConsumerRebalanceListener:
    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        """Called with the partitions given up, before joining the next generation."""

    async def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        """Called with the partitions of a generation this member no longer belongs to."""
        await self.on_partitions_revoked(lost)

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        """Called with the partitions of the new generation."""


async def invoke_partitions_revoked(listener: Any, revoked: set[TopicPartition]) -> None:
    if listener is not None:
        await listener.on_partitions_revoked(set(revoked))


async def invoke_partitions_lost(listener: Any, lost: set[TopicPartition]) -> None:
    if listener is None:
        return
    callback = getattr(listener, "on_partitions_lost", None) or listener.on_partitions_revoked
    await callback(set(lost))


async def invoke_partitions_assigned(listener: Any, assigned: set[TopicPartition]) -> None:
    if listener is not None:
        await listener.on_partitions_assigned(set(assigned))
