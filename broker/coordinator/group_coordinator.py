"""The group coordinator's membership protocol (Kafka 2.x's GroupCoordinator, the classic
protocol; seed 004; docs/design.md "Consumer groups").

JoinGroup, SyncGroup, Heartbeat and LeaveGroup move a group through Empty -> PreparingRebalance
-> CompletingRebalance -> Stable (:mod:`broker.coordinator.group_metadata`). A rebalance waits
until every known member has rejoined or the largest ``rebalance.timeout.ms`` passed (Kafka's
DelayedJoin; a group that was Empty first waits ``group.initial.rebalance.delay.ms``, extended
while members keep arriving: KIP-134's InitialDelayedJoin); members that did not rejoin are
dropped, a new generation starts, the first member is the group leader and gets every member's
subscription, and the leader's SyncGroup assignment is written to ``__consumer_offsets`` before
any member hears its own. Generation ids fence stale members (ILLEGAL_GENERATION,
UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS); a member whose heartbeats stop for
``session.timeout.ms`` is expelled, and one that never sends SyncGroup after a join completes is
expelled after the rebalance timeout (Kafka's DelayedHeartbeat and DelayedSync, KAFKA-12890:
:mod:`broker.coordinator.member_expiry`).

Sans-IO: answers go out through the callbacks the handlers pass, timers through the injected
:class:`Timers`, time through ``time_ms``, new member ids through ``new_member_id``. Everything
runs on the broker's one event loop, so a group's state never changes under a running method;
the one wait is a write to the offsets topic, and its callback re-checks what it relied on.

Window: a SyncGroup's write of the assignment lands after another member joined (the group went
back to PreparingRebalance) or after a newer generation started. The callback applies the
assignment only if the group is still in CompletingRebalance at the same generation
(tests/unit/test_group_coordinator.py forces it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from broker.coordinator.coordinator_config import GroupConfig
from broker.coordinator.group_checks import heartbeat_error, sync_error
from broker.coordinator.group_metadata import GroupMetadata, GroupState, MemberMetadata
from broker.coordinator.group_metadata_manager import GroupMetadataManager
from broker.coordinator.group_responses import (
    NEW_MEMBER_JOIN_TIMEOUT_MS,
    UNKNOWN_MEMBER_ID,
    Cancellable,
    Respond,
    Timers,
    join_answer,
    join_error,
    sync_answer,
)
from broker.coordinator.member_expiry import MemberExpiry
from client.protocol.errors import ErrorCode

log = logging.getLogger(__name__)


class GroupCoordinator:
    def __init__(
        self,
        config: GroupConfig,
        manager: GroupMetadataManager,
        timers: Timers,
        time_ms: Callable[[], int],
        new_member_id: Callable[[str], str],
    ) -> None:
        self.config = config
        self.manager = manager
        self.timers = timers
        self.time_ms = time_ms
        self.new_member_id = new_member_id
        self._join_timers: dict[str, Cancellable] = {}
        #: heartbeat, pending-member and pending-sync expiry (DelayedHeartbeat, DelayedSync)
        self.expiry = MemberExpiry(self, timers, time_ms)
        #: groups whose rebalance waits out the initial delay, which no join completes early
        self._initial_delay: set[str] = set()
        self.active = True

    # -- shared checks ---------------------------------------------------------------------------

    def group_error(self, group_id: str, allow_empty: bool = False) -> int | None:
        """Kafka's validateGroupStatus: who may answer for this group at all. OffsetCommit,
        OffsetFetch, DescribeGroups and DeleteGroups may name the empty group id (isValidGroupId)."""
        if not group_id and not allow_empty:
            return ErrorCode.INVALID_GROUP_ID
        if not self.active:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if self.manager.is_loading(group_id):
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        if not self.manager.is_local(group_id):
            return ErrorCode.NOT_COORDINATOR
        return None

    def current(self, group: GroupMetadata) -> bool:
        """Still the live object for its id (not unloaded, deleted or replaced since)."""
        return self.manager.groups.get(group.group_id) is group and not group.is_(GroupState.DEAD)

    # -- JoinGroup -------------------------------------------------------------------------------

    def handle_join_group(self, body: dict, client_id: str, client_host: str, respond: Respond) -> None:
        group_id, member_id = body["group_id"], body["member_id"]
        error = self.group_error(group_id)
        session_ms = body["session_timeout_ms"]
        if error is None and not (
            self.config.min_session_timeout_ms <= session_ms <= self.config.max_session_timeout_ms
        ):
            error = ErrorCode.INVALID_SESSION_TIMEOUT
        group = self.manager.groups.get(group_id)
        if error is None and group is None and member_id != UNKNOWN_MEMBER_ID:
            error = ErrorCode.UNKNOWN_MEMBER_ID
        if error is not None:
            respond(join_error(member_id, error))
            return
        created = group is None
        if group is None:
            group = GroupMetadata(group_id, state_timestamp_ms=self.time_ms())
            self.manager.groups[group_id] = group
        if member_id == UNKNOWN_MEMBER_ID:
            self._join_unknown(group, body, client_id, client_host, respond)
        else:
            self._join_known(group, body, client_id, client_host, respond)
        if created and group.is_(GroupState.EMPTY) and not group.members and not group.pending_members:
            del self.manager.groups[group_id]  # a first join that failed leaves nothing behind

    def _join_unknown(
        self, group: GroupMetadata, body: dict, client_id: str, host: str, respond: Respond
    ) -> None:
        names = [p["name"] for p in body["protocols"]]
        if group.is_(GroupState.DEAD):
            respond(join_error(UNKNOWN_MEMBER_ID, ErrorCode.COORDINATOR_NOT_AVAILABLE))
        elif not group.supports_protocols(body["protocol_type"], names):
            respond(join_error(UNKNOWN_MEMBER_ID, ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
        elif len(group.members) + len(group.pending_members) >= self.config.max_size:
            respond(join_error(UNKNOWN_MEMBER_ID, ErrorCode.GROUP_MAX_SIZE_REACHED))
        elif body["require_known_member_id"] and body["group_instance_id"] is None:
            # KIP-394: hand out the id first, so a client whose JoinGroup times out and retries
            # does not leave a defunct member behind (a static member is never asked: KafkaApis).
            member_id = self.new_member_id(client_id)
            group.pending_members.add(member_id)
            self.expiry.schedule_pending_expiration(group, member_id, body["session_timeout_ms"])
            respond(join_error(member_id, ErrorCode.MEMBER_ID_REQUIRED))
        else:
            self._add_member_and_rebalance(
                group, self.new_member_id(client_id), body, client_id, host, respond
            )

    def _join_known(
        self, group: GroupMetadata, body: dict, client_id: str, host: str, respond: Respond
    ) -> None:
        member_id = body["member_id"]
        protocols = [(p["name"], p["metadata"]) for p in body["protocols"]]
        if group.is_(GroupState.DEAD):
            respond(join_error(member_id, ErrorCode.COORDINATOR_NOT_AVAILABLE))
        elif not group.supports_protocols(body["protocol_type"], [n for n, _ in protocols]):
            respond(join_error(member_id, ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
        elif member_id in group.pending_members:
            self._add_member_and_rebalance(group, member_id, body, client_id, host, respond)
        elif group.is_static_member_fenced(member_id, body["group_instance_id"]):
            respond(join_error(member_id, ErrorCode.FENCED_INSTANCE_ID))
        elif not group.has(member_id):
            respond(join_error(member_id, ErrorCode.UNKNOWN_MEMBER_ID))
        else:
            member = group.members[member_id]
            unchanged = member.matches(protocols)
            if group.is_(GroupState.PREPARING_REBALANCE):
                self._update_member_and_rebalance(group, member, body, respond)
            elif group.is_(GroupState.COMPLETING_REBALANCE) and unchanged:
                respond(join_answer(group, member_id))  # it already has this generation
            elif group.is_(GroupState.STABLE) and unchanged and not group.is_leader(member_id):
                respond(join_answer(group, member_id))
            else:  # the leader rejoins to reassign, or the member's subscription changed
                self._update_member_and_rebalance(group, member, body, respond)

    def _add_member_and_rebalance(
        self, group: GroupMetadata, member_id: str, body: dict, client_id: str, host: str, respond: Respond
    ) -> None:
        session_ms = body["session_timeout_ms"]
        rebalance_ms = body["rebalance_timeout_ms"] if body["rebalance_timeout_ms"] >= 0 else session_ms
        member = MemberMetadata(
            member_id=member_id,
            group_instance_id=body["group_instance_id"],
            client_id=client_id,
            client_host=host,
            rebalance_timeout_ms=rebalance_ms,
            session_timeout_ms=session_ms,
            protocol_type=body["protocol_type"],
            protocols=[(p["name"], p["metadata"]) for p in body["protocols"]],
            awaiting_join=respond,
            is_new=True,
        )
        self._fence_replaced_instance(group, member)
        group.add(member)
        if group.is_(GroupState.PREPARING_REBALANCE) and group.generation_id == 0:
            group.new_member_added = True  # KIP-134: only a new group's first rebalance waits longer
        self.schedule_heartbeat(group, member, NEW_MEMBER_JOIN_TIMEOUT_MS)
        self._maybe_prepare_rebalance(group, f"adding new member {member_id}")
        self._check_join(group)

    def _fence_replaced_instance(self, group: GroupMetadata, member: MemberMetadata) -> None:
        """KIP-345: a new incarnation of a group.instance.id takes the old one's place; the old
        one hears FENCED_INSTANCE_ID for what it waits for and is out of the group."""
        instance = member.group_instance_id
        old = group.members.get(group.static_members.get(instance, "")) if instance is not None else None
        if old is None or old.member_id == member.member_id:
            return
        if old.awaiting_join is not None:
            old.awaiting_join(join_error(old.member_id, ErrorCode.FENCED_INSTANCE_ID))
        if old.awaiting_sync is not None:
            old.awaiting_sync(sync_answer(ErrorCode.FENCED_INSTANCE_ID))
        old.awaiting_join = old.awaiting_sync = None
        old.heartbeat_token += 1
        group.remove(old.member_id)
        log.info(
            "static member %s of group %s was replaced: %s is fenced", instance, group.group_id, old.member_id
        )

    def _update_member_and_rebalance(
        self, group: GroupMetadata, member: MemberMetadata, body: dict, respond: Respond
    ) -> None:
        if member.awaiting_join is not None:  # superseded: its client gave up on that request
            member.awaiting_join(join_error(member.member_id, ErrorCode.REBALANCE_IN_PROGRESS))
        member.protocols = [(p["name"], p["metadata"]) for p in body["protocols"]]
        member.session_timeout_ms = body["session_timeout_ms"]
        if body["rebalance_timeout_ms"] >= 0:
            member.rebalance_timeout_ms = body["rebalance_timeout_ms"]
        member.awaiting_join = respond
        self._maybe_prepare_rebalance(group, f"updating metadata for member {member.member_id}")
        self._check_join(group)

    # -- rebalance -------------------------------------------------------------------------------

    def _maybe_prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY):
            self.prepare_rebalance(group, reason)

    def prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.is_(GroupState.COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment_error(group, ErrorCode.REBALANCE_IN_PROGRESS)
        self.expiry.remove_sync_expiration(group)
        initial = group.is_(GroupState.EMPTY)
        group.transition_to(GroupState.PREPARING_REBALANCE, self.time_ms())
        log.info(
            "preparing to rebalance group %s in state %s with old generation %d (reason: %s)",
            group.group_id, group.state.value, group.generation_id, reason,
        )  # fmt: skip
        if initial:
            self._initial_delay.add(group.group_id)
            delay = self.config.initial_rebalance_delay_ms
            remaining = max(group.rebalance_timeout_ms() - delay, 0)
            group.new_member_added = False
            self._arm_join_timer(group, delay, lambda: self._on_initial_delay(group, delay, remaining))
        else:
            self._initial_delay.discard(group.group_id)
            self._arm_join_timer(group, group.rebalance_timeout_ms(), lambda: self._complete_join(group))
            self._check_join(group)

    def _arm_join_timer(self, group: GroupMetadata, delay_ms: int, fire: Callable[[], None]) -> None:
        old = self._join_timers.pop(group.group_id, None)
        if old is not None:
            old.cancel()

        def on_timer() -> None:
            if self._join_timers.get(group.group_id) is handle:
                del self._join_timers[group.group_id]
                if self.current(group) and group.is_(GroupState.PREPARING_REBALANCE):
                    fire()

        handle = self.timers.call_later(delay_ms, on_timer)
        self._join_timers[group.group_id] = handle

    def _on_initial_delay(self, group: GroupMetadata, delay: int, remaining: int) -> None:
        """KIP-134: while members keep arriving, wait another delay, up to the rebalance timeout."""
        if group.new_member_added and remaining > 0:
            group.new_member_added = False
            step = min(delay, remaining)
            self._arm_join_timer(group, step, lambda: self._on_initial_delay(group, delay, remaining - step))
        else:
            self._complete_join(group)

    def _check_join(self, group: GroupMetadata) -> None:
        """Kafka's DelayedJoin.tryComplete: every member rejoined, and no initial delay runs."""
        if not (self.current(group) and group.is_(GroupState.PREPARING_REBALANCE)):
            return
        if group.group_id in self._initial_delay:
            return
        if group.has_all_members_joined():
            timer = self._join_timers.pop(group.group_id, None)
            if timer is not None:
                timer.cancel()
            self._complete_join(group)

    def _complete_join(self, group: GroupMetadata) -> None:
        """Kafka's onCompleteJoin: drop who did not rejoin, start the next generation, answer
        every waiting JoinGroup (the leader with everyone's metadata), and wait for everyone's
        SyncGroup no longer than the rebalance timeout (its DelayedSync)."""
        self._initial_delay.discard(group.group_id)
        for member in group.not_yet_rejoined():
            log.info("member %s of group %s did not rejoin: removed", member.member_id, group.group_id)
            group.remove(member.member_id)
        if not self.current(group):
            return
        group.init_next_generation(self.time_ms())
        if group.is_(GroupState.EMPTY):
            self.manager.store_group(group, {}, lambda code: self._log_store(group, code))
            return
        log.info(
            "stabilized group %s generation %d (%d members, protocol %s)",
            group.group_id, group.generation_id, len(group.members), group.protocol_name,
        )  # fmt: skip
        group.pending_sync_members.update(group.members)  # before any answer goes out
        for member in group.summary_members():
            answer, member.awaiting_join = member.awaiting_join, None
            member.is_new = False
            if answer is not None:
                answer(join_answer(group, member.member_id))
            self.schedule_heartbeat(group, member)
        self.expiry.schedule_pending_sync(group)

    def _log_store(self, group: GroupMetadata, code: int) -> None:
        if code != ErrorCode.NONE:
            log.warning("writing group %s's metadata failed: %s", group.group_id, ErrorCode(code).name)

    def _reset_and_propagate_assignment_error(self, group: GroupMetadata, code: int) -> None:
        for member in group.summary_members():
            member.assignment = b""
        self._propagate_assignment(group, code)

    def _propagate_assignment(self, group: GroupMetadata, code: int) -> None:
        for member in group.summary_members():
            answer, member.awaiting_sync = member.awaiting_sync, None
            if answer is not None:  # Kafka names the protocol only with an assignment
                answer(sync_answer(code, group if code == ErrorCode.NONE else None, member.assignment))
                self.schedule_heartbeat(group, member)

    # -- SyncGroup -------------------------------------------------------------------------------

    def handle_sync_group(self, body: dict, respond: Respond) -> None:
        group_id, member_id, generation = body["group_id"], body["member_id"], body["generation_id"]
        error = self.group_error(group_id)
        if error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            # Kafka: the rebalance's state went with the old coordinator; REBALANCE_IN_PROGRESS
            # sends the member back to JoinGroup without looking for the coordinator again
            error = ErrorCode.REBALANCE_IN_PROGRESS
        group = self.manager.groups.get(group_id)
        if error is None:
            error = ErrorCode.UNKNOWN_MEMBER_ID if group is None else sync_error(group, body)
        if error is not None or group is None:
            respond(sync_answer(error or ErrorCode.UNKNOWN_MEMBER_ID))
            return
        member = group.members[member_id]
        self.expiry.remove_pending_sync_member(group, member_id)  # in Stable too: it synced after the leader
        if group.is_(GroupState.STABLE):  # the assignment is known: hand it out again
            respond(sync_answer(ErrorCode.NONE, group, member.assignment))
            self.schedule_heartbeat(group, member)
            return
        member.awaiting_sync = respond
        if group.is_leader(member_id):
            given = {a["member_id"]: a["assignment"] for a in body["assignments"]}
            assignment = {m: given.get(m, b"") for m in group.members}
            self.manager.store_group(
                group,
                assignment,
                lambda code: self._on_assignment_stored(group, generation, assignment, code),
            )

    def _on_assignment_stored(
        self, group: GroupMetadata, generation: int, assignment: dict[str, bytes], code: int
    ) -> None:
        # The window named in the module docstring: only the generation that wrote it applies it.
        if not (self.current(group) and group.is_(GroupState.COMPLETING_REBALANCE)):
            return
        if group.generation_id != generation:
            return
        if code != ErrorCode.NONE:
            self._reset_and_propagate_assignment_error(group, code)
            self._maybe_prepare_rebalance(group, f"storing the assignment failed: {ErrorCode(code).name}")
            return
        for member_id, data in assignment.items():
            if member_id in group.members:
                group.members[member_id].assignment = data
        group.transition_to(GroupState.STABLE, self.time_ms())
        self._propagate_assignment(group, ErrorCode.NONE)

    # -- Heartbeat and LeaveGroup ----------------------------------------------------------------

    def handle_heartbeat(self, body: dict, respond: Respond) -> None:
        group_id, member_id = body["group_id"], body["member_id"]
        error = self.group_error(group_id)
        if error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            respond({"error_code": int(ErrorCode.NONE)})  # Kafka answers blindly while loading
            return
        group = self.manager.groups.get(group_id)
        if error is None:
            error = heartbeat_error(group, body)
        if error is None and group is not None:
            self.schedule_heartbeat(group, group.members[member_id])
            if group.is_(GroupState.PREPARING_REBALANCE):
                error = ErrorCode.REBALANCE_IN_PROGRESS
        respond({"error_code": int(error or ErrorCode.NONE)})

    def handle_leave_group(self, body: dict, respond: Respond) -> None:
        group_id = body["group_id"]
        leaving = list(body["members"]) or [{"member_id": body["member_id"], "group_instance_id": None}]
        error = self.group_error(group_id)
        group = self.manager.groups.get(group_id)
        if error is None and group is not None and group.is_(GroupState.DEAD):
            error = ErrorCode.COORDINATOR_NOT_AVAILABLE
        if error is not None:
            respond({"error_code": int(error), "members": []})
            return
        results = []
        for entry in leaving:
            code = self._leave(group, entry) if group else ErrorCode.UNKNOWN_MEMBER_ID
            results.append({**entry, "error_code": int(code)})
        top = results[0]["error_code"] if len(results) == 1 and not body["members"] else ErrorCode.NONE
        respond({"error_code": int(top), "members": results})

    def _leave(self, group: GroupMetadata, entry: dict) -> int:
        """One member of a LeaveGroup: by member id, or a static one by its group.instance.id
        alone (KIP-345's admin removal); an old incarnation of a static member is fenced."""
        member_id, instance = entry["member_id"], entry["group_instance_id"]
        if member_id and group.is_static_member_fenced(member_id, instance):
            return ErrorCode.FENCED_INSTANCE_ID
        if not member_id and instance is not None:
            member_id = group.static_members.get(instance, "")
        return self._remove(group, member_id, "the member left the group")

    def _remove(self, group: GroupMetadata, member_id: str, reason: str) -> int:
        if member_id in group.pending_members:
            group.pending_members.discard(member_id)
            self._check_join(group)
            return ErrorCode.NONE
        if not group.has(member_id):
            return ErrorCode.UNKNOWN_MEMBER_ID
        self.remove_member_and_update_group(group, group.members[member_id], reason)
        return ErrorCode.NONE

    def remove_member_and_update_group(
        self, group: GroupMetadata, member: MemberMetadata, reason: str
    ) -> None:
        """Kafka's removeMemberAndUpdateGroup: answer what it waits for, drop it, rebalance."""
        if member.awaiting_join is not None:  # Kafka answers it without a member id
            member.awaiting_join(join_error(UNKNOWN_MEMBER_ID, ErrorCode.UNKNOWN_MEMBER_ID))
            member.awaiting_join = None
        group.remove(member.member_id)
        member.heartbeat_token += 1  # any expiration still scheduled is now void
        log.info("member %s left group %s: %s", member.member_id, group.group_id, reason)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group, f"removing member {member.member_id}: {reason}")
        elif group.is_(GroupState.PREPARING_REBALANCE):
            self._check_join(group)

    # -- member timers (broker/coordinator/member_expiry.py) --------------------------------------

    def schedule_heartbeat(
        self, group: GroupMetadata, member: MemberMetadata, timeout_ms: int | None = None
    ) -> None:
        """Kafka's completeAndScheduleNextHeartbeatExpiration."""
        self.expiry.schedule_heartbeat(group, member, timeout_ms)

    def check_join(self, group: GroupMetadata) -> None:
        self._check_join(group)

    # -- leadership of the offsets partitions ----------------------------------------------------

    def on_groups_loaded(self, groups: list[GroupMetadata]) -> None:
        """Kafka's onGroupLoaded: every loaded member gets a fresh session."""
        for group in groups:
            for member in group.summary_members():
                self.schedule_heartbeat(group, member)

    def on_groups_unloaded(self, groups: list[GroupMetadata]) -> None:
        """Kafka's onGroupUnloaded: the group is Dead here; whoever waits hears NOT_COORDINATOR."""
        for group in groups:
            timer = self._join_timers.pop(group.group_id, None)
            if timer is not None:
                timer.cancel()
            self._initial_delay.discard(group.group_id)
            group.transition_to(GroupState.DEAD, self.time_ms())
            self.expiry.remove_sync_expiration(group)
            for member in group.summary_members():
                if member.awaiting_join is not None:
                    member.awaiting_join(join_error(member.member_id, ErrorCode.NOT_COORDINATOR))
                    member.awaiting_join = None
                if member.awaiting_sync is not None:
                    member.awaiting_sync(sync_answer(ErrorCode.NOT_COORDINATOR))
                    member.awaiting_sync = None
