"""The group coordinator's timers on members (Kafka's DelayedHeartbeat and DelayedSync, with the
pending-member expiry of KIP-394; docs/design.md "Consumer groups").

* **heartbeat expiry** (DelayedHeartbeat): a member whose heartbeats stop for its
  ``session.timeout.ms`` is removed, unless it is waiting in JoinGroup (an old member) or in
  SyncGroup; each heartbeat bumps the member's token, which voids the expiry scheduled before;
* **pending-member expiry** (KIP-394): an id handed out with MEMBER_ID_REQUIRED whose JoinGroup
  never comes back is forgotten after the session timeout;
* **pending-sync expiry** (DelayedSync, KAFKA-12890): when a join completes every member is
  pending sync; a member's SyncGroup takes it out; one timer per group, for the generation that
  started, expels whoever is still pending after the rebalance timeout, in CompletingRebalance
  or Stable, and rebalances. Heartbeats alone never keep a member that did not sync: without
  this a leader whose assignor hangs while it heartbeats holds every follower's SyncGroup for
  ever. A newer rebalance, an unload, or everyone syncing cancels it; a timer that fires anyway
  checks it is still the group's latest, of the same generation, on a group still loaded.

Sans-IO: timers through the injected :class:`Timers`, time through ``time_ms``; what to do when
one fires is the coordinator's (:class:`ExpiryActions`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from broker.coordinator.group_metadata import GroupMetadata, GroupState, MemberMetadata
from broker.coordinator.group_responses import Cancellable, Timers

log = logging.getLogger(__name__)


class ExpiryActions(Protocol):
    """What the coordinator does when a member's timer fires."""

    def current(self, group: GroupMetadata) -> bool: ...

    def remove_member_and_update_group(
        self, group: GroupMetadata, member: MemberMetadata, reason: str
    ) -> None: ...

    def prepare_rebalance(self, group: GroupMetadata, reason: str) -> None: ...

    def check_join(self, group: GroupMetadata) -> None: ...


class MemberExpiry:
    def __init__(self, actions: ExpiryActions, timers: Timers, time_ms: Callable[[], int]) -> None:
        self._actions = actions
        self._timers = timers
        self._time_ms = time_ms
        #: each group's DelayedSync, one at a time, for its current generation
        self._sync_timers: dict[str, Cancellable] = {}

    # -- heartbeats (DelayedHeartbeat) -------------------------------------------------------------

    def schedule_heartbeat(
        self, group: GroupMetadata, member: MemberMetadata, timeout_ms: int | None = None
    ) -> None:
        """Kafka's completeAndScheduleNextHeartbeatExpiration."""
        member.latest_heartbeat_ms = self._time_ms()
        member.heartbeat_token += 1
        token = member.heartbeat_token
        delay = member.session_timeout_ms if timeout_ms is None else timeout_ms
        self._timers.call_later(delay, lambda: self._on_expire_heartbeat(group, member, token, delay))

    def _on_expire_heartbeat(
        self, group: GroupMetadata, member: MemberMetadata, token: int, delay: int
    ) -> None:
        if (
            token != member.heartbeat_token
            or not self._actions.current(group)
            or group.members.get(member.member_id) is not member
        ):
            return
        keep = (member.awaiting_join is not None and not member.is_new) or member.awaiting_sync is not None
        if not keep:
            self._actions.remove_member_and_update_group(group, member, f"no heartbeat for {delay} ms")

    def schedule_pending_expiration(self, group: GroupMetadata, member_id: str, timeout_ms: int) -> None:
        """KIP-394: a pending member that never joins with its id is forgotten."""

        def expire() -> None:
            if self._actions.current(group) and member_id in group.pending_members:
                group.pending_members.discard(member_id)
                log.info("pending member %s of group %s never joined: removed", member_id, group.group_id)
                self._actions.check_join(group)

        self._timers.call_later(timeout_ms, expire)

    # -- pending sync (DelayedSync, KAFKA-12890) -------------------------------------------------

    def schedule_pending_sync(self, group: GroupMetadata) -> None:
        """Kafka's schedulePendingSync: a DelayedSync of the group's rebalance timeout, for the
        generation that just started."""
        self._cancel_sync_timer(group.group_id)
        generation = group.generation_id

        def on_timer() -> None:
            if self._sync_timers.get(group.group_id) is handle:
                del self._sync_timers[group.group_id]
                self._on_expire_pending_sync(group, generation)

        handle = self._timers.call_later(group.rebalance_timeout_ms(), on_timer)
        self._sync_timers[group.group_id] = handle

    def remove_pending_sync_member(self, group: GroupMetadata, member_id: str) -> None:
        """Kafka's removePendingSyncMember: its SyncGroup arrived."""
        group.pending_sync_members.discard(member_id)
        self._maybe_complete_sync_expiration(group)

    def remove_sync_expiration(self, group: GroupMetadata) -> None:
        """Kafka's removeSyncExpiration: a rebalance began or the group died; nobody is pending."""
        group.pending_sync_members.clear()
        self._maybe_complete_sync_expiration(group)

    def _maybe_complete_sync_expiration(self, group: GroupMetadata) -> None:
        """Kafka's tryCompletePendingSync: once nobody is pending the DelayedSync is done."""
        if group.has_received_sync_from_all_members():
            self._cancel_sync_timer(group.group_id)

    def _cancel_sync_timer(self, group_id: str) -> None:
        timer = self._sync_timers.pop(group_id, None)
        if timer is not None:
            timer.cancel()

    def _on_expire_pending_sync(self, group: GroupMetadata, generation: int) -> None:
        """Kafka's onExpirePendingSync: the members of this generation that never sent SyncGroup
        are removed and the group rebalances (in CompletingRebalance every waiting SyncGroup
        hears REBALANCE_IN_PROGRESS); a DelayedSync of an older generation does nothing."""
        if not self._actions.current(group) or group.generation_id != generation:
            return
        if group.state not in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            return
        pending = [m for m in group.members.values() if m.member_id in group.pending_sync_members]
        if not pending:
            return
        for member in pending:
            group.remove(member.member_id)
            member.heartbeat_token += 1  # Kafka's removeHeartbeatForLeavingMember
        ids = [m.member_id for m in pending]
        log.info(
            "group %s generation %d: members %s did not send SyncGroup within the rebalance timeout: removed",
            group.group_id, generation, ids,
        )  # fmt: skip
        self._actions.prepare_rebalance(group, f"removing {ids} on pending sync request expiration")
