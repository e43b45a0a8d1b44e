"""The group APIs of KafkaApis (Kafka's handleFindCoordinatorRequest, handleJoinGroupRequest ...
handleDeleteGroupsRequest, and the onLeadershipChange hook; seed 004; docs/design.md "Consumer
groups").

Turns request bodies into calls on the group coordinator (broker/coordinator/) and its answers
into response bodies, and keeps the coordinator's view of which ``__consumer_offsets``
partitions this broker leads in step with LeaderAndIsr and StopReplica (Kafka's onElection and
onResignation). FindCoordinator creates ``__consumer_offsets`` on first use, compacted, with
``offsets.topic.num.partitions`` partitions and ``offsets.topic.replication.factor`` replicas
(the live broker count on a smaller cluster), and answers COORDINATOR_NOT_AVAILABLE until the
group's partition has a leader.
"""

from __future__ import annotations

import asyncio
import logging
import random
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable

from kazoo.exceptions import KazooException

from broker.config import BrokerConfig
from broker.coordinator import group_admin, group_offsets
from broker.coordinator.group_coordinator import GroupCoordinator
from broker.coordinator.group_metadata_manager import GROUP_METADATA_TOPIC, GroupMetadataManager
from broker.coordinator.group_responses import join_error
from broker.log import Log
from broker.metadata_cache import MetadataCache
from broker.network import Request
from broker.replica.delayed import ProducePartitionStatus
from broker.replica.replica_manager import ReplicaManager
from client.protocol.api import ApiKey
from client.protocol.errors import ErrorCode, KafkaError
from client.protocol.group_schemas import GROUP_KEY_TYPE
from client.types import TopicPartition
from controller import topic_admin
from zk.bridge import ZkBridge

log = logging.getLogger(__name__)

#: What a group record needs beyond its members' metadata (key, header fields, batch overhead).
GROUP_RECORD_OVERHEAD = 1024


def build_group_apis(
    config: BrokerConfig,
    replica_manager: ReplicaManager,
    metadata_cache: MetadataCache,
    zk: ZkBridge,
    time_ms: Callable[[], int],
    rng: random.Random,
) -> GroupApis:
    """The coordinator over this broker's replica manager: its writes are acks=all appends to
    the offsets partition, its loads read the local log, its timers are the event loop's."""
    loop = asyncio.get_running_loop()

    def append(tp: TopicPartition, batch: bytes, timeout_ms: int, done: Callable[[int, int], None]) -> None:
        def respond(statuses: dict[tuple[str, int], ProducePartitionStatus]) -> None:
            status = statuses[tp]
            done(status.error_code, status.base_offset)

        replica_manager.append_records(-1, timeout_ms, {tp: batch}, respond)

    def hosted_log(tp: TopicPartition) -> Log:
        log_ = replica_manager.get_log(tp)
        if log_ is None:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"{tp} is not hosted here")
        return log_

    def read_log(tp: TopicPartition, offset: int, max_bytes: int) -> bytes:
        return bytes(hosted_log(tp).read(offset, max_bytes).records)

    class LoopTimers:
        def call_later(self, delay_ms: int, callback: Callable[[], None]) -> asyncio.TimerHandle:
            return loop.call_later(delay_ms / 1000, callback)

    group_config = config.group_config()
    manager = GroupMetadataManager(
        group_config, append, read_log, time_ms, log_start_offset=lambda tp: hosted_log(tp).log_start_offset
    )
    coordinator = GroupCoordinator(
        group_config,
        manager,
        LoopTimers(),
        time_ms,
        lambda client_id: f"{client_id}-{uuid.UUID(int=rng.getrandbits(128), version=4)}",
    )
    return GroupApis(coordinator, metadata_cache, zk, rng, config["message.max.bytes"])


class GroupApis:
    def __init__(
        self,
        coordinator: GroupCoordinator,
        metadata_cache: MetadataCache,
        zk: ZkBridge,
        rng: random.Random,
        max_record_bytes: int,
    ) -> None:
        self.coordinator = coordinator
        self.metadata_cache = metadata_cache
        self.zk = zk
        self.rng = rng
        self.max_record_bytes = max_record_bytes
        self._loads: dict[asyncio.Task, None] = {}  # insertion-ordered: cancelled in start order

    def handlers(self) -> dict[ApiKey, Callable[[Request], Awaitable[None]]]:
        return {
            ApiKey.FIND_COORDINATOR: self.handle_find_coordinator,
            ApiKey.JOIN_GROUP: self.handle_join_group,
            ApiKey.SYNC_GROUP: self.handle_sync_group,
            ApiKey.HEARTBEAT: self.handle_heartbeat,
            ApiKey.LEAVE_GROUP: self.handle_leave_group,
            ApiKey.OFFSET_COMMIT: self.handle_offset_commit,
            ApiKey.OFFSET_FETCH: self.handle_offset_fetch,
            ApiKey.LIST_GROUPS: self.handle_list_groups,
            ApiKey.DESCRIBE_GROUPS: self.handle_describe_groups,
            ApiKey.DELETE_GROUPS: self.handle_delete_groups,
        }

    def on_partitions_deleted(self, partitions: list[TopicPartition]) -> None:
        """A topic deletion's UpdateMetadata (LeaderDuringDelete): its offsets leave every group
        coordinated here (Kafka's handleDeletedPartitions)."""
        removed = group_offsets.handle_deleted_partitions(self.coordinator, partitions)
        if removed:
            topics = sorted({tp.topic for tp in partitions})
            log.info("removed %d offsets of deleted partitions of %s", removed, ", ".join(topics))

    # -- leadership of __consumer_offsets (Kafka's onLeadershipChange) ---------------------------

    def on_leadership_change(self, partition_states: list[dict], broker_id: int, results: dict) -> None:
        """After LeaderAndIsr: load the groups of offsets partitions this broker now leads, drop
        those of the ones it follows. ``results`` maps (topic, partition) to the error code."""
        for state in partition_states:
            if state["topic"] != GROUP_METADATA_TOPIC:
                continue
            partition, epoch = state["partition"], state["leader_epoch"]
            if results.get((state["topic"], partition), ErrorCode.NONE) != ErrorCode.NONE:
                continue
            if state["leader"] == broker_id:
                self._elect(partition, epoch)
            else:
                self.resign(partition, epoch)

    def _elect(self, partition: int, epoch: int) -> None:
        manager = self.coordinator.manager
        if partition in manager.owned and partition not in manager.loading:
            manager.owned[partition] = max(manager.owned[partition], epoch)  # still ours: keep the groups
            return
        task = asyncio.get_running_loop().create_task(
            manager.load(partition, epoch, self.coordinator.on_groups_loaded),
            name=f"load-groups-{GROUP_METADATA_TOPIC}-{partition}",
        )
        self._loads[task] = None
        task.add_done_callback(lambda done: self._loads.pop(done, None))

    def resign(self, partition: int, epoch: int = -1) -> None:
        self.coordinator.on_groups_unloaded(self.coordinator.manager.unload(partition, epoch))

    def shutdown(self) -> None:
        """Kafka's GroupCoordinator.shutdown: stop answering, unload everything."""
        self.coordinator.active = False
        for task in list(self._loads):
            task.cancel()
        for partition in list(self.coordinator.manager.owned):
            self.resign(partition)

    # -- FindCoordinator -------------------------------------------------------------------------

    async def handle_find_coordinator(self, request: Request) -> None:
        body = request.body
        if body["key_type"] != GROUP_KEY_TYPE:
            request.respond(_coordinator_error(ErrorCode.INVALID_REQUEST, "transactions are not supported"))
            return
        if not body["key"]:
            request.respond(_coordinator_error(ErrorCode.INVALID_GROUP_ID, "the group id is empty"))
            return
        if not self.metadata_cache.contains_topic(GROUP_METADATA_TOPIC):
            await self._create_offsets_topic()
            request.respond(
                _coordinator_error(ErrorCode.COORDINATOR_NOT_AVAILABLE, "creating the offsets topic")
            )
            return
        partition = self.coordinator.manager.partition_for(body["key"])
        cached = self.metadata_cache.partition(GROUP_METADATA_TOPIC, partition)
        endpoints = self.metadata_cache.alive_endpoints(request.listener_name)
        leader = endpoints.get(cached.leader) if cached is not None else None
        if leader is None:
            request.respond(
                _coordinator_error(
                    ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{GROUP_METADATA_TOPIC}-{partition} has no leader"
                )
            )
            return
        request.respond(
            {
                "error_code": ErrorCode.NONE,
                "error_message": None,
                "node_id": leader.id,
                "host": leader.host,
                "port": leader.port,
            }
        )

    async def _create_offsets_topic(self) -> None:
        config = self.coordinator.config
        try:
            live = len(await topic_admin.live_broker_ids(self.zk))
            replication = min(config.offsets_topic_replication_factor, max(live, 1))
            await topic_admin.create_topic_with_placement(
                self.zk,
                GROUP_METADATA_TOPIC,
                config.offsets_topic_num_partitions,
                replication,
                {"cleanup.policy": "compact", "segment.bytes": str(config.offsets_topic_segment_bytes)},
                self.rng,
            )
            log.info(
                "created %s: %d partitions, replication factor %d",
                GROUP_METADATA_TOPIC, config.offsets_topic_num_partitions, replication,
            )  # fmt: skip
        except KafkaError as exc:
            if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                log.warning("creating %s failed: %s", GROUP_METADATA_TOPIC, exc)
        except KazooException as exc:  # unknown outcome: the client asks again
            log.warning("creating %s: ZooKeeper failed (%r)", GROUP_METADATA_TOPIC, exc)

    # -- membership ------------------------------------------------------------------------------

    async def handle_join_group(self, request: Request) -> None:
        body = request.body
        metadata_bytes = sum(len(p["metadata"]) for p in body["protocols"])
        if metadata_bytes + GROUP_RECORD_OVERHEAD > self.max_record_bytes:
            # Its group record could never be written: refuse it now rather than fail every
            # SyncGroup of the group after it (Kafka lets it join and the store fails).
            request.respond(join_error(body["member_id"], ErrorCode.INVALID_REQUEST))
            return
        self.coordinator.handle_join_group(
            body, request.header.client_id or "", _host(request.client_address), request.respond
        )

    async def handle_sync_group(self, request: Request) -> None:
        self.coordinator.handle_sync_group(request.body, request.respond)

    async def handle_heartbeat(self, request: Request) -> None:
        self.coordinator.handle_heartbeat(request.body, request.respond)

    async def handle_leave_group(self, request: Request) -> None:
        self.coordinator.handle_leave_group(request.body, request.respond)

    # -- offsets ---------------------------------------------------------------------------------

    async def handle_offset_commit(self, request: Request) -> None:
        body = request.body
        errors: dict[TopicPartition, int] = {}
        offsets: dict[TopicPartition, dict] = {}
        for topic in body["topics"]:
            for entry in topic["partitions"]:
                tp = TopicPartition(topic["topic"], entry["partition"])
                if self.metadata_cache.partition(tp.topic, tp.partition) is None:
                    errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                else:
                    offsets[tp] = entry

        def respond(written: dict[TopicPartition, int]) -> None:
            request.respond(
                {"topics": _per_topic({**errors, **written}, lambda code: {"error_code": int(code)})}
            )

        if not offsets:
            respond({})
            return
        group_offsets.handle_offset_commit(self.coordinator, body, offsets, respond)

    async def handle_offset_fetch(self, request: Request) -> None:
        body = request.body
        wanted = (
            None
            if body["topics"] is None
            else [TopicPartition(t["topic"], p) for t in body["topics"] for p in t["partitions"]]
        )
        error, offsets = group_offsets.handle_offset_fetch(self.coordinator, body["group_id"], wanted)

        def entry(committed: object) -> dict:
            if committed is None:
                return {"committed_offset": -1, "committed_leader_epoch": -1, "metadata": "", "error_code": 0}
            return {
                "committed_offset": committed.offset,  # type: ignore[attr-defined]
                "committed_leader_epoch": committed.leader_epoch,  # type: ignore[attr-defined]
                "metadata": committed.metadata,  # type: ignore[attr-defined]
                "error_code": 0,
            }

        request.respond({"error_code": int(error), "topics": _per_topic(offsets, entry)})

    # -- tools -----------------------------------------------------------------------------------

    async def handle_list_groups(self, request: Request) -> None:
        error, groups = group_admin.list_groups(self.coordinator, request.body["states_filter"])
        request.respond({"error_code": int(error), "groups": groups})

    async def handle_describe_groups(self, request: Request) -> None:
        request.respond(
            {"groups": [group_admin.describe_group(self.coordinator, g) for g in request.body["groups"]]}
        )

    async def handle_delete_groups(self, request: Request) -> None:
        def respond(results: dict[str, int]) -> None:
            request.respond({"results": [{"group_id": g, "error_code": c} for g, c in results.items()]})

        group_admin.delete_groups(self.coordinator, request.body["groups_names"], respond)


def _per_topic(values: dict, entry: Callable[[object], dict]) -> list[dict]:
    by_topic: dict[str, list[dict]] = defaultdict(list)
    for tp, value in sorted(values.items()):
        by_topic[tp[0]].append({"partition": tp[1], **entry(value)})
    return [{"topic": topic, "partitions": parts} for topic, parts in by_topic.items()]


def _coordinator_error(code: int, message: str) -> dict:
    return {"error_code": int(code), "error_message": message, "node_id": -1, "host": "", "port": -1}


def _host(address: str) -> str:
    """The client's host as Kafka's tools show it (``/127.0.0.1``)."""
    host = address.rsplit(":", 1)[0] if address.count(":") == 1 else address
    return f"/{host}"
