"""What a power loss permits the ``hw-within-isr`` invariant to see (docs/guarantees.md "Process
crash, power loss and running out of resources"; Kafka's trade: acknowledgement is replication,
not fsync).

A broker whose machine lost power restarts with only what it fsynced: its replicas may stand
below their leader's HW while ZooKeeper's ISR still lists them, until the controller sees the
bounce (a new broker epoch) and takes them out, or until they fetch back up. Such a replica is
exempt from ``hw-within-isr`` for that incarnation until it has caught up to the HW once; a
process crash loses nothing written, so a crashed broker's replicas get no exemption.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from client.types import TopicPartition

if TYPE_CHECKING:
    from broker.log import Log
    from sim.world import World


class PowerLossExemption:
    def __init__(self, world: World) -> None:
        self.world = world
        #: (broker, incarnation, partition) of replicas that have caught up since the power loss
        self._caught_up: set[tuple[int, int, TopicPartition]] = set()

    def exempt(self, broker_id: int, tp: TopicPartition, log_: Log, hw: int) -> bool:
        """True while this replica, of an incarnation started after a power loss, has not yet
        reached the leader's HW."""
        process = self.world.brokers[broker_id]
        key = (broker_id, process.incarnations, tp)
        if process.incarnations not in process.after_power_loss or key in self._caught_up:
            return False
        if log_.log_end_offset >= hw:
            self._caught_up.add(key)
            return False
        return True
