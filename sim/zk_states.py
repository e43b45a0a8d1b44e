"""What the simulator's invariants know of ZooKeeper (sim/invariants.py): each partition's state
znode (leader, leader epoch, ISR, and the topic znode's czxid: which incarnation of the topic),
read again only when ZooKeeper's zxid moved and only for the state znodes whose mzxid moved, and
the ``leader-epochs`` checks on it: no state znode's leader epoch goes back for one incarnation
of its topic, nor does ``/controller_epoch``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from zk.paths import BROKER_TOPICS_PATH, CONTROLLER_EPOCH_PATH


@dataclass(frozen=True)
class ZkPartition:
    leader: int
    leader_epoch: int
    isr: frozenset[int]
    topic_czxid: int


class ZkStates:
    def __init__(self, check_epochs: bool) -> None:
        self.check_epochs = check_epochs
        #: (topic, partition) -> its state znode, as of the last refresh
        self.partitions: dict[tuple[str, int], ZkPartition] = {}
        self._mzxid: dict[tuple[str, int], int] = {}
        self._seen_zxid = -1
        self._epochs: dict[tuple[str, int, int], int] = {}
        self._controller_epoch = -1

    def refresh(self, zookeeper: Any) -> str | None:
        """Read what changed since the last refresh; the first epoch that went back, or None."""
        if zookeeper.zxid == self._seen_zxid:
            return None
        self._seen_zxid = zookeeper.zxid
        nodes = zookeeper.tree.nodes
        epoch_node = nodes.get(CONTROLLER_EPOCH_PATH)
        if epoch_node is not None and self.check_epochs:
            epoch = int(epoch_node.data.decode() or -1)
            if epoch < self._controller_epoch:
                return f"/controller_epoch went back from {self._controller_epoch} to {epoch}"
            self._controller_epoch = epoch
        topics = nodes.get(BROKER_TOPICS_PATH)
        seen = set()
        for topic in sorted(topics.children) if topics is not None else ():
            topic_node = nodes[f"{BROKER_TOPICS_PATH}/{topic}"]
            partitions = nodes.get(f"{BROKER_TOPICS_PATH}/{topic}/partitions")
            for name in partitions.children if partitions is not None else ():
                state = nodes.get(f"{BROKER_TOPICS_PATH}/{topic}/partitions/{name}/state")
                if state is None:
                    continue
                key = (topic, int(name))
                seen.add(key)
                if self._mzxid.get(key) == state.mzxid:
                    continue
                self._mzxid[key] = state.mzxid
                problem = self._on_state_znode(key, json.loads(state.data), topic_node.czxid)
                if problem is not None:
                    return problem
        for key in [k for k in self.partitions if k not in seen]:
            del self.partitions[key]
            self._mzxid.pop(key, None)
        return None

    def _on_state_znode(self, key: tuple[str, int], state: dict, topic_czxid: int) -> str | None:
        entry = ZkPartition(state["leader"], state["leader_epoch"], frozenset(state["isr"]), topic_czxid)
        self.partitions[key] = entry
        if not self.check_epochs:
            return None
        epoch_key = (*key, topic_czxid)
        previous = self._epochs.get(epoch_key, -1)
        if entry.leader_epoch < previous:
            return (
                f"the state znode of {key[0]}-{key[1]} went back from leader epoch {previous} to "
                f"{entry.leader_epoch} (leader {entry.leader}, isr {sorted(entry.isr)})"
            )
        self._epochs[epoch_key] = entry.leader_epoch
        return None
