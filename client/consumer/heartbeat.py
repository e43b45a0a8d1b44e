"""The member's background work (Kafka's AbstractCoordinator.HeartbeatThread and the consumer's
auto commit; docs/design.md "Consumer groups"): a Heartbeat every ``heartbeat_interval_ms`` while
the member holds a generation (leaving the group when ``poll`` was not called for
``max_poll_interval_ms``, as Kafka's heartbeat thread does), and a commit of the positions every
``auto_commit_interval_ms`` with ``enable_auto_commit``. Each heartbeat's answer is handled
against the generation it was sent with, so a fenced answer about a generation the member has
already left resets nothing (Kafka's generationUnchanged()); auto commit runs only under a held
generation, and a commit of a member fenced meanwhile is refused, never sent as a standalone
consumer's (:mod:`client.consumer.offset_commits`).
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

    async def leave_group(self) -> None: ...

    async def commit(self) -> None: ...


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
            await member.leave_group()
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


async def auto_commit_loop(member: Member) -> None:
    while True:
        await asyncio.sleep(member.config.auto_commit_interval_ms / 1000)
        if member.need_rejoin or member.generation == NO_GENERATION:
            continue
        try:
            await member.commit()
        except KafkaError as exc:
            log.warning("group %s: auto commit failed: %s", member.group_id, exc)
