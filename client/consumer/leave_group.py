"""Leaving a group (Kafka's ConsumerCoordinator.onLeavePrepare, AbstractCoordinator.maybeLeaveGroup
and close, LegacyKafkaConsumer.unsubscribe; docs/design.md "Consumer groups"): the rebalance
listener hears about the partitions while they are still assigned (revoked, or lost when the
generation was reset or a rebalance is under way), then a dynamic member sends LeaveGroup and
resets its generation and member id, never its assignment. The
:class:`~client.consumer.group_coordinator.ConsumerCoordinator` is a :class:`GroupLeave`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from client.consumer.auto_commit import AutoCommit
from client.consumer.offset_commits import NO_GENERATION, UNKNOWN_MEMBER_ID, MemberState, OffsetCommits
from client.consumer.rebalance_listener import invoke_partitions_lost, invoke_partitions_revoked
from client.protocol.api import ApiKey
from client.protocol.errors import KafkaError

log = logging.getLogger(__name__)


class GroupLeave(OffsetCommits):
    """The ConsumerCoordinator provides these too (annotations only)."""

    listener: object
    auto_commit: AutoCommit | None
    _join_task: asyncio.Task | None
    _heartbeat_task: asyncio.Task | None
    _refresh_task: asyncio.Task | None
    subscribe: Callable[..., None]

    async def on_leave_prepare(self) -> None:
        """Kafka's ConsumerCoordinator.onLeavePrepare: before leaving, the listener hears about
        the partitions while they are still assigned (lost when the generation was reset or a
        rebalance is under way, else revoked), then the assignment is cleared, also when the
        listener raises."""
        owned = self._subscriptions.assigned()
        if not self.subscribed or not owned:
            return
        try:
            if (
                self.generation == NO_GENERATION
                or self.member_id == UNKNOWN_MEMBER_ID
                or self.rebalance_in_progress()
            ):
                await invoke_partitions_lost(self.listener, owned)
            else:
                await invoke_partitions_revoked(self.listener, owned)
        finally:
            self._subscriptions.assign([])

    async def maybe_leave_group(self, reason: str) -> None:
        """Kafka's maybeLeaveGroup: LeaveGroup when this is a dynamic member (no
        ``group_instance_id``) in a generation or joining one, then resetGenerationOnLeaveGroup
        (generation and member id gone, a rejoin needed). The assignment is left as it is."""
        member = self.member_id
        send = (
            self.config.group_instance_id is None and self.state is not MemberState.UNJOINED and bool(member)
        )
        self.reset_generation()
        if not send:
            return
        log.info("group %s: member %s leaves the group: %s", self.group_id, member, reason)
        try:
            await self._send(ApiKey.LEAVE_GROUP, {"group_id": self.group_id, "member_id": member})
        except KafkaError as exc:
            log.info("group %s: LeaveGroup failed: %s", self.group_id, exc)

    async def unsubscribe(self) -> None:
        """Kafka's LegacyKafkaConsumer.unsubscribe: onLeavePrepare, maybeLeaveGroup, then the
        subscription is dropped. A join still under way (a poll ran out of time) is stopped
        first, so it cannot hand out an assignment after this."""
        join = self._join_task
        if join is not None and not join.done() and join is not asyncio.current_task():
            join.cancel()
            await asyncio.wait([join])
        try:
            await self.on_leave_prepare()
        finally:
            await self.maybe_leave_group("the consumer unsubscribed from all topics")
            self.subscribe(set(), None, None)
            self.need_rejoin = False

    async def close(self) -> None:
        """Auto commit (waiting for the one in flight), onLeavePrepare, leave the group, stop the
        background tasks; bounded by ``request_timeout_ms`` when the coordinator cannot be
        reached. A rebalance listener's error is raised once the member has left."""
        try:
            await asyncio.wait_for(self._close(), self.config.request_timeout_ms / 1000)
        except TimeoutError:
            log.warning(
                "group %s: closing timed out; the coordinator expels this member later", self.group_id
            )

    async def _close(self) -> None:
        tasks = [t for t in (self._heartbeat_task, self._join_task, self._refresh_task) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self.auto_commit is not None:  # Kafka's maybeAutoCommitOffsetsSync
            await self.auto_commit.wait_in_flight()
            try:
                await self.commit()
            except KafkaError as exc:
                log.warning("group %s: commit on close failed: %s", self.group_id, exc)
        try:
            await self.on_leave_prepare()
        finally:
            await self.maybe_leave_group("the consumer is being closed")
