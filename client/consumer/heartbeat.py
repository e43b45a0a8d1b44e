"""The member's heartbeat (Kafka's AbstractCoordinator.HeartbeatThread; docs/design.md
"Consumer groups"): a Heartbeat every ``heartbeat_interval_ms`` while the member holds a
generation. When ``poll`` was not called for ``max_poll_interval_ms`` it leaves the group as
Kafka's thread does (maybeLeaveGroup: LeaveGroup, then resetGenerationOnLeaveGroup), keeping the
assignment: the next ``poll``'s onJoinPrepare sees no generation and reports the partitions lost
before giving them up. Each heartbeat's answer is handled against the generation it was sent
with, so a fenced answer about a generation the member has already left resets nothing (Kafka's
generationUnchanged()). Auto commit is no background task: ``poll`` drives it
(:mod:`client.consumer.auto_commit`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from client.consumer.config import ConsumerConfig
from client.protocol.api import ApiKey
from client.protocol.errors import KafkaError

log = logging.getLogger("client.consumer.group_coordinator")

NO_GENERATION = -1


class Member(Protocol):
    """What the loops use of :class:`client.consumer.group_coordinator.ConsumerCoordinator`."""

    config: ConsumerConfig
    group_id: str
    generation: int
    member_id: str
    need_rejoin: bool
    last_poll: float

    async def _send(self, api_key: ApiKey, body: dict, timeout_ms: int | None = None) -> dict: ...

    def _on_heartbeat(self, code: int, sent: tuple[int, str]) -> None: ...

    async def maybe_leave_group(self, reason: str) -> None: ...


async def heartbeat_loop(member: Member) -> None:
    interval = member.config.heartbeat_interval_ms / 1000
    while True:
        await asyncio.sleep(interval)
        if member.need_rejoin or member.generation == NO_GENERATION:
            continue
        if _poll_overdue(member):
            log.warning(
                "group %s: poll not called for max_poll_interval_ms=%d: leaving the group",
                member.group_id, member.config.max_poll_interval_ms,
            )  # fmt: skip
            await member.maybe_leave_group("consumer poll timeout has expired")
            continue
        sent = (member.generation, member.member_id)
        try:
            answer = await member._send(
                ApiKey.HEARTBEAT,
                {"group_id": member.group_id, "generation_id": member.generation, "member_id": member.member_id,
                 "group_instance_id": member.config.group_instance_id},
            )  # fmt: skip
        except KafkaError as exc:
            log.debug("group %s: heartbeat failed: %s", member.group_id, exc)
            continue
        member._on_heartbeat(answer["error_code"], sent)


def _poll_overdue(member: Member) -> bool:
    return asyncio.get_running_loop().time() - member.last_poll > member.config.max_poll_interval_ms / 1000
