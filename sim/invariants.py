"""The invariants of a simulated run, checked after every step (issue 21; docs/guarantees.md;
TigerBeetle's ``state_checker.zig`` and ``storage_checker.zig``).

:class:`Invariants` is installed on the simulation loop (chained into ``SimEventLoop.intercept``)
and checks the world every ``every`` callbacks (the cheap checks) and whenever the schedule asks
(:meth:`Invariants.check`, at each schedule step, with the expensive ones at coarser points and
always before the run ends). The first violation stops the loop and is kept, with the schedule
step, the virtual time and the last callbacks run, in :attr:`Invariants.violation`.

What a check costs (issue 35): the expensive ones read each replica's log incrementally, only
what it gained since the last check, with the verdicts of reading it from its start
(sim/log_cursor.py, sim/replica_checks.py); the cheap ones are one pass over fields
(sim/replica_state.py, sim/zk_states.py, sim/topic_ids.py); the watched replica managers and
controllers are looked for only while a broker's server is new or still building them.

The invariants, by name:

* ``acked-on-leader``: every acknowledged offset of a live topic is on the current leader (the
  broker the state znode names, once it has applied that leader epoch): below its log end offset
  (cheap), with the acknowledged value (expensive), and below its HW at the end of a run;
* ``replicas-identical``: any two replicas of a partition hold the same batches, byte for byte,
  below the lower of their HWs (expensive);
* ``hw-within-isr``: a leader's HW never passes the log end offset of a replica listed in the ISR
  of the state znode or in the leader's maximal ISR (its ISR plus a pending ISR change whose
  outcome is unknown: KIP-497's ``maximalIsr``, ``Partition.pending_isr_change``);
* ``leader-epochs``: the leader epoch of each partition never goes backwards, in each replica's
  ``Partition`` (per process incarnation) and in ZooKeeper's state znode; neither does
  ``/controller_epoch``;
* ``one-controller-per-epoch`` (sim/controller_requests.py): every controller request any broker receives with a given
  controller epoch comes from the same controller;
* ``producer-order``: below the current leader's HW, each producer's records stand in the
  order the producer took them (an idempotent producer's guarantee, KIP-98), whether their
  sends succeeded or failed (a failed record may be in the log, but not after a later one);
* ``no-stale-request``: a broker never applies a LeaderAndIsr, UpdateMetadata or StopReplica of
  a controller epoch older than one it applied before (in this incarnation), nor one addressed to
  an older broker epoch (KIP-380) than its current one;
* ``isr-lag``: no ISR shrink drops a follower that fetched the leader's LEO within
  ``replica.lag.time.max.ms`` (sim/isr_lag.py);
* ``reassignment-isr``: a reassignment completes only with every target replica in the ISR of
  the state znode it was decided on (sim/reassignment_isr.py);
* ``topic-ids``: a replica serving a partition holds a log of the topic's current incarnation
  (its partition.metadata names the topic znode's id, KIP-516; sim/topic_ids.py).

Liveness (``liveness``) and spinning tasks (``no-spin``, the loop's own watchdog) are judged by
the sweep (sim/sweep.py) and the loop; their names are listed here with the rest. Replicas of
crashed brokers are not checked until they run again (their files are closed); paused ones are.
The replicas of a topic whose deletion was asked for are not checked any more (its logs may be
deleted, or created again empty by a LeaderAndIsr of the deletion's controller, until it is gone).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from client.types import TopicPartition
from sim.broker_process import ProcessState
from sim.compacted_replicas import compacted_difference
from sim.controller_requests import NO_STALE_REQUEST, ONE_CONTROLLER_PER_EPOCH, ControllerRequestChecker
from sim.errors import SimulationError
from sim.group_invariants import GROUP_INVARIANTS
from sim.idempotence import IDEMPOTENCE_INVARIANTS
from sim.isr_lag import ISR_LAG, IsrLagChecker
from sim.power_loss import PowerLossExemption
from sim.reassignment_isr import REASSIGNMENT_ISR, ReassignmentIsrChecker
from sim.replica_checks import ReplicaChecks
from sim.replica_state import high_watermark_problem, replica_epoch_problem
from sim.state_writes import STATE_WRITE_INVARIANTS
from sim.topic_ids import TOPIC_IDS, TopicIds
from sim.zk_states import ZkPartition, ZkStates
from zk.paths import DELETE_TOPICS_PATH

if TYPE_CHECKING:
    from broker.log import Log
    from broker.replica.replica_manager import ReplicaManager
    from sim.broker_process import BrokerProcess
    from sim.workload import Ledger
    from sim.world import World

ACKED_ON_LEADER = "acked-on-leader"
REPLICAS_IDENTICAL = "replicas-identical"
HW_WITHIN_ISR = "hw-within-isr"
LEADER_EPOCHS = "leader-epochs"
PRODUCER_ORDER = "producer-order"
LIVENESS = "liveness"
NO_SPIN = "no-spin"
#: Every invariant, in the order they are checked and reported.
ALL_INVARIANTS = (
    ACKED_ON_LEADER,
    REPLICAS_IDENTICAL,
    HW_WITHIN_ISR,
    LEADER_EPOCHS,
    ONE_CONTROLLER_PER_EPOCH,
    NO_STALE_REQUEST,
    PRODUCER_ORDER,
    ISR_LAG,
    REASSIGNMENT_ISR,
    TOPIC_IDS,
    *STATE_WRITE_INVARIANTS,
    *IDEMPOTENCE_INVARIANTS,
    LIVENESS,
    NO_SPIN,
    *GROUP_INVARIANTS,
)


class InvariantViolation(SimulationError):
    """An invariant failed: which, what was seen, and where in the schedule."""

    def __init__(self, invariant: str, detail: str, step: int = -1, virtual_s: float = 0.0) -> None:
        super().__init__(
            f"invariant {invariant} violated at step {step} (virtual {virtual_s:.6f} s): {detail}"
        )
        self.invariant = invariant
        self.detail = detail
        self.step = step
        self.virtual_s = virtual_s
        self.recent: tuple[str, ...] = ()  # the last callbacks run before it was seen


class Invariants:
    """Checks a :class:`sim.world.World` and its clients' :class:`sim.workload.Ledger`."""

    def __init__(
        self, world: World, ledger: Ledger, *, enabled: Iterable[str] = ALL_INVARIANTS, every: int = 16
    ) -> None:
        self.world = world
        self.ledger = ledger
        self.enabled = frozenset(enabled)
        unknown = self.enabled.difference(ALL_INVARIANTS)
        if unknown:
            raise ValueError(f"unknown invariants {sorted(unknown)}")
        self.every = every
        self.step = 0  # the schedule step being run (set by the sweep)
        self.checks = 0
        self.violation: InvariantViolation | None = None
        self._countdown = every
        self._zk_states = ZkStates(LEADER_EPOCHS in self.enabled)  # sim/zk_states.py
        self._zk: dict[tuple[str, int], ZkPartition] = self._zk_states.partitions
        self._replica_epochs: dict[tuple[int, int, TopicPartition], int] = {}
        self._power_loss = PowerLossExemption(world)  # sim/power_loss.py
        self._requests = ControllerRequestChecker(self.enabled, self.fail)  # sim/controller_requests.py
        self._attached: dict[int, object] = {}  # broker id -> the replica manager watched
        self._attached_controllers: dict[int, object] = {}  # broker id -> the controller watched
        #: (process, server) of every broker whose server has nothing left to watch (it has its
        #: replica manager and controller, or there is none): _attach runs when one changes
        self._settled: list[tuple[BrokerProcess, object]] = []
        self._inner: Callable[[asyncio.Handle], bool] | None = None
        self._replicas = ReplicaChecks()  # the full checks' incremental reads (sim/replica_checks.py)
        self._topic_ids = TopicIds()  # sim/topic_ids.py
        #: while a check runs: the live replica managers, and which topics are being deleted
        self._live: dict[int, ReplicaManager] | None = None
        self._deleting_now: dict[str, bool] | None = None

    # -- installation ------------------------------------------------------------------------------
    def install(self) -> None:
        """Chain into the loop's interceptor (after the world's process table)."""
        loop = self.world.loop
        self._inner = loop.intercept
        loop.intercept = self._intercept

    def _intercept(self, handle: asyncio.Handle) -> bool:
        if self.violation is None:
            if self._unsettled():
                self._attach()
            self._countdown -= 1
            if self._countdown <= 0:
                self._countdown = self.every
                with self.world.observing():
                    self._run(full=False)
        inner = self._inner
        return inner(handle) if inner is not None else False

    def _unsettled(self) -> bool:
        """A broker has a new server, or one whose replica manager or controller is yet to come."""
        settled = self._settled
        if len(settled) != len(self.world.brokers):
            return True
        for process, server in settled:  # noqa: SIM110 - before every callback: no generator
            if process.server is not server:
                return True
        return False

    def _attach(self) -> None:
        """Watch the controller requests of each broker incarnation's replica manager, from its
        creation on (before the broker registers, so before any request can be applied): before
        every callback while a server is new or still building them (sim/broker_process.py
        assigns ``server`` before its start-up runs)."""
        settled = []
        for broker_id, process in self.world.brokers.items():
            rm = getattr(process.server, "replica_manager", None)
            if rm is not None and self._attached.get(broker_id) is not rm:
                self._attached[broker_id] = rm
                incarnation = process.incarnations
                self._requests.watch(broker_id, incarnation, rm)
                if ISR_LAG in self.enabled:  # sim/isr_lag.py
                    IsrLagChecker(broker_id, rm, self.fail).install()
            controller = getattr(process.server, "controller", None)
            if controller is not None and self._attached_controllers.get(broker_id) is not controller:
                self._attached_controllers[broker_id] = controller
                if REASSIGNMENT_ISR in self.enabled:  # sim/reassignment_isr.py
                    ReassignmentIsrChecker(controller, self.world.zookeeper, self.fail).install()
            if process.server is None or (rm is not None and controller is not None):
                settled.append((process, process.server))
        self._settled = settled

    # -- running the checks ------------------------------------------------------------------------
    def check(self, full: bool = False) -> None:
        """Check now (the schedule's step boundary); ``full`` adds the byte comparisons."""
        if self.violation is None:
            if self._unsettled():
                self._attach()
            with self.world.observing():
                self._run(full)

    def _run(self, full: bool) -> None:
        self.checks += 1
        self._live = dict(self._find_live_replica_managers())
        self._deleting_now = {}
        try:
            if (problem := self._zk_states.refresh(self.world.zookeeper)) is not None:
                raise InvariantViolation(LEADER_EPOCHS, problem)
            self._check_replica_epochs()
            self._check_high_watermarks()
            if full:
                self._replicas.begin_check()
            self._check_acked(values=full)
            if TOPIC_IDS in self.enabled and (problem := self._topic_ids.problem(self)):  # sim/topic_ids.py
                raise InvariantViolation(TOPIC_IDS, problem)
            if full:
                self._check_identical()
                self._check_producer_order()
        except InvariantViolation as violation:
            self._record(violation)
        finally:
            self._live = self._deleting_now = None

    def fail(self, invariant: str, detail: str) -> None:
        """Record a violation seen outside these checks (the sweep's liveness judgement)."""
        self._record(InvariantViolation(invariant, detail))

    def _record(self, violation: InvariantViolation) -> None:
        if self.violation is not None:
            return
        violation.step = self.step
        violation.virtual_s = self.world.loop.elapsed_ns / 1e9
        violation.args = (
            f"invariant {violation.invariant} violated at step {violation.step} "
            f"(virtual {violation.virtual_s:.6f} s): {violation.detail}",
        )
        violation.recent = tuple(self.world.loop.recent())
        self.violation = violation
        self.world.loop.stop()  # the run ends after this iteration: the first violation stands

    def raise_if_violated(self) -> None:
        if self.violation is not None:
            raise self.violation

    # -- the replicas as the checks see them -------------------------------------------------------
    def _replica_manager(self, broker_id: int) -> ReplicaManager | None:
        live = self._live
        if live is not None:  # a check is running: nothing changes while it runs
            return live.get(broker_id)
        process = self.world.brokers.get(broker_id)
        if process is None or process.state is ProcessState.DEAD:
            return None
        return getattr(process.server, "replica_manager", None)

    def _log(self, broker_id: int, tp: TopicPartition) -> Log | None:
        rm = self._replica_manager(broker_id)
        if rm is None or tp in rm.offline_partitions:
            return None
        return rm.get_log(tp)

    def _deleting(self, topic: str) -> bool:
        """The topic's deletion was asked for (by the workload, or /admin/delete_topics lists
        it): its replicas may be stopped, deleted or created again empty until it is gone, and
        its records are no longer anyone's (Kafka's TopicDeletionManager)."""
        known = self._deleting_now
        if known is not None:  # a check is running: its answers hold until it ends
            found = known.get(topic)
            if found is None:
                found = known[topic] = self._deleting_asked(topic)
            return found
        return self._deleting_asked(topic)

    def _deleting_asked(self, topic: str) -> bool:
        return topic in self.ledger.deleted_topics or (
            f"{DELETE_TOPICS_PATH}/{topic}" in self.world.zookeeper.tree.nodes
        )

    def _live_replica_managers(self) -> list[tuple[int, ReplicaManager]]:
        live = self._live
        if live is not None:
            return list(live.items())
        return self._find_live_replica_managers()

    def _find_live_replica_managers(self) -> list[tuple[int, ReplicaManager]]:
        found = []
        for broker_id in sorted(self.world.brokers):
            rm = self._replica_manager(broker_id)
            if rm is not None:
                found.append((broker_id, rm))
        return found

    # -- the cheap checks --------------------------------------------------------------------------
    def _check_replica_epochs(self) -> None:
        if LEADER_EPOCHS not in self.enabled:
            return
        brokers = self.world.brokers
        problem = replica_epoch_problem(  # sim/replica_state.py
            self._live_now(), lambda b: brokers[b].incarnations, self._replica_epochs, self._deleting
        )
        if problem is not None:
            raise InvariantViolation(LEADER_EPOCHS, problem)

    def _check_high_watermarks(self) -> None:
        if HW_WITHIN_ISR not in self.enabled:
            return
        problem = high_watermark_problem(  # sim/replica_state.py; sim/power_loss.py
            self._live_now(), self._zk, self._deleting, self._power_loss.exempt
        )
        if problem is not None:
            raise InvariantViolation(HW_WITHIN_ISR, problem)

    def _live_now(self) -> dict[int, ReplicaManager]:
        return self._live if self._live is not None else dict(self._find_live_replica_managers())

    def _current_leader_log(self, topic: str, partition: int) -> tuple[int, Log] | None:
        """The log of the leader ZooKeeper names, once that broker has applied the leader epoch."""
        zk = self._zk.get((topic, partition))
        if zk is None or zk.leader < 0:
            return None
        rm = self._replica_manager(zk.leader)
        tp = TopicPartition(topic, partition)
        state = rm.partitions.get(tp) if rm is not None else None
        if state is None or not state.is_leader or state.leader_epoch != zk.leader_epoch:
            return None
        log_ = self._log(zk.leader, tp)
        return None if log_ is None else (zk.leader, log_)

    def _check_acked(self, values: bool, below_hw: bool = False) -> None:
        if ACKED_ON_LEADER not in self.enabled:
            return
        for conflict, earlier in self.ledger.conflicts:
            raise InvariantViolation(
                ACKED_ON_LEADER,
                f"{conflict.topic}-{conflict.partition} offset {conflict.offset} acknowledged twice: "
                f"{earlier!r} and {conflict.value!r}",
            )
        acked = self.ledger.acked
        # without values, only the lagging partitions need visiting in order (nothing is read)
        keys = sorted(acked) if values else sorted(k for k in acked if self._lags(k, acked[k], below_hw))
        for topic, partition in keys:
            offsets = acked[(topic, partition)]
            if not offsets:
                continue
            found = self._current_leader_log(topic, partition)
            if found is None:
                continue
            leader, log_ = found
            last = self.ledger.last_acked[(topic, partition)]
            end = log_.high_watermark if below_hw else log_.log_end_offset
            if end <= last:
                raise InvariantViolation(
                    ACKED_ON_LEADER,
                    f"offset {last} of {topic}-{partition} was acknowledged, but leader {leader}'s "
                    f"{'HW' if below_hw else 'log end offset'} is {end} "
                    f"({self._leader_view(leader, topic, partition, log_)})",
                )
            if values:
                self._check_values(topic, partition, leader, log_, offsets)

    def _lags(self, key: tuple[str, int], offsets: dict[int, bytes], below_hw: bool) -> bool:
        """The current leader's log end offset (or HW) is not past the last acknowledged offset."""
        found = self._current_leader_log(*key) if offsets else None
        if found is None:
            return False
        end = found[1].high_watermark if below_hw else found[1].log_end_offset
        return end <= self.ledger.last_acked[key]

    def _leader_view(self, leader: int, topic: str, partition: int, log_: Log) -> str:
        """What the leader knows of the partition, for a failure's message."""
        rm = self._replica_manager(leader)
        state = rm.partitions.get(TopicPartition(topic, partition)) if rm is not None else None
        if state is None:
            return f"LEO {log_.log_end_offset}"
        followers = ", ".join(
            f"{r.broker_id}: LEO {r.log_end_offset}"
            for r in sorted(state.remote_replicas.values(), key=lambda r: r.broker_id)
        )
        return (
            f"LEO {log_.log_end_offset}, leader epoch {state.leader_epoch}, ISR {sorted(state.isr)}, "
            f"followers as the leader saw them {{{followers}}}"
        )

    def _check_values(
        self, topic: str, partition: int, leader: int, log_: Log, offsets: dict[int, bytes]
    ) -> None:
        problem = self._replicas.values_problem((topic, partition), leader, log_, offsets)
        if problem is not None:
            raise InvariantViolation(ACKED_ON_LEADER, problem)

    # -- the expensive check -----------------------------------------------------------------------
    def _check_identical(self) -> None:
        if REPLICAS_IDENTICAL not in self.enabled:
            return
        hosted: dict[TopicPartition, list[tuple[int, Log]]] = {}
        for broker_id, rm in self._live_replica_managers():
            for key_tp in sorted(rm.partitions):
                if self._deleting(key_tp[0]):
                    continue
                tp = TopicPartition(*key_tp)
                log_ = self._log(broker_id, tp)
                if log_ is not None:
                    hosted.setdefault(tp, []).append((broker_id, log_))
        for tp, replicas in sorted(hosted.items()):
            if "compact" in replicas[0][1].config.cleanup_policy:  # sim/compacted_replicas.py
                if (problem := compacted_difference(tp, replicas)) is not None:
                    raise InvariantViolation(REPLICAS_IDENTICAL, problem)
                continue
            problem = self._replicas.identical_problem(tp, replicas)  # sim/replica_checks.py
            if problem is not None:
                raise InvariantViolation(REPLICAS_IDENTICAL, problem)

    def _check_producer_order(self) -> None:
        if PRODUCER_ORDER not in self.enabled:
            return
        for topic, partition in sorted(self._zk):
            found = None if self._deleting(topic) else self._current_leader_log(topic, partition)
            if found is None:
                continue
            leader, log_ = found
            problem = self._replicas.order_problem((topic, partition), leader, log_, self.ledger)
            if problem is not None:
                raise InvariantViolation(PRODUCER_ORDER, f"{topic}-{partition} on leader {leader}: {problem}")

    def current_leaders(self) -> list[tuple[str, int, int, Log]]:
        """(topic, topic znode czxid, partition, log) of the current leader of every partition of
        a live workload topic (for the checks of other modules: sim/idempotence.py)."""
        found = []
        for (topic, partition), zk in sorted(self._zk.items()):
            if topic.startswith("__") or self._deleting(topic):
                continue
            leader = self._current_leader_log(topic, partition)
            if leader is not None:
                found.append((topic, zk.topic_czxid, partition, leader[1]))
        return found

    def check_final(self) -> None:
        """At the end of a run, faults healed and clients settled: everything, and every
        acknowledged offset below the current leader's HW."""
        self.check(full=True)
        if self.violation is None:
            try:
                with self.world.observing():
                    self._check_acked(values=False, below_hw=True)
            except InvariantViolation as violation:
                self._record(violation)
