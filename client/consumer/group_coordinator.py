"""The consumer's side of a consumer group (Kafka's ConsumerCoordinator and AbstractCoordinator,
aiokafka's consumer/group_coordinator.py; seed 004; docs/design.md "Consumer groups").

Finds the group's coordinator (FindCoordinator), joins (JoinGroup, answering KIP-394's
MEMBER_ID_REQUIRED by joining again with the id given), and, when it is the group leader, runs
the chosen assignor (:mod:`client.consumer.assignors`) over every member's subscription and
sends the result in its SyncGroup; every member applies the assignment its SyncGroup returns.
A background task heartbeats every ``heartbeat_interval_ms``; an answer saying a rebalance began
(REBALANCE_IN_PROGRESS) or that this member was fenced (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID)
makes the next ``poll`` rejoin (a fenced answer to a request of an older generation is
ignored: Kafka's generationUnchanged()). A fenced answer resets the generation, and the member
id too unless it was ILLEGAL_GENERATION (Kafka's resetStateOnResponseError(api, error,
shouldResetMemberId = error != ILLEGAL_GENERATION), for SyncGroup, Heartbeat and OffsetCommit):
the member id is still valid then, and rejoining under it spares the group waiting for the old
id until its session expires. The member's state is Kafka's MemberState (UNJOINED,
PREPARING_REBALANCE, COMPLETING_REBALANCE, STABLE); it commits only when STABLE
(:mod:`client.consumer.offset_commits`). Kafka's onJoinPrepare, the eager protocol: before
rejoining, the member commits (with auto commit), calls ``on_partitions_revoked`` while the
partitions are still assigned (so a commit there commits their positions), and only then gives
them all up; when its generation was reset (fenced) it calls ``on_partitions_lost`` instead,
also before clearing. A fenced member keeps its assignment until then but delivers nothing
from it: ``poll`` rejoins before it returns any record, and a commit of it is refused.

Leaving (Kafka's onLeavePrepare, then maybeLeaveGroup): ``close`` (after its auto commit) and
``unsubscribe`` first call ``on_partitions_revoked`` (``on_partitions_lost`` when the generation
was reset or a rebalance is under way) while the partitions are still assigned, then clear the
assignment and send LeaveGroup (a dynamic member with a generation only: KIP-345's static
members never do). Leaving resets the generation and member id but not the assignment; so when
the heartbeat leaves on a poll timeout, the next ``poll``'s onJoinPrepare reports the partitions
lost.

Offsets: ``commit`` writes the positions (or the given offsets) with OffsetCommit under the
current generation, ``committed`` reads them back with OffsetFetch, newly assigned partitions
start from their committed offsets (else ``auto_offset_reset``); auto commit is driven by
``poll`` (:mod:`client.consumer.auto_commit`) and also runs before a rebalance and on ``close``.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable, Mapping

from client.consumer.assignors import assignor_for
from client.consumer.auto_commit import AutoCommit
from client.consumer.config import ConsumerConfig
from client.consumer.heartbeat import heartbeat_loop
from client.consumer.leave_group import GroupLeave
from client.consumer.offset_commits import (
    COORDINATOR_ERRORS,
    FENCED_ERRORS,
    NO_GENERATION,
    UNKNOWN_MEMBER_ID,
    MemberState,
)
from client.consumer.rebalance_listener import (
    ConsumerRebalanceListener,
    invoke_partitions_assigned,
    invoke_partitions_lost,
    invoke_partitions_revoked,
)
from client.consumer.subscription_state import SubscriptionState
from client.metadata import Cluster
from client.protocol.api import ApiKey
from client.protocol.consumer_protocol import (
    PROTOCOL_TYPE,
    Assignment,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from client.protocol.errors import ErrorCode, KafkaError
from client.types import OffsetAndMetadata, TopicPartition

log = logging.getLogger(__name__)


class ConsumerCoordinator(GroupLeave):
    def __init__(
        self,
        config: ConsumerConfig,
        cluster: Cluster,
        subscriptions: SubscriptionState,
        check: Callable[[], None],
    ) -> None:
        assert config.group_id is not None
        self.config = config
        self.group_id: str = config.group_id
        self._cluster = cluster
        self._subscriptions = subscriptions
        self._check = check
        self.assignors = [assignor_for(name) for name in config.partition_assignment_strategy]
        self.coordinator_id: int | None = None
        self.member_id = UNKNOWN_MEMBER_ID
        self.generation = NO_GENERATION
        self.state = MemberState.UNJOINED
        #: Kafka's needsJoinPrepare: onJoinPrepare runs once per rebalance, not per JoinGroup retry
        self._needs_join_prepare = True
        self.protocol: str | None = None
        self.leader_id: str | None = None
        self.need_rejoin = True
        self.topics: set[str] = set()
        self.pattern: re.Pattern[str] | None = None
        self.listener: ConsumerRebalanceListener | None = None
        self._heartbeat_task: asyncio.Task | None = None
        #: Kafka's nextAutoCommitTimer and the auto commit in flight (None: enable_auto_commit off)
        self.auto_commit = (
            AutoCommit(config.auto_commit_interval_ms, config.retry_backoff_ms, config.group_id)
            if config.enable_auto_commit
            else None
        )
        self._lock = asyncio.Lock()
        self.last_poll = 0.0
        self.rebalances = 0
        self._joined_topics: set[str] = set()
        #: the leader's view of the group's topics when it assigned (Kafka's assignmentSnapshot):
        #: topic -> partition count; a change (partitions added) makes it rejoin and reassign
        self._assignment_snapshot: dict[str, int] | None = None
        self._join_task: asyncio.Task | None = None
        self._refresh_task: asyncio.Task | None = None

    # -- subscription ----------------------------------------------------------------------------

    def subscribe(
        self, topics: set[str], pattern: re.Pattern[str] | None, listener: ConsumerRebalanceListener | None
    ) -> None:
        self.topics, self.pattern, self.listener = set(topics), pattern, listener
        self.need_rejoin = True

    @property
    def subscribed(self) -> bool:
        return bool(self.topics) or self.pattern is not None

    def subscribed_topics(self) -> set[str]:
        if self.pattern is None:
            return self.topics
        return {
            t
            for t in self._cluster.topics
            if self.pattern.fullmatch(t) and not (self.config.exclude_internal_topics and t.startswith("__"))
        }

    # -- requests to the coordinator -------------------------------------------------------------

    async def _send(self, api_key: ApiKey, body: dict, timeout_ms: int | None = None) -> dict:
        """A request to the coordinator; a lost connection or a NOT_COORDINATOR answer sends the
        next request through a fresh FindCoordinator."""
        node = await self.ensure_coordinator_ready()
        timeout = (timeout_ms or self.config.request_timeout_ms) / 1000
        try:
            conn = await self._cluster.connection(node)
            response = await conn.request(api_key, body, timeout=timeout)
        except KafkaError as exc:
            self.mark_coordinator_unknown(f"{api_key.name} failed: {exc}")
            raise
        code = response.get("error_code", 0)
        if code in COORDINATOR_ERRORS:
            self.mark_coordinator_unknown(f"{api_key.name} answered {ErrorCode(code).name}")
        return response

    def mark_coordinator_unknown(self, why: str) -> None:
        if self.coordinator_id is not None:
            log.info("group %s: coordinator %s is unknown (%s)", self.group_id, self.coordinator_id, why)
        self.coordinator_id = None

    async def ensure_coordinator_ready(self) -> int:
        backoff = self.config.retry_backoff_ms / 1000
        while self.coordinator_id is None:
            self._check()
            try:
                conn = await self._cluster.any_connection()
                answer = await conn.request(
                    ApiKey.FIND_COORDINATOR, {"key": self.group_id, "key_type": 0},
                    timeout=self.config.request_timeout_ms / 1000,
                )  # fmt: skip
            except KafkaError as exc:
                if not exc.retriable:
                    raise
                await asyncio.sleep(backoff)
                continue
            code = answer["error_code"]
            if code == ErrorCode.NONE:
                if self._cluster.broker(answer["node_id"]) is None:
                    await self._cluster.refresh()
                self.coordinator_id = answer["node_id"]
                log.info("group %s: coordinator is broker %d", self.group_id, self.coordinator_id)
            elif code in (ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS):
                await asyncio.sleep(backoff)
            else:
                raise KafkaError(
                    code, f"finding the coordinator of group {self.group_id}: {answer['error_message']}"
                )
        return self.coordinator_id

    # -- joining ---------------------------------------------------------------------------------

    async def poll(self, timeout: float) -> bool:
        """Kafka's ConsumerCoordinator.poll: start (or keep waiting for) a rejoin when one is
        needed, for at most ``timeout`` seconds. The join runs as its own task, so a poll that
        runs out of time leaves it going instead of cutting it off halfway (between SyncGroup and
        the committed offsets, say). True when the member holds a current assignment."""
        self.last_poll = asyncio.get_running_loop().time()
        if self.pattern is not None and self.subscribed_topics() != self._joined_topics:
            self.need_rejoin = True
        self._maybe_refresh_group_metadata()
        if self._metadata_changed():
            log.info("group %s: the partitions of the group's topics changed: reassigning", self.group_id)
            self.need_rejoin = True
        if not self.need_rejoin:
            self.maybe_auto_commit_offsets_async()
            return True
        if self._join_task is None or self._join_task.done():
            self._join_task = asyncio.get_running_loop().create_task(
                self.ensure_active_group(), name=f"join-{self.group_id}"
            )
        try:
            # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancellation that
            # arrives as the join completes, and a cancelled poll must stop
            async with asyncio.timeout(max(timeout, 0)):
                await asyncio.shield(self._join_task)
        except TimeoutError:
            return False
        if self.need_rejoin:
            return False
        self.maybe_auto_commit_offsets_async()
        return True

    def maybe_auto_commit_offsets_async(self) -> None:
        """Kafka's maybeAutoCommitOffsetsAsync(now), at the end of the coordinator's poll and so
        before the consumer fetches: the positions of records earlier polls returned."""
        auto = self.auto_commit
        if auto is not None:
            auto.maybe_commit_async(
                asyncio.get_running_loop().time(), self._positions, self._commit_positions
            )

    async def _commit_positions(self, offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> None:
        await self.commit(offsets)  # looked up on each call: a test or the simulator may wrap it

    def _maybe_refresh_group_metadata(self) -> None:
        """The leader watches the partition counts of every topic it assigned, also those it
        reads none of (the fetcher refreshes only the topics it fetches)."""
        snapshot = self._assignment_snapshot
        if snapshot is None or not self._cluster.needs_refresh():
            return
        if self._refresh_task is None or self._refresh_task.done():
            topics = sorted(set(snapshot) | self._subscriptions.topics())
            self._refresh_task = asyncio.get_running_loop().create_task(
                self._refresh_quietly(topics), name=f"group-metadata-{self.group_id}"
            )

    async def _refresh_quietly(self, topics: list[str]) -> None:
        try:
            await self._cluster.maybe_refresh(topics)
        except KafkaError as exc:
            log.debug("group %s: metadata refresh failed: %s", self.group_id, exc)

    def _metadata_changed(self) -> bool:
        snapshot = self._assignment_snapshot
        if snapshot is None or self.leader_id != self.member_id or self.need_rejoin:
            return False
        return any(len(self._cluster.partitions_for(t) or []) != n for t, n in snapshot.items())

    async def ensure_active_group(self) -> None:
        """Rejoin until a generation is joined and its assignment applied."""
        async with self._lock:
            while self.need_rejoin:
                self._check()
                if self._needs_join_prepare:
                    self._needs_join_prepare = False
                    await self._on_join_prepare(self.generation, self.member_id)
                try:
                    await self._join_and_sync()
                except KafkaError as exc:
                    if not (
                        exc.retriable
                        or exc.code in FENCED_ERRORS
                        or exc.code == ErrorCode.REBALANCE_IN_PROGRESS
                    ):
                        raise
                    log.info("group %s: joining failed (%s); trying again", self.group_id, exc)
                    await asyncio.sleep(self.config.retry_backoff_ms / 1000)
            self._start_background_tasks()

    async def _on_join_prepare(self, generation: int, member_id: str) -> None:
        """Kafka's ConsumerCoordinator.onJoinPrepare, eager: commit what was consumed (auto
        commit, under a stable generation only), call the listener while the partitions are
        still assigned (lost when the generation was reset, else revoked), then give every
        partition up, also when the listener raises."""
        if self.auto_commit is not None:
            await self.auto_commit.wait_in_flight()  # an older commit must not land after this one
        if self.auto_commit is not None and self.generation_if_stable() is not None:
            try:
                await self.commit(self._positions())
            except KafkaError as exc:
                log.warning("group %s: commit before rebalance failed: %s", self.group_id, exc)
        owned = self._subscriptions.assigned()
        try:
            if generation == NO_GENERATION or member_id == UNKNOWN_MEMBER_ID:
                if owned:
                    log.info("group %s: giving away %s as lost: this member's generation was reset",
                             self.group_id, ", ".join(map(str, sorted(owned))))  # fmt: skip
                    await invoke_partitions_lost(self.listener, owned)
            else:
                await invoke_partitions_revoked(self.listener, owned)
        finally:
            self._subscriptions.assign([])

    async def _join_and_sync(self) -> None:
        if self.pattern is not None or self._cluster.stale:
            await self._cluster.refresh(sorted(self.topics) if self.pattern is None else None)
        topics = self.subscribed_topics()
        metadata = encode_subscription(Subscription(tuple(sorted(topics))))
        answer = await self._join(metadata)
        self._joined_topics = topics
        self._assignment_snapshot = None
        if answer["leader"] == self.member_id:
            assignments = await self._perform_assignment(answer["protocol_name"], answer["members"])
        else:
            assignments = []
        sync = await self._send(
            ApiKey.SYNC_GROUP,
            {
                "group_id": self.group_id,
                "generation_id": self.generation,
                "member_id": self.member_id,
                "group_instance_id": self.config.group_instance_id,
                "protocol_type": PROTOCOL_TYPE,
                "protocol_name": self.protocol,
                "assignments": assignments,
            },
        )
        self._raise_for(sync["error_code"], "SyncGroup")
        self.state = MemberState.STABLE
        assignment = decode_assignment(sync["assignment"]) if sync["assignment"] else Assignment(())
        await self._on_join_complete(assignment)

    async def _join(self, metadata: bytes) -> dict:
        while True:
            body = {
                "group_id": self.group_id,
                "session_timeout_ms": self.config.session_timeout_ms,
                "rebalance_timeout_ms": self.config.max_poll_interval_ms,
                "member_id": self.member_id,
                "group_instance_id": self.config.group_instance_id,
                "protocol_type": PROTOCOL_TYPE,
                "protocols": [{"name": a.name, "metadata": metadata} for a in self.assignors],
            }
            log.debug(
                "group %s: %s sends JoinGroup as %r", self.group_id, self.config.client_id, self.member_id
            )
            self.state = MemberState.PREPARING_REBALANCE
            answer = await self._send(
                ApiKey.JOIN_GROUP, body, self.config.max_poll_interval_ms + self.config.request_timeout_ms
            )
            code = answer["error_code"]
            log.debug(
                "group %s: %s JoinGroup answer %s", self.group_id, self.config.client_id, ErrorCode(code).name
            )
            if code == ErrorCode.MEMBER_ID_REQUIRED:
                self.member_id = answer["member_id"]  # KIP-394: join again with this id
                continue
            self._raise_for(code, "JoinGroup")
            self.member_id, self.generation = answer["member_id"], answer["generation_id"]
            self.protocol, self.leader_id = answer["protocol_name"], answer["leader"]
            self.state = MemberState.COMPLETING_REBALANCE
            return answer

    def _raise_for(self, code: int, what: str) -> None:
        if code == ErrorCode.NONE:
            return
        if code in FENCED_ERRORS:
            # Kafka keeps the member id on ILLEGAL_GENERATION (SyncGroupResponseHandler)
            self.reset_generation(reset_member_id=code != ErrorCode.ILLEGAL_GENERATION)
        raise KafkaError(code, f"{what} of group {self.group_id} (member {self.member_id or '-'}) failed")

    def reset_generation(self, reset_member_id: bool = True) -> None:
        """Kafka's resetStateAndRejoin(reason, shouldResetMemberId): no generation (and no member
        id unless told to keep it: after ILLEGAL_GENERATION it is still valid, and rejoining under
        it spares the group waiting for the old id); the assignment stays, and the next join first
        reports it lost."""
        if reset_member_id:
            self.member_id = UNKNOWN_MEMBER_ID
        self.generation, self.protocol = NO_GENERATION, None
        self.state = MemberState.UNJOINED
        self._assignment_snapshot = None
        self.need_rejoin = True
        self._needs_join_prepare = True

    async def _perform_assignment(self, protocol: str, members: list[dict]) -> list[dict]:
        """The group leader's job (seed 004): every member's subscription in, one assignment each out."""
        assignor = next(a for a in self.assignors if a.name == protocol)
        subscriptions = {m["member_id"]: decode_subscription(m["metadata"]) for m in members}
        wanted = sorted({t for s in subscriptions.values() for t in s.topics})
        await self._cluster.refresh(wanted)
        partitions = {t: len(self._cluster.partitions_for(t) or []) for t in wanted}
        self._assignment_snapshot = partitions
        result = assignor.assign({t: n for t, n in partitions.items() if n}, subscriptions)
        log.info(
            "group %s generation %d: leader %s assigned %s with %s",
            self.group_id, self.generation, self.member_id,
            {m: [str(TopicPartition(*tp)) for tp in a.partitions] for m, a in result.items()}, protocol,
        )  # fmt: skip
        return [{"member_id": m, "assignment": encode_assignment(a)} for m, a in result.items()]

    async def _on_join_complete(self, assignment: Assignment) -> None:
        """Positions from the committed offsets first, then the assignment, so no fetch starts
        from ``auto_offset_reset`` for a partition the group has an offset for."""
        partitions = [TopicPartition(*tp) for tp in assignment.partitions]
        committed = await self.fetch_committed(partitions)
        self._subscriptions.assign(partitions)
        for tp, offset in committed.items():
            state = self._subscriptions.assignment.get(tp)
            if offset is not None and state is not None and state.position is None:
                self._subscriptions.set_position(state, offset.offset)
        self.need_rejoin = False
        self._needs_join_prepare = True
        self.rebalances += 1
        if self.auto_commit is not None:
            self.auto_commit.reset(asyncio.get_running_loop().time())
        log.info(
            "group %s generation %d: member %s assigned %s",
            self.group_id, self.generation, self.member_id, ", ".join(map(str, sorted(partitions))) or "nothing",
        )  # fmt: skip
        await invoke_partitions_assigned(self.listener, set(partitions))

    # -- background: heartbeats -------------------------------------------------------------------

    def _start_background_tasks(self) -> None:
        loop = asyncio.get_running_loop()
        if self._heartbeat_task is None or self._heartbeat_task.done():
            self._heartbeat_task = loop.create_task(heartbeat_loop(self), name=f"heartbeat-{self.group_id}")

    def _on_heartbeat(self, code: int, sent: tuple[int, str]) -> None:
        """Kafka's HeartbeatResponseHandler; ``sent``: the generation and member id it was sent
        with. A fenced member keeps its assignment until the next join reports it lost."""
        if code == ErrorCode.REBALANCE_IN_PROGRESS:
            if self.state is MemberState.STABLE:
                self.need_rejoin = True
        elif code in FENCED_ERRORS:
            if (self.generation, self.member_id) != sent:
                log.info("group %s: heartbeat of the stale generation %d failed (%s): ignored",
                         self.group_id, sent[0], ErrorCode(code).name)  # fmt: skip
                return
            log.info("group %s: member %s was fenced (%s): its partitions are lost",
                     self.group_id, self.member_id, ErrorCode(code).name)  # fmt: skip
            self.reset_generation(reset_member_id=code != ErrorCode.ILLEGAL_GENERATION)

    # -- leaving -----------------------------------------------------------------------------------

    def abandon(self) -> None:
        for task in (self._heartbeat_task, self._join_task, self._refresh_task):
            if task is not None:
                task.cancel()
        if self.auto_commit is not None:
            self.auto_commit.abandon()
