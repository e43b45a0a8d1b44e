"""What the znodes hold, and their JSON codecs, byte for byte the shapes Kafka writes (compact
JSON, key order as Kafka's), so an operator with ``zkCli.sh`` sees what a Kafka operator would
(Kafka's ZkData encoders; docs/architecture.md "ZooKeeper layout"; the topic znode's are in
zk/topic_znode.py). No kazoo import: tools and benchmarks decode znodes with it too.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from client.types import TopicPartition
from zk import topic_znode
from zk.json_codec import dumps, loads

#: The ``event`` of a KIP-112 log dir event notification: a log dir failed.
LOG_DIR_FAILURE_EVENT = 1
#: How many producer ids a broker claims at a time (Kafka's ProducerIdManager block size).
PRODUCER_ID_BLOCK_SIZE = 1000
NO_LEADER = -1
#: The leader UpdateMetadata announces for a partition of a topic being deleted (Kafka's LeaderDuringDelete).
LEADER_DURING_DELETE = -2
#: /controller_epoch is created with this value; the first controller makes it 1.
INITIAL_CONTROLLER_EPOCH = 0

# The topic znode's codec (zk/topic_znode.py), by its names here as well.
ReplicaAssignment = topic_znode.ReplicaAssignment
decode_full_topic_assignment = topic_znode.decode_full_topic_assignment
decode_topic_assignment = topic_znode.decode_topic_assignment
decode_topic_id = topic_znode.decode_topic_id
encode_full_topic_assignment = topic_znode.encode_full_topic_assignment
encode_topic_assignment = topic_znode.encode_topic_assignment


#: The protocol every listener speaks: floodmark has no TLS or SASL (docs/operations.md).
PLAINTEXT = "PLAINTEXT"
#: Kafka's SecurityProtocol names: a listener named after one needs no map entry.
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


@dataclass(frozen=True)
class EndPoint:
    """One advertised listener of a broker (Kafka's ``EndPoint``, KIP-103): its name, address and
    security protocol."""

    listener_name: str
    host: str
    port: int
    security_protocol: str = PLAINTEXT

    def connection_string(self) -> str:
        """``NAME://host:port``, as in the ``endpoints`` of /brokers/ids/<id>."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.listener_name}://{host}:{self.port}"

    def wire(self) -> dict:
        """The wire shape of an UpdateMetadata / LeaderAndIsr endpoint (client/protocol/api.py)."""
        return {
            "listener_name": self.listener_name,
            "host": self.host,
            "port": self.port,
            "security_protocol": self.security_protocol,
        }

    @classmethod
    def from_wire(cls, obj: dict) -> EndPoint:
        return cls(obj["listener_name"], obj["host"], obj["port"], obj.get("security_protocol") or PLAINTEXT)


#: Kafka's default ``max.broker.partitions`` (KIP-578): Int.MaxValue, no limit
MAX_BROKER_PARTITIONS_DEFAULT = 2**31 - 1


@dataclass(frozen=True)
class FileBudget:
    """How many replicas a broker may hold (docs/design.md "Open files at scale (issue 25)"):
    its open-file limit (the soft RLIMIT_NOFILE, raised to the hard one at start), less a
    ``reserve`` for what must never fail (ZooKeeper, the controller channel, sockets,
    checkpoints) and the ``segment_files`` bound of its segment file cache (a fixed cost), at
    ``files_per_replica`` each (0: a replica holds no descriptor at rest, so the files bound no
    replica count), and never more than ``max_partitions`` (``max.broker.partitions``).
    Published in /brokers/ids/<id> as ``file_budget``, so CreateTopics, CreatePartitions and
    reassignments at any broker can refuse replicas past any broker's budget."""

    open_files_limit: int
    reserve: int
    files_per_replica: int
    segment_files: int = 0
    max_partitions: int = MAX_BROKER_PARTITIONS_DEFAULT

    @property
    def max_replicas_by_files(self) -> int | None:
        """The replicas the open-file limit allows; None when replicas hold no descriptor."""
        if self.files_per_replica <= 0:
            return None
        return max(0, self.open_files_limit - self.reserve - self.segment_files) // self.files_per_replica

    @property
    def max_replicas(self) -> int:
        by_files = self.max_replicas_by_files
        return self.max_partitions if by_files is None else min(by_files, self.max_partitions)

    def to_json(self) -> dict[str, int]:
        return {
            "open_files_limit": self.open_files_limit,
            "reserve": self.reserve,
            "files_per_replica": self.files_per_replica,
            "segment_files": self.segment_files,
            "max_partitions": self.max_partitions,
        }

    @classmethod
    def from_json(cls, obj: Any) -> FileBudget | None:
        """None for a registration without one (an older broker, Kafka): no budget to check.
        A budget without the issue-25 fields (an older floodmark) has no cache and no maximum."""
        if not isinstance(obj, dict):
            return None
        try:
            return cls(
                int(obj["open_files_limit"]),
                int(obj["reserve"]),
                int(obj["files_per_replica"]),
                int(obj.get("segment_files", 0)),
                int(obj.get("max_partitions", MAX_BROKER_PARTITIONS_DEFAULT)),
            )
        except (KeyError, TypeError, ValueError):
            return None


@dataclass(frozen=True)
class BrokerInfo:
    """A live broker as its /brokers/ids/<id> znode describes it. ``epoch`` is the znode's czxid
    (Kafka's broker epoch): a broker that re-registers gets a new one.

    ``endpoints`` are every advertised listener (KIP-103); a caller picks the one it needs by
    listener name with :meth:`endpoint_for` (the controller and the fetchers: the inter-broker
    listener; Metadata: the listener the request came in on). ``host`` and ``port`` are the
    legacy fields of the znode: the PLAINTEXT listener's address, or None / -1 when the broker
    has none. Built with only ``host`` and ``port``, a broker has one PLAINTEXT endpoint there."""

    id: int
    host: str | None
    port: int
    rack: str | None = None
    epoch: int = -1
    endpoints: tuple[EndPoint, ...] = ()
    #: the broker's published file budget (None: it published none)
    file_budget: FileBudget | None = None

    def __post_init__(self) -> None:
        if not self.endpoints and self.host and self.port >= 0:
            object.__setattr__(self, "endpoints", (EndPoint(PLAINTEXT, self.host, self.port),))

    def endpoint_for(self, listener_name: str) -> EndPoint | None:
        """The endpoint on ``listener_name``, or None when the broker has no such listener."""
        return next((e for e in self.endpoints if e.listener_name == listener_name), None)

    def wire(self, listener_name: str) -> dict:
        """The wire shape of live_leaders / live_brokers entries (client/protocol/api.py): ``host``
        and ``port`` on ``listener_name`` (the sender's inter-broker listener; "" and -1 when the
        broker lacks it), every endpoint in ``endpoints``."""
        own = self.endpoint_for(listener_name)
        return {
            "id": self.id,
            "host": own.host if own else "",
            "port": own.port if own else -1,
            "rack": self.rack,
            "endpoints": [e.wire() for e in self.endpoints],
        }

    @classmethod
    def from_wire(cls, obj: dict) -> BrokerInfo:
        """Decode a live_brokers / live_leaders entry; a sender older than KIP-103 sends no
        ``endpoints``, and its ``host``/``port`` are then the one PLAINTEXT endpoint."""
        endpoints = tuple(EndPoint.from_wire(e) for e in obj.get("endpoints") or ())
        plaintext = next((e for e in endpoints if e.listener_name == PLAINTEXT), None)
        if endpoints:
            host, port = (plaintext.host, plaintext.port) if plaintext else (None, -1)
        else:
            host, port = obj["host"], obj["port"]
        return cls(obj["id"], host, port, obj.get("rack"), endpoints=endpoints)


@dataclass(frozen=True)
class LeaderAndIsr:
    """A partition's leader, leader epoch and ISR, plus the state znode's version (zkVersion),
    the compare-and-set token for the next change."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    zk_version: int = 0

    def new_leader_and_isr(self, leader: int, isr: Sequence[int]) -> LeaderAndIsr:
        """A leadership change: the leader epoch goes up by one."""
        return replace(self, leader=leader, leader_epoch=self.leader_epoch + 1, isr=tuple(isr))

    def new_leader(self, leader: int) -> LeaderAndIsr:
        return self.new_leader_and_isr(leader, self.isr)

    def with_zk_version(self, zk_version: int) -> LeaderAndIsr:
        return replace(self, zk_version=zk_version)


@dataclass(frozen=True)
class LeaderIsrAndControllerEpoch:
    """The content of a partition state znode: LeaderAndIsr and the epoch of the controller that wrote it."""

    leader_and_isr: LeaderAndIsr
    controller_epoch: int


@dataclass(frozen=True)
class PartitionReplica:
    """One replica of one partition (Kafka's PartitionAndReplica)."""

    tp: TopicPartition
    replica: int


def encode_broker_registration(
    endpoints: Sequence[EndPoint],
    timestamp_ms: int,
    rack: str | None = None,
    file_budget: FileBudget | None = None,
) -> bytes:
    """Kafka's BrokerIdZNode v4: every advertised endpoint, the listener -> security protocol map,
    and the legacy ``host``/``port`` of the PLAINTEXT listener (null / -1 when there is none).
    ``file_budget`` is floodmark's own field, last: Kafka's BrokerIdZNode.decode reads the fields
    it knows by name and ignores the others, so Kafka's tooling still reads the znode."""
    plaintext = next((e for e in endpoints if e.listener_name == PLAINTEXT), None)
    obj: dict[str, Any] = {
        "listener_security_protocol_map": {e.listener_name: e.security_protocol for e in endpoints},
        "endpoints": [e.connection_string() for e in endpoints],
    }
    if rack is not None:
        obj["rack"] = rack
    obj.update(
        {
            "jmx_port": -1,
            "host": plaintext.host if plaintext else None,
            "timestamp": str(timestamp_ms),
            "port": plaintext.port if plaintext else -1,
            "version": 4,
        }
    )
    if file_budget is not None:
        obj["file_budget"] = file_budget.to_json()
    return dumps(obj)


def parse_endpoint(text: str, protocol_map: dict[str, str] | None = None) -> EndPoint:
    """``NAME://host:port`` (an IPv6 host in brackets) as an EndPoint."""
    name, sep, hostport = text.partition("://")
    host, colon, port = hostport.rpartition(":")
    if not sep or not colon or not port.isdigit():
        raise ValueError(f"bad endpoint {text!r}: expected NAME://host:port")
    protocol = (protocol_map or {}).get(name, name if name in SECURITY_PROTOCOLS else PLAINTEXT)
    return EndPoint(name, host.removeprefix("[").removesuffix("]"), int(port), protocol)


def decode_broker_registration(data: bytes, broker_id: int = -1, epoch: int = -1) -> BrokerInfo:
    """The id is the znode's name, not part of its JSON: pass it (and the czxid as ``epoch``).
    Reads every version: v1 (host/port and one PLAINTEXT endpoint) to v4 (named listeners)."""
    obj = loads(data)
    protocol_map = obj.get("listener_security_protocol_map") or {}
    endpoints = tuple(parse_endpoint(e, protocol_map) for e in obj.get("endpoints") or ())
    host, port = obj.get("host"), obj.get("port")
    if not host or port in (None, -1):
        plaintext = next((e for e in endpoints if e.listener_name == PLAINTEXT), None)
        host, port = (plaintext.host, plaintext.port) if plaintext else (None, -1)
    return BrokerInfo(
        id=broker_id,
        host=host,
        port=int(port),
        rack=obj.get("rack"),
        epoch=epoch,
        endpoints=endpoints,
        file_budget=FileBudget.from_json(obj.get("file_budget")),
    )


def encode_partition_state(state: LeaderIsrAndControllerEpoch) -> bytes:
    lai = state.leader_and_isr
    return dumps(
        {
            "controller_epoch": state.controller_epoch,
            "leader": lai.leader,
            "version": 1,
            "leader_epoch": lai.leader_epoch,
            "isr": list(lai.isr),
        }
    )


def decode_partition_state(data: bytes, zk_version: int) -> LeaderIsrAndControllerEpoch:
    obj = loads(data)
    return LeaderIsrAndControllerEpoch(
        LeaderAndIsr(obj["leader"], obj["leader_epoch"], tuple(obj["isr"]), zk_version),
        obj["controller_epoch"],
    )


def encode_controller(broker_id: int, timestamp_ms: int) -> bytes:
    return dumps({"version": 1, "brokerid": broker_id, "timestamp": str(timestamp_ms)})


def decode_controller(data: bytes) -> int:
    """The controller's broker id. Tolerates the pre-0.8.2 bare-integer form."""
    obj = loads(data)
    return int(obj) if isinstance(obj, int) else int(obj["brokerid"])


def encode_controller_epoch(epoch: int) -> bytes:
    return str(epoch).encode()


def decode_controller_epoch(data: bytes) -> int:
    return int(data.decode())


def encode_topic_config(config: dict[str, str]) -> bytes:
    return dumps({"version": 1, "config": dict(config)})


def decode_topic_config(data: bytes) -> dict[str, str]:
    return {str(k): str(v) for k, v in loads(data).get("config", {}).items()}


def encode_config_change(entity_path: str) -> bytes:
    """A /config/changes/config_change_<seq> notification, e.g. entity_path ``topics/foo``."""
    return dumps({"version": 2, "entity_path": entity_path})


def decode_config_change(data: bytes) -> tuple[str, str]:
    """A config change notification's (entity type, entity name), e.g. ``("topics", "foo")``:
    version 2 ``{"entity_path": "topics/foo"}`` or version 1 ``{"entity_type", "entity_name"}``
    (Kafka's ConfigChangeNotificationHandler). ValueError for anything else."""
    doc = loads(data)
    if not isinstance(doc, dict):
        raise ValueError(f"not a config change notification: {data!r}")
    if doc.get("version") == 2 and isinstance(doc.get("entity_path"), str):
        entity_type, sep, entity_name = doc["entity_path"].partition("/")
        if sep and entity_type and entity_name:
            return entity_type, entity_name
    elif (
        doc.get("version") == 1
        and isinstance(doc.get("entity_type"), str)
        and isinstance(doc.get("entity_name"), str)
    ):
        return doc["entity_type"], doc["entity_name"]
    raise ValueError(f"not a config change notification: {data!r}")


def encode_isr_change_notification(partitions: Iterable[TopicPartition]) -> bytes:
    return dumps(
        {
            "version": 1,
            "partitions": [{"topic": tp.topic, "partition": tp.partition} for tp in sorted(set(partitions))],
        }
    )


def decode_isr_change_notification(data: bytes) -> list[TopicPartition]:
    return [TopicPartition(p["topic"], p["partition"]) for p in loads(data).get("partitions", [])]


def encode_log_dir_event(broker_id: int) -> bytes:
    """A /log_dir_event_notification/log_dir_event_<seq> value, as Kafka writes it."""
    return dumps({"version": 1, "broker": broker_id, "event": LOG_DIR_FAILURE_EVENT})


def decode_log_dir_event(data: bytes) -> int:
    """The broker id of a log dir event notification; ValueError for anything else."""
    doc = loads(data)
    if (
        not isinstance(doc, dict)
        or not isinstance(doc.get("broker"), int)
        or doc.get("event") != LOG_DIR_FAILURE_EVENT
    ):
        raise ValueError(f"not a log dir failure event: {data!r}")
    return doc["broker"]


def encode_partition_list(partitions: Iterable[TopicPartition]) -> bytes:
    """/admin/preferred_replica_election (Kafka's PreferredReplicaElectionZNode; docs/operations.md
    "ZooKeeper paths")."""
    return dumps(
        {"version": 1, "partitions": [{"topic": tp.topic, "partition": tp.partition} for tp in partitions]}
    )


def decode_partition_list(data: bytes) -> list[TopicPartition]:
    return [TopicPartition(p["topic"], p["partition"]) for p in loads(data).get("partitions", [])]


def encode_reassignment(reassignment: dict[TopicPartition, Sequence[int]]) -> bytes:
    """/admin/reassign_partitions (Kafka's ReassignPartitionsZNode; docs/operations.md
    "ZooKeeper paths")."""
    return dumps(
        {
            "version": 1,
            "partitions": [
                {"topic": tp.topic, "partition": tp.partition, "replicas": list(replicas)}
                for tp, replicas in sorted(reassignment.items())
            ],
        }
    )


def decode_reassignment(data: bytes) -> dict[TopicPartition, list[int]]:
    return {
        TopicPartition(p["topic"], p["partition"]): list(p["replicas"])
        for p in loads(data).get("partitions", [])
    }


@dataclass(frozen=True)
class ProducerIdBlock:
    """Producer ids ``block_start`` .. ``block_end`` (inclusive), owned by ``broker``."""

    broker: int
    block_start: int
    block_end: int


def encode_producer_id_block(block: ProducerIdBlock) -> bytes:
    """Kafka's JSON: the ids as decimal strings (JSON numbers lose precision past 2^53)."""
    return dumps(
        {
            "version": 1,
            "broker": block.broker,
            "block_start": str(block.block_start),
            "block_end": str(block.block_end),
        }
    )


def decode_producer_id_block(data: bytes) -> ProducerIdBlock:
    obj = loads(data)
    return ProducerIdBlock(int(obj["broker"]), int(obj["block_start"]), int(obj["block_end"]))
