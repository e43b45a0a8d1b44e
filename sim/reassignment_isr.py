"""The reassignment invariant of a simulated run (``reassignment-isr``; docs/guarantees.md
"Reassignment"; Kafka's KafkaController.isReassignmentComplete):

* ``reassignment-isr``: a partition reassignment completes only with every target replica in
  the ISR of the state znode, as ZooKeeper held it when the old replicas were taken out of it
  (step 8's conditional write, or the read that found nothing to take out). A move completed
  from a stale ISR (the controller's cache, which a leader's shrink outdates until its
  /isr_change_notification arrives) leaves fewer in-sync copies than the target has. A move that
  adds and removes no replica (a reordering, or the assignment as it is) copies nothing and
  takes no copy away: Kafka completes it at once, whatever the ISR (its ReplicaAssignment is not
  isBeingReassigned), so the check is not for it.

:class:`ReassignmentIsrChecker` watches each controller's state-change log (its
``reassignment_completed`` decisions, which name the target, the ISR the completion was decided
on and that state's zkVersion) and checks the claim against ZooKeeper itself: while the state
znode is still at that version, its ISR must be the one the controller names (a leader may have
written it since: then only the claim is checked).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from zk.paths import partition_state_path

if TYPE_CHECKING:
    from sim.zookeeper import ZooKeeperServer

REASSIGNMENT_ISR = "reassignment-isr"


class ReassignmentIsrChecker:
    """Checks one controller's completed reassignments (one broker incarnation's controller)."""

    def __init__(self, controller: Any, zookeeper: ZooKeeperServer, fail: Callable[[str, str], None]) -> None:
        self.controller = controller
        self.zookeeper = zookeeper
        self.fail = fail
        self.completed = 0

    def install(self) -> None:
        recorder = self.controller.record
        sink = recorder.sink

        def observed(record: dict) -> None:
            if record.get("decision") == "reassignment_completed":
                self._on_completed(record)
            sink(record)

        recorder.sink = observed

    def _on_completed(self, record: dict) -> None:
        self.completed += 1
        if "added" in record and not record["added"] and not record["removed"]:
            return  # a reordering: complete at once (see the module doc)
        topic, partition = record["topic"], record["partition"]
        target, isr = list(record["replicas"]), list(record["isr"])
        missing = [r for r in target if r not in isr]
        if missing:
            self.fail(
                REASSIGNMENT_ISR,
                f"controller {record['controller_id']} completed the reassignment of {topic}-{partition} "
                f"to {target} with ISR {isr}: target replicas {missing} were not in sync",
            )
            return
        node = self.zookeeper.tree.nodes.get(partition_state_path(topic, partition))
        if node is None or node.version != record.get("zk_version"):
            return  # gone, or written since (a leader's ISR change): the claim alone is checked
        held = sorted(json.loads(node.data)["isr"])
        if held != sorted(isr):
            self.fail(
                REASSIGNMENT_ISR,
                f"controller {record['controller_id']} completed the reassignment of {topic}-{partition} "
                f"with ISR {isr} at zkVersion {node.version}, but the state znode holds ISR {held}",
            )
