"""Partition reassignments as the AdminClient asks for them (Kafka's Admin
``alterPartitionReassignments`` and ``listPartitionReassignments``, KIP-455; docs/design.md
"Client").

Both requests go to any broker, which writes or reads ``/admin/reassign_partitions`` in
ZooKeeper for the controller to act on; the admin tries another broker after a lost connection
until ``timeout_ms`` runs out. AlterPartitionReassignments is all or nothing: when the broker
refuses any partition nothing is written, the refused partitions carry their error and the
others INVALID_REQUEST ``not written: ...``. A request-level ``error_code`` raises KafkaError.

A resend after a lost answer may meet the refusal the first send's success causes
(REASSIGNMENT_IN_PROGRESS for the partitions it started). So when an answer was lost and the
resend is refused, the admin lists the reassignments in progress and describes the topics: if
every partition asked is moving to the brokers asked, or already has exactly the replicas asked,
the first send landed and every partition counts as done. (Our broker resolves a resend of its own request
itself, from the znode; this covers any broker that answers REASSIGNMENT_IN_PROGRESS instead.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from client.metadata import Cluster
from client.protocol.api import ApiKey
from client.protocol.errors import ErrorCode, KafkaError
from client.types import PartitionReassignment, TopicDescription, TopicPartition


def _grouped(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    grouped: dict[str, list[int]] = {}
    for topic, partition in partitions:
        grouped.setdefault(topic, []).append(int(partition))
    return {topic: sorted(set(ps)) for topic, ps in sorted(grouped.items())}


def alter_body(reassignments: Mapping[TopicPartition, Sequence[int]], timeout_ms: int) -> dict:
    """The AlterPartitionReassignments request for ``reassignments`` (partition -> target)."""
    topics: dict[str, list[dict]] = {}
    for (topic, partition), replicas in sorted(reassignments.items()):
        entry = {"partition_index": int(partition), "replicas": [int(r) for r in replicas]}
        topics.setdefault(topic, []).append(entry)
    return {
        "timeout_ms": timeout_ms,
        "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()],
    }


def alter_results(response: dict, asked: Iterable[TopicPartition]) -> dict[TopicPartition, KafkaError | None]:
    """Partition -> None or its error; a request-level error raised, a partition missing from
    the answer UNKNOWN_SERVER_ERROR."""
    _raise_top_level(response, "alter partition reassignments")
    answered = {
        TopicPartition(t["name"], p["partition_index"]): (
            None
            if p["error_code"] == ErrorCode.NONE
            else KafkaError(p["error_code"], p.get("error_message") or "")
        )
        for t in response["responses"]
        for p in t["partitions"]
    }
    missing = KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, "not in the response")
    return {TopicPartition(*tp): answered.get(TopicPartition(*tp), missing) for tp in asked}


def list_results(response: dict) -> dict[TopicPartition, PartitionReassignment]:
    _raise_top_level(response, "list partition reassignments")
    return {
        TopicPartition(t["name"], p["partition_index"]): PartitionReassignment(
            list(p["replicas"]), list(p["adding_replicas"]), list(p["removing_replicas"])
        )
        for t in response["topics"]
        for p in t["partitions"]
    }


def _raise_top_level(response: dict, what: str) -> None:
    if response["error_code"] != ErrorCode.NONE:
        message = response.get("error_message") or "the broker refused the request"
        raise KafkaError(response["error_code"], f"{what}: {message}")


def target_replicas(reassignment: PartitionReassignment) -> list[int]:
    """Where a reassignment in progress is going: its replicas without the leaving ones (Kafka's
    ``ReplicaAssignment.targetReplicas``)."""
    return [r for r in reassignment.replicas if r not in reassignment.removing_replicas]


class PartitionReassignmentsMixin:
    """AdminClient's reassignment methods (mixed into :class:`client.admin.AdminClient`)."""

    _cluster: Cluster
    retry_backoff_ms: int

    if TYPE_CHECKING:

        async def describe_topics(self, names: Iterable[str] | None = None) -> list[TopicDescription]: ...

    async def alter_partition_reassignments(
        self, reassignments: Mapping[TopicPartition, Sequence[int]], timeout_ms: int = 60000
    ) -> dict[TopicPartition, KafkaError | None]:
        """Move each partition to the replicas given, first the preferred leader (Kafka's
        ``alterPartitionReassignments``, KIP-455). Partition -> None (started) or its error:
        the broker starts all of them or none."""
        asked = [TopicPartition(*tp) for tp in reassignments]
        if not asked:
            return {}
        body = alter_body(reassignments, timeout_ms)
        response, in_doubt = await self._to_any_broker(
            ApiKey.ALTER_PARTITION_REASSIGNMENTS, body, timeout_ms, "alter partition reassignments"
        )
        results = alter_results(response, asked)
        if in_doubt and any(error is not None for error in results.values()):
            targets = {TopicPartition(*tp): list(replicas) for tp, replicas in reassignments.items()}
            if await self._landed(targets, timeout_ms):
                return dict.fromkeys(asked)
        return results

    async def list_partition_reassignments(
        self, partitions: Iterable[TopicPartition] | None = None, timeout_ms: int = 60000
    ) -> dict[TopicPartition, PartitionReassignment]:
        """The reassignments in progress (Kafka's ``listPartitionReassignments``, KIP-455) among
        ``partitions`` (None: all of them); a partition not being reassigned is left out."""
        topics = None
        if partitions is not None:
            topics = [{"name": t, "partition_indexes": ps} for t, ps in _grouped(partitions).items()]
        response, _ = await self._to_any_broker(
            ApiKey.LIST_PARTITION_REASSIGNMENTS,
            {"timeout_ms": timeout_ms, "topics": topics},
            timeout_ms,
            "list partition reassignments",
        )
        return list_results(response)

    async def _landed(self, targets: dict[TopicPartition, list[int]], timeout_ms: int) -> bool:
        """Whether every partition of ``targets`` is moving to, or already has, its target. A move
        is compared as a set: a broker's ``replicas`` (ZooKeeper's AR while it runs) need not keep
        the target's order."""
        try:
            moving = await self.list_partition_reassignments(targets, timeout_ms)
            descriptions = await self.describe_topics({tp.topic for tp in targets})
        except KafkaError:
            return False
        current = {
            TopicPartition(d.name, p.partition): list(p.replicas) for d in descriptions for p in d.partitions
        }
        return all(
            sorted(target_replicas(moving[tp])) == sorted(target)
            if tp in moving
            else current.get(tp) == target
            for tp, target in targets.items()
        )

    async def _to_any_broker(self, api: ApiKey, body: dict, timeout_ms: int, what: str) -> tuple[dict, bool]:
        """``body`` to any broker, again after a retriable failure until ``timeout_ms``. Returns
        the answer and whether an earlier attempt was sent and its answer lost (in doubt)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000
        in_doubt = False
        while True:
            conn = None
            try:
                conn = await self._cluster.any_connection()
                response = await conn.request(api, body, timeout=max(0.1, deadline - loop.time()) + 5)
                return response, in_doubt
            except KafkaError as exc:
                if not exc.retriable or loop.time() + self.retry_backoff_ms / 1000 >= deadline:
                    raise KafkaError(exc.code, f"{what}: {exc.message}") from None
                in_doubt = in_doubt or conn is not None
                self._cluster.invalidate()
                await asyncio.sleep(self.retry_backoff_ms / 1000)
