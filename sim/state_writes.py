"""Checks of every partition-state write that lands in the simulated ZooKeeper (issue 35 item 3;
docs/guarantees.md "Controller"; Kafka's ZooKeeper-era controller: ``KafkaZkClient.updateLeaderAndIsr``
writes each state znode in a multi guarded by ``/controller_epoch``'s version, KIP-4's zombie fencing).

* ``leader-epoch-bump``: a write that changes a partition's leader (to another broker or to none)
  raises its leader epoch; followers and clients tell leaderships apart by it alone (KIP-101,
  KIP-320), so a new leader under an old epoch lets a follower keep a divergent log;
* ``controller-epoch-fence``: a write that elects (changes the leader or the leader epoch) carries
  the controller epoch ``/controller_epoch`` holds when it lands. Only a controller elects; a write
  from a controller that was deposed meanwhile (its session expired, or ``/controller`` deleted
  while its event ran: sim/zombie_controller.py) must fail its epoch check. A leader's own ISR
  change keeps the leader and its epoch and may carry an older controller epoch (the one of the
  LeaderAndIsr it follows), which Kafka allows.

:class:`StateWrites` observes the server's landed writes (``ZooKeeperServer.write_observers``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING

from zk.paths import CONTROLLER_EPOCH_PATH

if TYPE_CHECKING:
    from sim.zookeeper import ZooKeeperServer

LEADER_EPOCH_BUMP = "leader-epoch-bump"
CONTROLLER_EPOCH_FENCE = "controller-epoch-fence"
STATE_WRITE_INVARIANTS = (LEADER_EPOCH_BUMP, CONTROLLER_EPOCH_FENCE)


class StateWrites:
    def __init__(
        self, zookeeper: ZooKeeperServer, fail: Callable[[str, str], None], enabled: frozenset[str]
    ) -> None:
        self.zookeeper = zookeeper
        self.fail = fail
        self.bump = LEADER_EPOCH_BUMP in enabled
        self.fence = CONTROLLER_EPOCH_FENCE in enabled
        self.elections = 0  # landed writes that elected

    def install(self) -> None:
        if self.bump or self.fence:
            self.zookeeper.write_observers.append(self._observe)

    def _observe(self, session: int, path: str, before: bytes | None, after: bytes) -> None:
        if not path.endswith("/state") or "/partitions/" not in path:
            return
        try:
            new = json.loads(after)
            old = json.loads(before) if before is not None else None
        except ValueError:
            return
        name = "-".join(path.split("/")[3:6:2])  # /brokers/topics/<t>/partitions/<p>/state
        changed = old is not None and new["leader"] != old["leader"]
        if changed and self.bump and new["leader_epoch"] <= old["leader_epoch"]:
            self.fail(
                LEADER_EPOCH_BUMP,
                f"{name}'s leader changed from {old['leader']} to {new['leader']} under leader epoch "
                f"{new['leader_epoch']} (it was {old['leader_epoch']})",
            )
            return
        elects = old is None or new["leader"] != old["leader"] or new["leader_epoch"] != old["leader_epoch"]
        if not elects:
            return
        self.elections += 1
        node = self.zookeeper.tree.nodes.get(CONTROLLER_EPOCH_PATH)
        if node is None or not self.fence:
            return
        current = int(node.data.decode() or -1)
        if new.get("controller_epoch", -1) < current:
            self.fail(
                CONTROLLER_EPOCH_FENCE,
                f"session {session:#x} wrote {name}'s state (leader {new['leader']}, leader epoch "
                f"{new['leader_epoch']}, ISR {new['isr']}) with controller epoch {new.get('controller_epoch')} "
                f"while /controller_epoch is {current}",
            )
