"""Consumer groups as the AdminClient sees them (Kafka's Admin ``listConsumerGroups``,
``describeConsumerGroups``, ``listConsumerGroupOffsets``, ``alterConsumerGroupOffsets`` and
``deleteConsumerGroups``, KIP-222 and KIP-396; seed 004; docs/operations.md "Consumer groups").

Listing asks every live broker (ListGroups answers only the groups the asked broker coordinates)
and merges the answers; a broker still loading its ``__consumer_offsets`` partitions
(COORDINATOR_LOAD_IN_PROGRESS) or unreachable is asked again until the timeout. As Kafka's
admin does, only consumer groups are listed: protocol type "consumer", or "" for a group that
only has committed offsets.

Every other call goes to the group's coordinator: FindCoordinator at any broker, then the request
there. NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE (also FindCoordinator's answer while
``__consumer_offsets`` is being created) and COORDINATOR_LOAD_IN_PROGRESS, and a lost
connection, send it again through a fresh FindCoordinator after ``retry_backoff_ms``, until the
timeout (default ``request_timeout_ms``).

* describe: DescribeGroups. An unknown group comes back with state ``Dead`` (Kafka's tool says
  "Consumer group 'x' does not exist."); members' assignments are Kafka's ConsumerProtocol
  bytes, present only while the group is Stable.
* offsets: OffsetFetch; partitions without a committed offset (-1) are left out.
* alter offsets: OffsetCommit with generation -1 and member "" (a "simple" consumer), which the
  coordinator accepts only while the group has no members (else UNKNOWN_MEMBER_ID); a refused
  partition raises its KafkaError naming the partition.
* delete: DeleteGroups; NON_EMPTY_GROUP while members exist, GROUP_ID_NOT_FOUND for an unknown
  group. Returns group -> None or the error code.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping

from client.metadata import Cluster
from client.protocol.api import ApiKey
from client.protocol.consumer_protocol import PROTOCOL_TYPE, ConsumerProtocolError, decode_assignment
from client.protocol.errors import ErrorCode, KafkaError
from client.protocol.group_schemas import GROUP_KEY_TYPE
from client.types import (
    ConsumerGroupDescription,
    ConsumerGroupListing,
    MemberDescription,
    OffsetAndMetadata,
    TopicPartition,
)

log = logging.getLogger(__name__)

#: Answers after which the request goes again through a fresh FindCoordinator.
COORDINATOR_RETRY = frozenset(
    {ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}
)
#: A DescribeGroups state for a group the coordinator does not know.
DEAD = "Dead"


def _grouped(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    grouped: dict[str, list[int]] = {}
    for topic, partition in partitions:
        grouped.setdefault(topic, []).append(int(partition))
    return {topic: sorted(set(ps)) for topic, ps in sorted(grouped.items())}


def group_description(item: dict, coordinator: int) -> ConsumerGroupDescription:
    """A DescribeGroups answer item as Kafka's ConsumerGroupDescription (assignments decoded)."""
    consumer = item["protocol_type"] == PROTOCOL_TYPE
    members = []
    for m in item["members"]:
        assignment: tuple[TopicPartition, ...] = ()
        if consumer and m["member_assignment"]:
            try:
                decoded = decode_assignment(m["member_assignment"])
                assignment = tuple(sorted(TopicPartition(*tp) for tp in decoded.partitions))
            except ConsumerProtocolError as exc:
                log.warning(
                    "group %s member %s: undecodable assignment: %s", item["group_id"], m["member_id"], exc
                )
        members.append(
            MemberDescription(
                m["member_id"], m.get("group_instance_id"), m["client_id"], m["client_host"], assignment
            )
        )
    return ConsumerGroupDescription(
        group_id=item["group_id"],
        state=item["group_state"],
        protocol_type=item["protocol_type"],
        protocol=item["protocol_data"],
        coordinator=coordinator,
        members=tuple(members),
    )


class ConsumerGroupsMixin:
    """AdminClient's consumer group methods (mixed into :class:`client.admin.AdminClient`)."""

    _cluster: Cluster
    retry_backoff_ms: int
    request_timeout_ms: int

    # -- ListGroups at every broker ----------------------------------------------------------------

    async def list_consumer_groups(self, timeout_ms: int | None = None) -> list[ConsumerGroupListing]:
        """Every consumer group of the cluster, sorted by id (Kafka's ``listConsumerGroups``):
        ListGroups at each live broker, merged."""
        deadline = self._deadline(timeout_ms)
        await self._cluster.refresh([])
        brokers = sorted(self._cluster.brokers)
        answers = await asyncio.gather(*(self._list_groups_at(node, deadline) for node in brokers))
        found: dict[str, ConsumerGroupListing] = {}
        for groups in answers:
            for g in groups:
                if g["protocol_type"] in (PROTOCOL_TYPE, ""):
                    found[g["group_id"]] = ConsumerGroupListing(
                        g["group_id"], g["protocol_type"], g.get("group_state") or None
                    )
        return [found[g] for g in sorted(found)]

    async def _list_groups_at(self, node: int, deadline: float) -> list[dict]:
        """ListGroups at ``node`` until it answers; a broker gone from the metadata meanwhile is
        no longer live (its offsets partitions moved): it has nothing to list."""
        loop = asyncio.get_running_loop()
        retry = False
        while True:
            try:
                if retry:
                    await self._cluster.refresh([])
                    if self._cluster.broker(node) is None:
                        return []
                retry = True
                conn = await self._cluster.connection(node)
                response = await conn.request(
                    ApiKey.LIST_GROUPS, {"states_filter": []}, timeout=max(0.1, deadline - loop.time())
                )
                code = response["error_code"]
                if code != ErrorCode.NONE:
                    raise KafkaError(code, f"list groups at broker {node} failed")
                return response["groups"]
            except KafkaError as exc:
                if not exc.retriable or loop.time() + self.retry_backoff_ms / 1000 >= deadline:
                    raise KafkaError(exc.code, f"list consumer groups: {exc.message}") from None
                await asyncio.sleep(self.retry_backoff_ms / 1000)

    # -- at the group's coordinator ----------------------------------------------------------------

    async def describe_consumer_groups(
        self, group_ids: Iterable[str], timeout_ms: int | None = None
    ) -> dict[str, ConsumerGroupDescription]:
        """Each group as its coordinator describes it (Kafka's ``describeConsumerGroups``); an
        unknown group has state ``Dead``."""
        deadline = self._deadline(timeout_ms)
        ids = list(dict.fromkeys(group_ids))

        async def one(group_id: str) -> ConsumerGroupDescription:
            node, response = await self._at_coordinator(
                group_id,
                ApiKey.DESCRIBE_GROUPS,
                {"groups": [group_id]},
                lambda r: r["groups"][0]["error_code"] if r["groups"] else ErrorCode.UNKNOWN_SERVER_ERROR,
                deadline,
            )
            item = next((g for g in response["groups"] if g["group_id"] == group_id), None)
            if item is None:
                raise KafkaError(
                    ErrorCode.UNKNOWN_SERVER_ERROR, f"describe group {group_id!r}: not in the answer"
                )
            if item["error_code"] != ErrorCode.NONE:
                raise KafkaError(item["error_code"], f"describe consumer group {group_id!r} failed")
            return group_description(item, node)

        described = await asyncio.gather(*(one(g) for g in ids))
        return dict(zip(ids, described, strict=True))

    async def list_consumer_group_offsets(
        self,
        group_id: str,
        partitions: Iterable[TopicPartition] | None = None,
        timeout_ms: int | None = None,
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """The group's committed offsets (Kafka's ``listConsumerGroupOffsets``): of ``partitions``,
        or every one it has (None). Partitions with nothing committed are left out."""
        topics = None
        if partitions is not None:
            topics = [{"topic": t, "partitions": ps} for t, ps in _grouped(partitions).items()]
        _, response = await self._at_coordinator(
            group_id,
            ApiKey.OFFSET_FETCH,
            {"group_id": group_id, "topics": topics},
            lambda r: r["error_code"],
            self._deadline(timeout_ms),
        )
        if response["error_code"] != ErrorCode.NONE:
            raise KafkaError(response["error_code"], f"list offsets of consumer group {group_id!r} failed")
        out: dict[TopicPartition, OffsetAndMetadata] = {}
        for t in response["topics"]:
            for p in t["partitions"]:
                tp = TopicPartition(t["topic"], p["partition"])
                if p["error_code"] != ErrorCode.NONE:
                    raise KafkaError(p["error_code"], f"offset of {tp} for consumer group {group_id!r}")
                if p["committed_offset"] >= 0:
                    out[tp] = OffsetAndMetadata(
                        p["committed_offset"], p.get("metadata") or "", p.get("committed_leader_epoch", -1)
                    )
        return dict(sorted(out.items()))

    async def alter_consumer_group_offsets(
        self,
        group_id: str,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | int],
        timeout_ms: int | None = None,
    ) -> None:
        """Commit ``offsets`` for the group as a consumer outside it (Kafka's
        ``alterConsumerGroupOffsets``: generation -1, member ""): only while the group has no
        members. Raises the first refused partition's KafkaError."""
        if not offsets:
            return
        topics: dict[str, list[dict]] = {}
        for tp, om in sorted(offsets.items()):
            om = om if isinstance(om, OffsetAndMetadata) else OffsetAndMetadata(int(om))
            topics.setdefault(tp[0], []).append(
                {
                    "partition": int(tp[1]),
                    "committed_offset": om.offset,
                    "committed_leader_epoch": om.leader_epoch,
                    "committed_metadata": om.metadata,
                }
            )
        body = {
            "group_id": group_id,
            "generation_id": -1,
            "member_id": "",
            "group_instance_id": None,
            "retention_time_ms": -1,
            "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
        }
        _, response = await self._at_coordinator(
            group_id, ApiKey.OFFSET_COMMIT, body, _first_partition_error, self._deadline(timeout_ms)
        )
        for t in response["topics"]:
            for p in t["partitions"]:
                if p["error_code"] != ErrorCode.NONE:
                    raise KafkaError(
                        p["error_code"],
                        f"alter offsets of consumer group {group_id!r}: {t['topic']}-{p['partition']} refused",
                    )

    async def delete_consumer_groups(
        self, group_ids: Iterable[str], timeout_ms: int | None = None
    ) -> dict[str, int | None]:
        """Delete each group with its committed offsets (Kafka's ``deleteConsumerGroups``):
        group -> None, or the error code (NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND ...)."""
        deadline = self._deadline(timeout_ms)
        ids = list(dict.fromkeys(group_ids))

        async def one(group_id: str) -> int | None:
            def code_of(response: dict) -> int:
                mine = [r["error_code"] for r in response["results"] if r["group_id"] == group_id]
                return mine[0] if mine else ErrorCode.UNKNOWN_SERVER_ERROR

            try:
                _, response = await self._at_coordinator(
                    group_id, ApiKey.DELETE_GROUPS, {"groups_names": [group_id]}, code_of, deadline
                )
            except KafkaError as exc:
                return exc.code
            code = code_of(response)
            return None if code == ErrorCode.NONE else int(code)

        results = await asyncio.gather(*(one(g) for g in ids))
        return dict(zip(ids, results, strict=True))

    # -- plumbing ------------------------------------------------------------------------------------

    def _deadline(self, timeout_ms: int | None) -> float:
        wait = self.request_timeout_ms if timeout_ms is None else timeout_ms
        return asyncio.get_running_loop().time() + wait / 1000

    async def _at_coordinator(
        self,
        group_id: str,
        api: ApiKey,
        body: dict,
        error_of: Callable[[dict], int],
        deadline: float,
    ) -> tuple[int, dict]:
        """``body`` to the group's coordinator: (its broker id, the answer). A coordinator error
        in the answer (``error_of``) or a lost connection looks the coordinator up again after a
        backoff; at the deadline the last answer is returned (or the last error raised)."""
        loop = asyncio.get_running_loop()
        backoff = self.retry_backoff_ms / 1000
        while True:
            try:
                node = await self._find_coordinator(group_id, deadline)
                conn = await self._cluster.connection(node)
                response = await conn.request(api, body, timeout=max(0.1, deadline - loop.time()))
            except KafkaError as exc:
                if not exc.retriable or loop.time() + backoff >= deadline:
                    raise KafkaError(
                        exc.code, f"{api.name.lower()} for group {group_id!r}: {exc.message}"
                    ) from None
                self._cluster.invalidate()
                await asyncio.sleep(backoff)
                continue
            if error_of(response) not in COORDINATOR_RETRY or loop.time() + backoff >= deadline:
                return node, response
            log.debug(
                "group %s: %s answered %s: retrying", group_id, api.name, ErrorCode(error_of(response)).name
            )
            await asyncio.sleep(backoff)

    async def _find_coordinator(self, group_id: str, deadline: float) -> int:
        """FindCoordinator at any broker; a coordinator error raises its (retriable) KafkaError."""
        loop = asyncio.get_running_loop()
        conn = await self._cluster.any_connection()
        answer = await conn.request(
            ApiKey.FIND_COORDINATOR,
            {"key": group_id, "key_type": GROUP_KEY_TYPE},
            timeout=max(0.1, deadline - loop.time()),
        )
        if answer["error_code"] != ErrorCode.NONE:
            message = answer.get("error_message") or "no coordinator"
            raise KafkaError(answer["error_code"], f"finding the coordinator: {message}")
        node = answer["node_id"]
        if self._cluster.broker(node) is None:
            await self._cluster.refresh([])
        return node


def _first_partition_error(response: dict) -> int:
    """An OffsetCommit answer's first partition error (coordinator errors fail every partition)."""
    for t in response["topics"]:
        for p in t["partitions"]:
            if p["error_code"] != ErrorCode.NONE:
                return p["error_code"]
    return ErrorCode.NONE
