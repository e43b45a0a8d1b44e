"""The zombie controller, an aimed fault (issue 35 item 2; docs/design.md "Simulation"; Kafka's
ZooKeeper-era controller fencing, KIP-4 and the ``/controller_epoch`` version check of every
controller write).

A deposed controller that still runs an event keeps writing partition states and sending
LeaderAndIsr: only the controller epoch stops it. Drawn faults never make one (0 of 246 state
writes came from a deposed controller: its session expiry stops it first), so this fault aims:
it waits for the controller's next state-znode write (a ZooKeeper rule that only observes),
and right after that write lands it

* deletes ``/controller`` as an operator would (``zkCli.sh delete /controller``, Kafka's
  documented way to move the controller): another broker is elected under the next epoch while
  the old one is still inside its event;
* maybe holds what ZooKeeper sends the old controller (answers and the watch event of the
  deletion, in order) for up to two seconds, so the old controller goes on with the events it
  has queued, each write of them going up at once under its old epoch;
* maybe pauses the old controller briefly (well within its session), so the new one is in
  place before the old one's next write goes out;
* maybe stalls the old controller's connections to the other brokers, so its LeaderAndIsr and
  UpdateMetadata requests arrive after the new controller's (the brokers must refuse them:
  ``no-stale-request``).

The old controller's next election write must then fail its epoch check
(``controller-epoch-fence``, sim/state_writes.py).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from zk.bridge import SetDataOp
from zk.paths import CONTROLLER_PATH

if TYPE_CHECKING:
    from sim.world import World


class FaultInjector(Protocol):
    """What the fault needs of sim/faults.py's injector (which imports this module)."""

    world: World
    rng: random.Random

    def note(self, event: str) -> None: ...

    def pause_for(self, broker: int, seconds: float) -> None: ...


def _writes_state(request: Any) -> bool:
    return request.kind == "multi" and any(
        isinstance(op, SetDataOp) and op.path.endswith("/state") for op in request.ops
    )


def arm(injector: FaultInjector, until: float) -> tuple[int, Callable[[], None]] | None:
    """Place the trigger on the controller's session; (the controller, the rule's removal)."""
    world = injector.world
    controller = world.controller_id()
    if controller is None or not world.brokers[controller].running:
        return None
    client = world.brokers[controller].zk_client
    client_id = getattr(client, "client_id", None)
    if not client_id:
        return None
    session = client_id[0]
    rng = injector.rng
    pause_s = rng.uniform(0.05, 1.5) if rng.random() < 0.7 else 0.0
    stall_s = rng.uniform(0.5, 3.0) if rng.random() < 0.5 else 0.0
    hold_s = rng.uniform(0.3, 2.0) if rng.random() < 0.7 else 0.0
    zookeeper = world.zookeeper

    def fired(_session: int, request: Any) -> None:
        if hold_s:
            zookeeper.hold_answers(session, hold_s)
        zookeeper.admin_delete(CONTROLLER_PATH)
        injector.note(
            f"zombie controller: broker {controller}'s state write {request.ops[-1].path} landed; "
            f"/controller deleted; its ZooKeeper answers held {hold_s:.3f} s"
        )
        if pause_s:
            injector.pause_for(controller, pause_s)
        if stall_s:
            _stall_to_brokers(injector, controller, stall_s)

    rule = zookeeper.inject(
        "observe",
        "after",
        kind="multi",
        session=session,
        condition=lambda _, r: _writes_state(r),
        on_fire=fired,
    )
    injector.note(f"zombie controller: armed on broker {controller}'s next state write")

    def forget() -> None:
        if rule in zookeeper.rules:
            zookeeper.rules.remove(rule)

    return controller, forget


def _stall_to_brokers(injector: FaultInjector, controller: int, seconds: float) -> None:
    network = injector.world.network
    node = f"broker-{controller}"
    flows = [
        c
        for c in network.connections
        if c.client.node == node and c.server.node.startswith("broker-") and not c.client.closed
    ]
    for connection in flows:
        network.stall(connection, seconds)
    injector.note(
        f"zombie controller: broker {controller}'s {len(flows)} connections to brokers held {seconds:.3f} s"
    )
