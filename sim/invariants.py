"""The invariants of a simulated run, checked after every step (issue 21; docs/guarantees.md;
TigerBeetle's ``state_checker.zig`` and ``storage_checker.zig``).

:class:`Invariants` is installed on the simulation loop (chained into ``SimEventLoop.intercept``)
and checks the world every ``every`` callbacks (the cheap checks) and whenever the schedule asks
(:meth:`Invariants.check`, at each schedule step, with the expensive ones at coarser points and
always before the run ends). The first violation stops the loop and is kept, with the schedule
step, the virtual time and the last callbacks run, in :attr:`Invariants.violation`.

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
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from client.types import TopicPartition
from sim.broker_process import ProcessState
from sim.controller_requests import NO_STALE_REQUEST, ONE_CONTROLLER_PER_EPOCH, ControllerRequestChecker
from sim.errors import SimulationError
from sim.group_invariants import GROUP_INVARIANTS
from sim.isr_lag import ISR_LAG, IsrLagChecker
from sim.log_reading import batches_below, first_difference, records_below
from sim.producer_order import out_of_send_order
from sim.reassignment_isr import REASSIGNMENT_ISR, ReassignmentIsrChecker
from sim.topic_ids import TOPIC_IDS, topic_id_problem
from zk.paths import BROKER_TOPICS_PATH, CONTROLLER_EPOCH_PATH, DELETE_TOPICS_PATH

if TYPE_CHECKING:
    from broker.log import Log
    from broker.replica.replica_manager import ReplicaManager
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


@dataclass(frozen=True)
class _ZkPartition:
    leader: int
    leader_epoch: int
    isr: frozenset[int]
    topic_czxid: int


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
        self._zk: dict[tuple[str, int], _ZkPartition] = {}
        self._zk_mzxid: dict[tuple[str, int], int] = {}
        self._zk_seen_zxid = -1
        self._zk_epochs: dict[tuple[str, int, int], int] = {}
        self._controller_epoch = -1
        self._replica_epochs: dict[tuple[int, int, TopicPartition], int] = {}
        self._requests = ControllerRequestChecker(self.enabled, self.fail)  # sim/controller_requests.py
        self._attached: dict[int, object] = {}  # broker id -> the replica manager watched
        self._attached_controllers: dict[int, object] = {}  # broker id -> the controller watched
        self._inner: Callable[[asyncio.Handle], bool] | None = None

    # -- installation ------------------------------------------------------------------------------
    def install(self) -> None:
        """Chain into the loop's interceptor (after the world's process table)."""
        loop = self.world.loop
        self._inner = loop.intercept
        loop.intercept = self._intercept

    def _intercept(self, handle: asyncio.Handle) -> bool:
        if self.violation is None:
            self._attach()
            self._countdown -= 1
            if self._countdown <= 0:
                self._countdown = self.every
                self._run(full=False)
        inner = self._inner
        return inner(handle) if inner is not None else False

    def _attach(self) -> None:
        """Watch the controller requests of each broker incarnation's replica manager, from its
        creation on (before the broker registers, so before any request can be applied)."""
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

    # -- running the checks ------------------------------------------------------------------------
    def check(self, full: bool = False) -> None:
        """Check now (the schedule's step boundary); ``full`` adds the byte comparisons."""
        if self.violation is None:
            self._attach()
            self._run(full)

    def _run(self, full: bool) -> None:
        self.checks += 1
        try:
            self._refresh_zookeeper()
            self._check_replica_epochs()
            self._check_high_watermarks()
            self._check_acked(values=full)
            if TOPIC_IDS in self.enabled and (problem := topic_id_problem(self)):  # sim/topic_ids.py
                raise InvariantViolation(TOPIC_IDS, problem)
            if full:
                self._check_identical()
                self._check_producer_order()
        except InvariantViolation as violation:
            self._record(violation)

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
        return topic in self.ledger.deleted_topics or (
            f"{DELETE_TOPICS_PATH}/{topic}" in self.world.zookeeper.tree.nodes
        )

    def _live_replica_managers(self) -> list[tuple[int, ReplicaManager]]:
        found = []
        for broker_id in sorted(self.world.brokers):
            rm = self._replica_manager(broker_id)
            if rm is not None:
                found.append((broker_id, rm))
        return found

    # -- ZooKeeper: the state znodes, their leader epochs, /controller_epoch -----------------------
    def _refresh_zookeeper(self) -> None:
        zookeeper = self.world.zookeeper
        if zookeeper.zxid == self._zk_seen_zxid:
            return
        self._zk_seen_zxid = zookeeper.zxid
        nodes = zookeeper.tree.nodes
        epoch_node = nodes.get(CONTROLLER_EPOCH_PATH)
        if epoch_node is not None and LEADER_EPOCHS in self.enabled:
            epoch = int(epoch_node.data.decode() or -1)
            if epoch < self._controller_epoch:
                raise InvariantViolation(
                    LEADER_EPOCHS, f"/controller_epoch went back from {self._controller_epoch} to {epoch}"
                )
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
                if self._zk_mzxid.get(key) == state.mzxid:
                    continue
                self._zk_mzxid[key] = state.mzxid
                self._on_state_znode(key, json.loads(state.data), topic_node.czxid)
        for key in [k for k in self._zk if k not in seen]:
            del self._zk[key]
            self._zk_mzxid.pop(key, None)

    def _on_state_znode(self, key: tuple[str, int], state: dict, topic_czxid: int) -> None:
        entry = _ZkPartition(state["leader"], state["leader_epoch"], frozenset(state["isr"]), topic_czxid)
        self._zk[key] = entry
        if LEADER_EPOCHS not in self.enabled:
            return
        epoch_key = (*key, topic_czxid)
        previous = self._zk_epochs.get(epoch_key, -1)
        if entry.leader_epoch < previous:
            raise InvariantViolation(
                LEADER_EPOCHS,
                f"the state znode of {key[0]}-{key[1]} went back from leader epoch {previous} to "
                f"{entry.leader_epoch} (leader {entry.leader}, isr {sorted(entry.isr)})",
            )
        self._zk_epochs[epoch_key] = entry.leader_epoch

    # -- the cheap checks --------------------------------------------------------------------------
    def _check_replica_epochs(self) -> None:
        if LEADER_EPOCHS not in self.enabled:
            return
        for broker_id, rm in self._live_replica_managers():
            incarnation = self.world.brokers[broker_id].incarnations
            for key_tp, partition in rm.partitions.items():
                if partition.leader_epoch < 0 or self._deleting(key_tp[0]):
                    continue  # registered by a LeaderAndIsr still creating the log: nothing applied yet
                tp = TopicPartition(*key_tp)
                key = (broker_id, incarnation, tp)
                previous = self._replica_epochs.get(key, -1)
                if partition.leader_epoch < previous:
                    raise InvariantViolation(
                        LEADER_EPOCHS,
                        f"broker {broker_id}'s replica of {tp.topic}-{tp.partition} went back from "
                        f"leader epoch {previous} to {partition.leader_epoch}",
                    )
                self._replica_epochs[key] = partition.leader_epoch

    def _check_high_watermarks(self) -> None:
        if HW_WITHIN_ISR not in self.enabled:
            return
        for broker_id, rm in self._live_replica_managers():
            for key_tp, partition in rm.partitions.items():
                if not partition.is_leader or self._deleting(key_tp[0]):
                    continue
                tp = TopicPartition(*key_tp)
                log_ = rm.get_log(tp)
                if log_ is None:
                    continue
                hw = log_.high_watermark
                zk = self._zk.get((tp.topic, tp.partition))
                listed = set(partition.maximal_isr) | (zk.isr if zk is not None else frozenset())
                for replica in sorted(listed - {broker_id}):
                    replica_log = self._log(replica, tp)
                    if replica_log is not None and replica_log.log_end_offset < hw:
                        raise InvariantViolation(
                            HW_WITHIN_ISR,
                            f"leader {broker_id} of {tp.topic}-{tp.partition} (epoch {partition.leader_epoch}) "
                            f"has HW {hw} past replica {replica}'s log end offset "
                            f"{replica_log.log_end_offset}; ISR in ZooKeeper "
                            f"{sorted(zk.isr) if zk else None}, leader's ISR {sorted(partition.isr)}, "
                            f"pending change {partition.pending_isr_change}",
                        )

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
        for (topic, partition), offsets in sorted(self.ledger.acked.items()):
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
        held = {record.offset: record.value for record in records_below(log_, log_.log_end_offset)}
        for offset, value in sorted(offsets.items()):
            if held.get(offset) != value:
                raise InvariantViolation(
                    ACKED_ON_LEADER,
                    f"{topic}-{partition} offset {offset} was acknowledged as {value!r}; leader {leader} "
                    f"holds {held.get(offset)!r}",
                )

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
            batches = [
                (b, log_.high_watermark, batches_below(log_, log_.high_watermark)) for b, log_ in replicas
            ]
            for i, (a, hw_a, batches_a) in enumerate(batches):
                for b, hw_b, batches_b in batches[i + 1 :]:
                    bound = min(hw_a, hw_b)
                    left = [x for x in batches_a if x[1] < bound]
                    right = [x for x in batches_b if x[1] < bound]
                    if left != right:
                        raise InvariantViolation(
                            REPLICAS_IDENTICAL,
                            f"brokers {a} and {b} differ below HW {bound} of {tp.topic}-{tp.partition}: "
                            f"{first_difference(left, right)}",
                        )

    def _check_producer_order(self) -> None:
        if PRODUCER_ORDER not in self.enabled:
            return
        for topic, partition in sorted(self._zk):
            found = None if self._deleting(topic) else self._current_leader_log(topic, partition)
            if found is None:
                continue
            leader, log_ = found
            records = ((r.offset, r.value) for r in records_below(log_, log_.high_watermark))
            problem = out_of_send_order(records, self.ledger)
            if problem is not None:
                raise InvariantViolation(PRODUCER_ORDER, f"{topic}-{partition} on leader {leader}: {problem}")

    def check_final(self) -> None:
        """At the end of a run, faults healed and clients settled: everything, and every
        acknowledged offset below the current leader's HW."""
        self.check(full=True)
        if self.violation is None:
            try:
                self._check_acked(values=False, below_hw=True)
            except InvariantViolation as violation:
                self._record(violation)
