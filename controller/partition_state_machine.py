"""The partition state machine (Kafka's PartitionStateMachine; docs/architecture.md "The control
path, file by file").

States: NonExistent -> New -> Online <-> Offline (-> NonExistent when a topic is deleted).

* New -> Online initialises a partition (Kafka's initializeLeaderAndIsrForPartitions): the leader
  is the first live replica in assignment order, leader epoch 0, the ISR every live assigned
  replica; the state znode is *created* in a fenced multi-op.
* Offline/Online -> Online elects a leader with one of Kafka's PartitionLeaderElectionAlgorithms
  (:mod:`controller.partition_leader_election`): re-read the state znode, decide, write conditionally on its
  zkVersion in a fenced multi-op, and on BADVERSION read again and decide again (Kafka's
  electLeaderForPartitions retries the partitions whose write failed).
* A write whose outcome is unknown (it landed, its answer was lost, and the bridge's resend
  answered BADVERSION or NODEEXISTS) is resolved by reading the znode: when it holds this
  controller's write, the write counts as done and its requests go out, as if the answer had
  arrived (:func:`zk.client.resolve_leader_and_isr_write`; docs/design.md "The ZooKeeper client
  layer").

Whatever is decided is put into the request batch: LeaderAndIsr for the partition's live
replicas, UpdateMetadata for every live broker. The event handler sends the batch.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from enum import Enum

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from client.types import TopicPartition
from controller import partition_leader_election as leader_election
from controller import state_writes
from controller.channel import ControllerBrokerRequestBatch
from controller.context import ControllerContext, StateChangeRecorder
from controller.partition_leader_election import ElectionOutcome
from zk.batch import get_partition_states, windowed
from zk.bridge import CreateOp, SetDataOp, ZkBridge
from zk.client import fenced_multi, get_topic_config, resolve_leader_and_isr_write
from zk.data import NO_LEADER, LeaderAndIsr, LeaderIsrAndControllerEpoch, encode_partition_state
from zk.paths import partition_path, partition_state_path, topic_partitions_path

log = logging.getLogger(__name__)

MAX_WRITE_ATTEMPTS = 10
UNCLEAN_CONFIG = "unclean.leader.election.enable"


class PartitionState(Enum):
    NON_EXISTENT = "NonExistentPartition"
    NEW = "NewPartition"
    ONLINE = "OnlinePartition"
    OFFLINE = "OfflinePartition"


VALID_PREVIOUS_STATES: dict[PartitionState, frozenset[PartitionState]] = {
    PartitionState.NEW: frozenset({PartitionState.NON_EXISTENT}),
    PartitionState.ONLINE: frozenset({PartitionState.NEW, PartitionState.ONLINE, PartitionState.OFFLINE}),
    PartitionState.OFFLINE: frozenset({PartitionState.NEW, PartitionState.ONLINE, PartitionState.OFFLINE}),
    PartitionState.NON_EXISTENT: frozenset({PartitionState.OFFLINE}),
}


class ElectionStrategy(Enum):
    OFFLINE = "offline"
    REASSIGNMENT = "reassignment"
    PREFERRED = "preferred"
    UNCLEAN = "unclean"  # ElectLeaders' unclean election: OFFLINE with unclean always allowed
    CONTROLLED_SHUTDOWN = "controlled_shutdown"


Compute = Callable[[TopicPartition, LeaderIsrAndControllerEpoch], ElectionOutcome]


class PartitionStateMachine:
    def __init__(
        self,
        context: ControllerContext,
        zk: ZkBridge,
        batch: ControllerBrokerRequestBatch,
        record: StateChangeRecorder,
        unclean_leader_election_enable: bool,
    ) -> None:
        self.context = context
        self.zk = zk
        self.batch = batch
        self.record = record
        self.unclean_default = unclean_leader_election_enable
        self.states: dict[TopicPartition, PartitionState] = {}
        self._trust_context = False

    @contextlib.contextmanager
    def trusting_context(self) -> Iterator[None]:
        """Within: :meth:`update_leader_and_isr` computes its first attempt from the context's
        states instead of reading them again (the failover read them all a moment ago)."""
        self._trust_context = True
        try:
            yield
        finally:
            self._trust_context = False

    def state(self, tp: TopicPartition) -> PartitionState:
        return self.states.get(tp, PartitionState.NON_EXISTENT)

    # -- lifecycle -------------------------------------------------------------------------------
    def initialize(self) -> None:
        """From the context: no state znode -> New; a live leader -> Online; else Offline."""
        self.states.clear()
        for tp in self.context.all_partitions():
            leadership = self.context.partition_leadership.get(tp)
            if leadership is None:
                self.states[tp] = PartitionState.NEW
            elif self.context.is_replica_online(
                leadership.leader_and_isr.leader, include_shutting_down=True, tp=tp
            ):
                self.states[tp] = PartitionState.ONLINE
            else:
                self.states[tp] = PartitionState.OFFLINE

    async def startup(self) -> None:
        self.initialize()
        await self.trigger_online_partition_state_change()

    def shutdown(self) -> None:
        self.states.clear()

    def offline_partitions(self) -> list[TopicPartition]:
        return sorted(tp for tp, s in self.states.items() if s is PartitionState.OFFLINE)

    async def trigger_online_partition_state_change(
        self, partitions: Iterable[TopicPartition] | None = None
    ) -> None:
        """Try to bring every New or Offline partition (not being deleted) online."""
        candidates = self.states if partitions is None else partitions
        todo = [
            tp
            for tp in sorted(candidates)
            if self.state(tp) in (PartitionState.NEW, PartitionState.OFFLINE)
            and not self.context.is_topic_queued_for_deletion(tp.topic)
        ]
        if todo:
            await self.handle_state_changes(todo, PartitionState.ONLINE, ElectionStrategy.OFFLINE)

    # -- transitions -----------------------------------------------------------------------------
    async def handle_state_changes(
        self,
        partitions: Sequence[TopicPartition],
        target: PartitionState,
        strategy: ElectionStrategy | None = None,
        reassignment_targets: dict[TopicPartition, list[int]] | None = None,
    ) -> dict[TopicPartition, str]:
        """Move ``partitions`` to ``target``. Returns the partitions that did not get there, with why."""
        failed: dict[TopicPartition, str] = {}
        valid = []
        for tp in partitions:
            if self.state(tp) in VALID_PREVIOUS_STATES[target]:
                valid.append(tp)
            else:
                failed[tp] = f"illegal transition {self.state(tp).value} -> {target.value}"
                log.error("partition %s: %s", tp, failed[tp])
        if target is PartitionState.ONLINE:
            new = [tp for tp in valid if self.state(tp) is PartitionState.NEW]
            others = [tp for tp in valid if self.state(tp) is not PartitionState.NEW]
            if new:
                failed.update(await self._initialize_leader_and_isr(new))
            if others:
                failed.update(
                    await self._elect_leaders(
                        others, strategy or ElectionStrategy.OFFLINE, reassignment_targets or {}
                    )
                )
        else:
            for tp in valid:
                self._set_state(tp, target)
        return failed

    def _set_state(self, tp: TopicPartition, target: PartitionState, **details: object) -> None:
        previous = self.state(tp)
        if target is PartitionState.NON_EXISTENT:
            self.states.pop(tp, None)
        else:
            self.states[tp] = target
        self.record(
            "partition_state_change",
            topic=tp.topic,
            partition=tp.partition,
            **{"from": previous.value, "to": target.value},
            **details,
        )

    async def _initialize_leader_and_isr(
        self, partitions: Sequence[TopicPartition]
    ) -> dict[TopicPartition, str]:
        failed: dict[TopicPartition, str] = {}
        to_create: dict[TopicPartition, LeaderIsrAndControllerEpoch] = {}
        for tp in partitions:
            live = self.context.live_replicas(tp)
            if not live:
                failed[tp] = f"no live replica among {self.context.replicas(tp)}; partition stays new"
                log.error("cannot initialize partition %s: %s", tp, failed[tp])
                continue
            to_create[tp] = LeaderIsrAndControllerEpoch(
                LeaderAndIsr(live[0], 0, tuple(live), 0), self.context.epoch
            )
        results = await state_writes.create_states(
            self.zk, self.context.epoch_zk_version, to_create, self._create_state
        )
        for tp, result in results.items():
            if isinstance(result, NodeExistsError):
                failed[tp] = "state znode already exists"
                log.error("cannot initialize partition %s: its state znode already exists", tp)
            elif isinstance(result, BaseException):
                failed[tp] = f"{type(result).__name__}: {result}"
                log.error("cannot initialize partition %s: %s", tp, failed[tp])
            else:
                state = result
                self.context.partition_leadership[tp] = state
                lai = state.leader_and_isr
                self._set_state(
                    tp,
                    PartitionState.ONLINE,
                    leader=lai.leader,
                    leader_epoch=lai.leader_epoch,
                    isr=list(lai.isr),
                    zk_version=lai.zk_version,
                    reason="new partition: first live replica leads, live replicas are the ISR",
                )
                self.batch.add_leader_and_isr(lai.isr, tp, state, self.context.replicas(tp), is_new=True)
        return failed

    async def _create_state(
        self, tp: TopicPartition, state: LeaderIsrAndControllerEpoch
    ) -> LeaderIsrAndControllerEpoch:
        """Create the state znode and whichever of its parents .../partitions and .../partitions/<p>
        are missing, all in one fenced multi-op (Kafka's createTopicPartitionStatesRaw fences each
        of these creates). Never /brokers/topics/<t> itself: when the topic is gone the multi
        fails with NoNodeError, and a deposed controller's with ControllerMovedError, leaving
        nothing behind (every controller write is fenced: docs/guarantees.md "Fencing: stale controllers
        and stale leaders"). A NODEEXISTS on the state znode that holds this very state is our
        create landed with its answer lost: it counts as created (returned with its zkVersion)."""
        parents = [topic_partitions_path(tp.topic), partition_path(tp.topic, tp.partition)]
        state_op = CreateOp(partition_state_path(tp.topic, tp.partition), encode_partition_state(state))
        for _ in range(MAX_WRITE_ATTEMPTS):
            present = await asyncio.gather(*(self.zk.exists(p) for p in parents))
            missing = [CreateOp(p) for p, stat in zip(parents, present, strict=True) if stat is None]
            try:
                await fenced_multi(self.zk, self.context.epoch_zk_version, [*missing, state_op])
                return state
            except NodeExistsError as exc:
                if getattr(exc, "op_index", len(missing)) >= len(missing):  # the state znode itself
                    lai = state.leader_and_isr
                    landed = await resolve_leader_and_isr_write(self.zk, tp, lai, state.controller_epoch)
                    if landed is None:
                        raise
                    log.info("state create of %s: the answer was lost but the create landed", tp)
                    return LeaderIsrAndControllerEpoch(landed, state.controller_epoch)
                # a parent appeared since we looked (another partition of the topic, or our
                # own create whose answer was lost): look again
        raise NodeExistsError(f"parents of {state_op.path} kept appearing")

    async def _elect_leaders(
        self,
        partitions: Sequence[TopicPartition],
        strategy: ElectionStrategy,
        reassignment_targets: dict[TopicPartition, list[int]],
    ) -> dict[TopicPartition, str]:
        unclean_by_topic: dict[str, bool] = {}
        if strategy is ElectionStrategy.OFFLINE:
            unclean_by_topic = await self._unclean_settings({tp.topic for tp in partitions})

        def compute(tp: TopicPartition, current: LeaderIsrAndControllerEpoch) -> ElectionOutcome:
            lai = current.leader_and_isr
            assignment = self.context.replicas(tp)
            if strategy in (ElectionStrategy.OFFLINE, ElectionStrategy.UNCLEAN):
                return leader_election.elect_offline(
                    lai,
                    assignment,
                    self.context.live_replicas(tp),
                    strategy is ElectionStrategy.UNCLEAN
                    or unclean_by_topic.get(tp.topic, self.unclean_default),
                )
            if strategy is ElectionStrategy.PREFERRED:
                return leader_election.elect_preferred(lai, assignment, self.context.live_replicas(tp))
            if strategy is ElectionStrategy.REASSIGNMENT:
                targets = reassignment_targets.get(tp, assignment)
                return leader_election.elect_for_reassignment(lai, targets, self.context.live_replicas(tp))
            return leader_election.elect_for_controlled_shutdown(
                lai,
                assignment,
                self.context.live_replicas(tp, include_shutting_down=True),
                self.context.shutting_down_broker_ids,
            )

        written, unchanged, failed = await self.update_leader_and_isr(partitions, compute)
        for tp, (state, outcome) in written.items():
            lai = state.leader_and_isr
            target = PartitionState.ONLINE if lai.leader != NO_LEADER else PartitionState.OFFLINE
            if outcome.unclean:
                log.warning(
                    "UNCLEAN leader election for %s: broker %s leads with ISR %s although it was not in the ISR; "
                    "committed records may be lost",
                    tp,
                    lai.leader,
                    list(lai.isr),
                )
            self._set_state(
                tp,
                target,
                leader=lai.leader,
                leader_epoch=lai.leader_epoch,
                isr=list(lai.isr),
                zk_version=lai.zk_version,
                election=strategy.value,
                unclean=outcome.unclean,
                reason=outcome.reason,
            )
            self.batch.add_leader_and_isr(
                self.context.live_replicas(tp, include_shutting_down=True),
                tp,
                state,
                self.context.replicas(tp),
                elected=True,
            )
            if target is PartitionState.OFFLINE:
                failed[tp] = outcome.reason
        for tp, outcome in unchanged.items():
            failed[tp] = outcome.reason
            log.info("no leader elected for %s (%s): %s", tp, strategy.value, outcome.reason)
            self.record(
                "leader_election_failed",
                topic=tp.topic,
                partition=tp.partition,
                election=strategy.value,
                reason=outcome.reason,
            )
        return failed

    async def _unclean_settings(self, topics: set[str]) -> dict[str, bool]:
        """Per-topic unclean.leader.election.enable overrides (/config/topics/<t>)."""
        configs = await windowed(sorted(topics), lambda t: get_topic_config(self.zk, t))
        settings = {}
        for topic, config in zip(sorted(topics), configs, strict=True):
            if UNCLEAN_CONFIG in config:
                settings[topic] = str(config[UNCLEAN_CONFIG]).strip().lower() == "true"
        return settings

    # -- the fenced read-decide-write loop ---------------------------------------------------------
    async def update_leader_and_isr(
        self, partitions: Sequence[TopicPartition], compute: Compute
    ) -> tuple[
        dict[TopicPartition, tuple[LeaderIsrAndControllerEpoch, ElectionOutcome]],
        dict[TopicPartition, ElectionOutcome],
        dict[TopicPartition, str],
    ]:
        """For each partition: ``compute`` the new LeaderAndIsr from its state, write it
        conditionally on the zkVersion (fenced by the controller epoch, batched:
        :func:`controller.state_writes.write_states`); on BADVERSION, read again and again.

        Each attempt reads the state znodes first (Kafka's getTopicPartitionStatesRaw), except
        the first while :meth:`trusting_context` (a failover that has just read every state):
        then it computes from the state the context holds. The write is conditional on that
        state's zkVersion, so it lands only if ZooKeeper still holds exactly that state, and a
        stale one costs a BADVERSION and a read (docs/design.md "The controller at scale (issue
        25)"). A "nothing to write" decided from the context stands: a failover decides about
        replicas that are offline and partitions whose leader is, and since its read only a
        leader can have changed a state, by its ISR, which an offline replica cannot join.

        Returns (written: new state and outcome, unchanged: outcome with nothing to write,
        failed: reason). Written states are already in the context. Raises ControllerMovedError.
        """
        written: dict[TopicPartition, tuple[LeaderIsrAndControllerEpoch, ElectionOutcome]] = {}
        unchanged: dict[TopicPartition, ElectionOutcome] = {}
        failed: dict[TopicPartition, str] = {}
        remaining = list(partitions)
        from_context = self._trust_context
        for _ in range(MAX_WRITE_ATTEMPTS):
            if not remaining:
                break
            cached = (
                {tp: self.context.partition_leadership.get(tp) for tp in remaining} if from_context else {}
            )
            to_read = [tp for tp in remaining if cached.get(tp) is None]
            read = dict(zip(to_read, await get_partition_states(self.zk, to_read), strict=True))
            writes: dict[TopicPartition, tuple[LeaderAndIsr, ElectionOutcome]] = {}
            for tp in remaining:
                state = cached.get(tp) or read[tp]
                if state is None:
                    failed[tp] = "state znode does not exist"
                    continue
                if state.controller_epoch > self.context.epoch:
                    failed[tp] = f"state written by a newer controller (epoch {state.controller_epoch})"
                    continue
                self.context.partition_leadership[tp] = state
                outcome = compute(tp, state)
                if outcome.leader_and_isr is not None:
                    writes[tp] = (outcome.leader_and_isr, outcome)
                else:
                    unchanged[tp] = outcome
            results = await state_writes.write_states(
                self.zk,
                self.context.epoch_zk_version,
                self.context.epoch,
                {tp: lai for tp, (lai, _) in writes.items()},
                self._write_state,
            )
            remaining, from_context = [], False
            for tp, (_, outcome) in writes.items():
                result = results[tp]
                if isinstance(result, BadVersionError):
                    remaining.append(tp)
                elif isinstance(result, NoNodeError):
                    failed[tp] = "state znode does not exist"
                elif isinstance(result, BaseException):
                    failed[tp] = f"{type(result).__name__}: {result}"
                else:
                    state = LeaderIsrAndControllerEpoch(result, self.context.epoch)
                    self.context.partition_leadership[tp] = state
                    written[tp] = (state, outcome)
        for tp in remaining:
            failed[tp] = f"state znode kept changing (BADVERSION {MAX_WRITE_ATTEMPTS} times)"
        for tp, reason in failed.items():
            if tp not in unchanged:
                log.error("cannot update leader and ISR of %s: %s", tp, reason)
        return written, unchanged, failed

    async def _write_state(self, tp: TopicPartition, lai: LeaderAndIsr) -> LeaderAndIsr:
        """Write ``lai`` conditionally on its zkVersion. A BADVERSION that is our own write landed
        (the answer lost, the bridge's resend refused) counts as written: see
        :func:`zk.client.resolve_leader_and_isr_write`."""
        data = encode_partition_state(LeaderIsrAndControllerEpoch(lai, self.context.epoch))
        path = partition_state_path(tp.topic, tp.partition)
        try:
            (stat,) = await fenced_multi(
                self.zk, self.context.epoch_zk_version, [SetDataOp(path, data, lai.zk_version)]
            )
        except BadVersionError:
            landed = await resolve_leader_and_isr_write(self.zk, tp, lai, self.context.epoch)
            if landed is None:
                raise
            log.info("state write of %s: the answer was lost but the write landed; carrying on", tp)
            return landed
        return lai.with_zk_version(stat.version)
