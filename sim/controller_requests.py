"""The simulator's checks on controller requests as brokers receive and apply them (issue 21;
docs/guarantees.md; part of :mod:`sim.invariants`):

* ``one-controller-per-epoch``: every controller request any broker receives with a given
  controller epoch comes from the same controller;
* ``no-stale-request``: a broker never applies a LeaderAndIsr, UpdateMetadata or StopReplica of
  a controller epoch older than one it applied before (in this incarnation), nor one addressed to
  an older broker epoch (KIP-380) than its current one.

The checker wraps each replica manager's ``state_changes._stale_epoch`` (the broker's own
staleness test) to see every request, and whether the broker applied it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from broker.replica.replica_manager import ReplicaManager

ONE_CONTROLLER_PER_EPOCH = "one-controller-per-epoch"
NO_STALE_REQUEST = "no-stale-request"


class ControllerRequestChecker:
    def __init__(self, enabled: Collection[str], fail: Callable[[str, str], None]) -> None:
        self.enabled = enabled
        self.fail = fail
        self._controllers: dict[int, int] = {}  # controller epoch -> the controller that used it
        self._applied_epoch: dict[tuple[int, int], int] = {}  # (broker, incarnation) -> controller epoch

    def watch(self, broker_id: int, incarnation: int, rm: ReplicaManager) -> None:
        """Check every controller request the replica manager's handler is asked to apply."""
        handler = rm.state_changes
        original = handler._stale_epoch

        def checked(request: str, body: dict) -> Any:
            self._on_request(broker_id, request, body)
            broker_epoch = rm.broker_epoch
            refused = original(request, body)
            if refused is None:
                self._on_applied(broker_id, incarnation, request, body, broker_epoch)
            return refused

        handler._stale_epoch = checked  # type: ignore[method-assign]

    def _on_request(self, broker_id: int, request: str, body: dict) -> None:
        epoch, controller = body["controller_epoch"], body.get("controller_id")
        if controller is None or ONE_CONTROLLER_PER_EPOCH not in self.enabled:
            return
        known = self._controllers.setdefault(epoch, controller)
        if known != controller:
            self.fail(
                ONE_CONTROLLER_PER_EPOCH,
                f"broker {broker_id} got a {request} of controller epoch {epoch} from controller "
                f"{controller}; controller {known} already acted in that epoch",
            )

    def _on_applied(
        self, broker_id: int, incarnation: int, request: str, body: dict, broker_epoch: int
    ) -> None:
        if NO_STALE_REQUEST not in self.enabled:
            return
        epoch = body["controller_epoch"]
        newest = self._applied_epoch.get((broker_id, incarnation), -1)
        if epoch < newest:
            self.fail(
                NO_STALE_REQUEST,
                f"broker {broker_id} applied a {request} of controller epoch {epoch} after one of epoch {newest}",
            )
        self._applied_epoch[(broker_id, incarnation)] = max(epoch, newest)
        addressed = body.get("broker_epoch", -1)
        if addressed != -1 and addressed < broker_epoch:
            self.fail(
                NO_STALE_REQUEST,
                f"broker {broker_id} (broker epoch {broker_epoch}) applied a {request} addressed to its "
                f"older broker epoch {addressed}",
            )
