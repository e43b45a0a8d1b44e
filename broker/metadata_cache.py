"""The broker's view of cluster metadata, fed by the controller's UpdateMetadata.

Every broker answers Metadata requests from this cache, never from ZooKeeper, exactly as
Kafka's MetadataCache does; the controller keeps it current by sending UpdateMetadata to
every live broker after each leadership, ISR or broker-membership change.

The cache keeps no controller epoch of its own: UpdateMetadata is fenced by the replica
manager's, the one LeaderAndIsr and StopReplica check and raise (Kafka's
``ReplicaManager.maybeUpdateMetadataCache``; broker/replica/leader_and_isr.py), and
applied through it.

KIP-103: the cache keeps every advertised endpoint of every broker, and a Metadata response
names each broker by its endpoint on the listener the request arrived on; a broker without
that listener is left out, and a partition it leads answers LEADER_NOT_AVAILABLE (Kafka's
``MetadataCache.getAliveEndpoint``; docs/design.md "Listeners (KIP-103) and the compose cluster").
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from client.protocol.api import NO_LEADER
from client.protocol.errors import ErrorCode
from client.protocol.topic_id import ZERO_UUID
from zk.data import PLAINTEXT, BrokerInfo

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CachedPartition:
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    offline_replicas: tuple[int, ...]
    controller_epoch: int
    zk_version: int


class MetadataCache:
    def __init__(self, broker_id: int) -> None:
        self.broker_id = broker_id
        self.controller_id = NO_LEADER
        self.brokers: dict[int, BrokerInfo] = {}
        self.partitions: dict[str, dict[int, CachedPartition]] = {}
        #: KIP-516: topic -> its id, as UpdateMetadata's partition states carry it
        self.topic_ids: dict[str, str] = {}

    def update(self, body: dict) -> list[tuple[str, int]]:
        """Apply an UpdateMetadata body whose controller epoch the caller has checked
        (:meth:`LeaderAndIsrHandler.update_metadata`); returns the partitions whose state changed."""
        self.controller_id = body["controller_id"]
        self.brokers = {b["id"]: BrokerInfo.from_wire(b) for b in body["live_brokers"]}
        changed = []
        for state in body["partition_states"]:
            topic, partition = state["topic"], state["partition"]
            if state["leader"] == -2:  # Kafka's LeaderDuringDelete marker: the topic is being deleted
                self.partitions.get(topic, {}).pop(partition, None)
                if not self.partitions.get(topic):
                    self.partitions.pop(topic, None)
                    self.topic_ids.pop(topic, None)
                changed.append((topic, partition))
                continue
            if state.get("topic_id", ZERO_UUID) != ZERO_UUID:
                self.topic_ids[topic] = state["topic_id"]
            cached = CachedPartition(
                leader=state["leader"],
                leader_epoch=state["leader_epoch"],
                isr=tuple(state["isr"]),
                replicas=tuple(state["replicas"]),
                offline_replicas=tuple(state.get("offline_replicas") or ()),
                controller_epoch=state["controller_epoch"],
                zk_version=state["zk_version"],
            )
            topic_partitions = self.partitions.setdefault(topic, {})
            if topic_partitions.get(partition) != cached:
                topic_partitions[partition] = cached
                changed.append((topic, partition))
        return changed

    def contains_topic(self, topic: str) -> bool:
        return topic in self.partitions

    def topics(self) -> list[str]:
        return sorted(self.partitions)

    def partition(self, topic: str, partition: int) -> CachedPartition | None:
        return self.partitions.get(topic, {}).get(partition)

    def alive_broker(self, broker_id: int) -> BrokerInfo | None:
        return self.brokers.get(broker_id)

    def alive_endpoints(self, listener_name: str) -> dict[int, BrokerInfo]:
        """Every live broker that has ``listener_name``, as a BrokerInfo whose host and port are
        that listener's (Kafka's getAliveBrokerNodes(listenerName))."""
        out = {}
        for broker_id, broker in sorted(self.brokers.items()):
            endpoint = broker.endpoint_for(listener_name)
            if endpoint is None:
                log.debug("Broker endpoint not found for broker %d listenerName %s", broker_id, listener_name)
                continue
            out[broker_id] = BrokerInfo(broker_id, endpoint.host, endpoint.port, broker.rack)
        return out

    def metadata_response(
        self, topics: list[str] | None, cluster_id: str | None, listener_name: str = PLAINTEXT
    ) -> dict:
        """The Metadata answer for a request that arrived on ``listener_name``."""
        names = self.topics() if topics is None else topics
        brokers = self.alive_endpoints(listener_name)
        return {
            "brokers": [
                {"node_id": b.id, "host": b.host, "port": b.port, "rack": b.rack} for b in brokers.values()
            ],
            "cluster_id": cluster_id,
            "controller_id": self.controller_id,
            "topics": [self._topic_metadata(name, brokers, listener_name) for name in names],
        }

    def _topic_metadata(self, topic: str, reachable: dict[int, BrokerInfo], listener_name: str) -> dict:
        partitions = self.partitions.get(topic)
        if partitions is None:
            return {
                "error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                "topic": topic,
                "is_internal": False,
                "partitions": [],
            }
        out = []
        for number in sorted(partitions):
            p = partitions[number]
            leader_alive = p.leader in reachable
            if not leader_alive and p.leader in self.brokers:
                log.debug(
                    "Error while fetching metadata for %s-%d: listener %s not found on leader %d",
                    topic,
                    number,
                    listener_name,
                    p.leader,
                )
            out.append(
                {
                    "error_code": ErrorCode.NONE if leader_alive else ErrorCode.LEADER_NOT_AVAILABLE,
                    "partition": number,
                    "leader": p.leader if leader_alive else NO_LEADER,
                    "leader_epoch": p.leader_epoch,
                    "replicas": list(p.replicas),
                    "isr": list(p.isr),
                    "offline_replicas": [r for r in p.replicas if r not in self.brokers],
                }
            )
        return {
            "error_code": ErrorCode.NONE,
            "topic": topic,
            "topic_id": self.topic_ids.get(topic, ZERO_UUID),
            "is_internal": topic.startswith("__"),
            "partitions": out,
        }
