"""The group coordinator finishes loading (issue 35 item 3; docs/guarantees.md "Consumer
groups"; Kafka's ``GroupMetadataManager.scheduleLoadGroupAndOffsets``: until a new coordinator
has read its ``__consumer_offsets`` partition, every group there answers
COORDINATOR_LOAD_IN_PROGRESS).

``group-load-bound``: a running broker that leads an offsets partition has loaded it within
``LOAD_BOUND_S`` virtual seconds of its running time (a pause does not count; a read that
fails is retried within a second, and a partition of a schedule holds a few hundred records). Issue 33's first
window broke it for good: a compacted partition whose cleaned batches kept the loader reading the
same batch for ever, so every group on it stayed unavailable.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sim.world import World

GROUP_LOAD_BOUND = "group-load-bound"
OFFSETS_TOPIC = "__consumer_offsets"
LOAD_BOUND_S = 5.0


class CoordinatorLoad:
    def __init__(self, world: World, fail: Callable[[str, str], None], enabled: frozenset[str]) -> None:
        self.world = world
        self.fail = fail
        self.enabled = GROUP_LOAD_BOUND in enabled
        #: (broker, incarnation, partition) -> (virtual s spent loading while running, last seen)
        self._loading: dict[tuple[int, int, int], tuple[float, float]] = {}

    def check(self) -> None:
        if not self.enabled:
            return
        now = self.world.loop.time()
        seen: dict[tuple[int, int, int], tuple[float, float]] = {}
        for broker_id in sorted(self.world.brokers):
            process = self.world.brokers[broker_id]
            if not process.running:
                continue
            apis = getattr(process.server, "group_apis", None)
            rm = getattr(process.server, "replica_manager", None)
            if apis is None or rm is None:
                continue
            for partition in sorted(apis.coordinator.manager.loading):
                state = rm.partitions.get((OFFSETS_TOPIC, partition))
                if state is None or not state.is_leader:
                    continue
                key = (broker_id, process.incarnations, partition)
                spent, last = self._loading.get(key, (0.0, now))
                spent += now - last
                seen[key] = (spent, now)
                if spent > LOAD_BOUND_S:
                    self.fail(
                        GROUP_LOAD_BOUND,
                        f"broker {broker_id} has led {OFFSETS_TOPIC}-{partition} and not loaded it for "
                        f"{spent:.1f} virtual s of running time (its groups answer "
                        f"COORDINATOR_LOAD_IN_PROGRESS)",
                    )
                    return
        self._loading = seen

    def loading(self) -> bool:
        """Whether a running leader of an offsets partition had not loaded it at the last check."""
        return bool(self._loading)
