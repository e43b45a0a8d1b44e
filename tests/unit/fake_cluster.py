"""A tiny in-memory broker cluster speaking the real framing over real sockets, for client tests.

Not a broker: no replication, no disk, one asyncio server per node id sharing one dict of
partition logs. It validates every request body against api.py (so a client sending a wrong
shape fails the test), answers Metadata / Produce / Fetch / ListOffsets / CreateTopics /
DeleteTopics / CreatePartitions / ApiVersions / InitProducerId, the KIP-455 reassignment APIs
(AlterPartitionReassignments, ListPartitionReassignments: tests/unit/fake_reassignments.py, kept
in :attr:`FakeCluster.reassignments` until :meth:`FakeCluster.complete_reassignments`) and
DescribeConfigs / AlterConfigs of topics and dynamic broker configs (tests/unit/fake_configs.py,
kept in :attr:`FakeCluster.topic_configs` and :attr:`FakeCluster.broker_configs`),
DescribeCluster / DescribeLogDirs / IncrementalAlterConfigs (tests/unit/fake_cluster_admin.py), stamps
offsets into the batches it stores (as a leader would), and lets a test inject faults:
per-partition error codes for the next produce or fetch attempts, dropping a connection before or
after handling a request (a lost request or a lost response), moving a leader, moving the
controller, delaying produce responses, a node whose metadata does not know a topic for its next
few Metadata answers (:attr:`FakeCluster.unseen`: a broker the controller's UpdateMetadata has
not reached yet).

Idempotent batches go through the broker's own producer-state rules
(:class:`broker.log.producer_state.ProducerStateManager`, SPEC 5.4): a duplicate is answered
with its original offsets and not stored again, a gap gets OUT_OF_ORDER_SEQUENCE_NUMBER.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from broker.log.producer_state import ProducerStateManager
from broker.producer_id_manager import bumped_epoch
from client.protocol import api, framing
from client.protocol.api import ApiKey
from client.protocol.errors import ErrorCode, KafkaError, ProtocolError
from client.protocol.records import (
    decode_records,
    iter_batches,
    parse_header,
    set_base_offset,
    set_partition_leader_epoch,
)
from tests.unit.fake_cluster_admin import FakeClusterAdmin
from tests.unit.fake_configs import RATE_KEYS, FakeConfigs
from tests.unit.fake_reassignments import FakeReassignments


@dataclass
class FakePartition:
    leader: int
    replicas: list[int]
    leader_epoch: int = 0
    batches: list[tuple[int, bytes]] = field(default_factory=list)  # (base offset, stamped batch)
    leo: int = 0
    log_start: int = 0
    producer_state: ProducerStateManager = field(default_factory=ProducerStateManager)


@dataclass
class Received:
    node: int
    api_key: ApiKey
    body: dict


class FakeCluster(FakeClusterAdmin, FakeReassignments, FakeConfigs):
    def __init__(self, node_ids: tuple[int, ...] = (1, 2, 3), controller_id: int | None = None) -> None:
        self.node_ids = node_ids
        self.controller_id = node_ids[0] if controller_id is None else controller_id
        self.topics: dict[str, list[FakePartition]] = {}
        self.ports: dict[int, int] = {}
        self.servers: dict[int, asyncio.AbstractServer] = {}
        self.requests: list[Received] = []
        self.produce_errors: dict[tuple[str, int], list[int]] = {}
        self.fetch_errors: dict[tuple[str, int], list[int]] = {}
        self.drop_next: set[ApiKey] = set()
        self.drop_response_next: set[ApiKey] = set()  # handle the request, then drop the connection
        self.next_producer_id = 1000
        self.init_producer_id_errors: list[int] = []
        self.produce_delay = 0.0
        self.down: set[int] = set()
        self.stalled: set[int] = set()  # read every request, answer none (a SIGSTOPped broker)
        self.unseen: dict[tuple[int, str], int] = {}  # (node, topic): Metadata answers without it
        self.reassignments: dict[tuple[str, int], list[int]] = {}  # in progress: partition -> target
        self.topic_configs: dict[str, dict[str, str]] = {}
        self.broker_configs: dict[str, dict[str, str]] = {}
        self.dynamic_broker_keys: set[str] = set(RATE_KEYS)
        self._writers: set[asyncio.StreamWriter] = set()
        self._appended = asyncio.Condition()

    # -- lifecycle ----------------------------------------------------------------------------
    async def start(self) -> FakeCluster:
        for node in self.node_ids:
            server = await asyncio.start_server(
                lambda r, w, node=node: self._serve(node, r, w), "127.0.0.1", 0
            )
            self.servers[node] = server
            self.ports[node] = server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        for writer in list(self._writers):
            writer.close()
        for server in self.servers.values():
            server.close()
        for server in self.servers.values():
            with contextlib.suppress(Exception):
                await server.wait_closed()

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{self.ports[n]}" for n in self.node_ids)

    # -- test helpers --------------------------------------------------------------------------
    def create(self, name: str, partitions: int, leaders: list[int] | None = None) -> None:
        nodes = list(self.node_ids)
        self.topics[name] = [
            FakePartition(
                leader=(leaders[p] if leaders else nodes[p % len(nodes)]),
                replicas=[nodes[(p + i) % len(nodes)] for i in range(min(3, len(nodes)))],
            )
            for p in range(partitions)
        ]

    def move_leader(self, topic: str, partition: int, node: int) -> None:
        part = self.topics[topic][partition]
        part.leader = node
        part.leader_epoch += 1

    def records(self, topic: str, partition: int) -> list:
        """Every record in the partition's log, decoded with our codec."""
        out = []
        for _, batch in self.topics[topic][partition].batches:
            out.extend(record for _, record in decode_records(batch))
        return out

    def log_bytes(self, topic: str, partition: int) -> bytes:
        return b"".join(batch for _, batch in self.topics[topic][partition].batches)

    def of(self, api_key: ApiKey) -> list[Received]:
        return [r for r in self.requests if r.api_key == api_key]

    # -- serving -------------------------------------------------------------------------------
    async def _serve(self, node: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            while True:
                length = struct.unpack(">I", await reader.readexactly(4))[0]
                header, body = framing.decode_request(await reader.readexactly(length))
                if node in self.down:
                    return
                if node in self.stalled:
                    continue
                try:
                    key = ApiKey(header.api_key)
                    if key is ApiKey.API_VERSIONS:
                        # api.validate cannot take REQUESTS[API_VERSIONS] (a top-level Opt) yet.
                        body = body or {}
                    else:
                        body = api.validate_request(header.api_key, header.api_version, body)
                except (ValueError, ProtocolError) as exc:
                    response = api.error_body(ErrorCode.INVALID_REQUEST, str(exc))
                else:
                    self.requests.append(Received(node, key, body))
                    if key in self.drop_next:
                        self.drop_next.discard(key)
                        return
                    response = await getattr(self, f"_{key.name.lower()}")(node, body)
                    if key in self.drop_response_next:
                        self.drop_response_next.discard(key)
                        return
                if response is not None:
                    writer.write(framing.encode_response(header.correlation_id, response))
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()

    def _partition(self, topic: str, partition: int) -> FakePartition | None:
        parts = self.topics.get(topic)
        return parts[partition] if parts is not None and 0 <= partition < len(parts) else None

    async def _api_versions(self, node: int, body: dict) -> dict:
        return {
            "error_code": 0,
            "api_keys": [{"api_key": int(k), "min_version": 0, "max_version": 0} for k in api.SUPPORTED_APIS],
        }

    async def _metadata(self, node: int, body: dict) -> dict:
        names = sorted(self.topics) if body["topics"] is None else body["topics"]
        topics = []
        for name in names:
            parts = self.topics.get(name)
            if self.unseen.get((node, name), 0) > 0:  # its UpdateMetadata has not arrived yet
                self.unseen[node, name] -= 1
                parts = None
            if parts is None:
                topics.append(
                    {"error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "topic": name, "partitions": []}
                )
                continue
            topics.append(
                {
                    "error_code": 0,
                    "topic": name,
                    "is_internal": name.startswith("__"),
                    "partitions": [
                        {
                            "error_code": 0,
                            "partition": i,
                            "leader": p.leader,
                            "leader_epoch": p.leader_epoch,
                            "replicas": p.replicas,
                            "isr": p.replicas,
                            "offline_replicas": [],
                        }
                        for i, p in enumerate(parts)
                    ],
                }
            )
        brokers = [
            {"node_id": n, "host": "127.0.0.1", "port": self.ports[n], "rack": None}
            for n in self.node_ids
            if n not in self.down
        ]
        return {
            "brokers": brokers,
            "cluster_id": "fake-cluster",
            "controller_id": self.controller_id,
            "topics": topics,
        }

    async def _produce(self, node: int, body: dict) -> dict | None:
        if self.produce_delay:
            await asyncio.sleep(self.produce_delay)
        out = []
        for t in body["topics"]:
            parts = []
            for p in t["partitions"]:
                tp = (t["topic"], p["partition"])
                part = self._partition(*tp)
                code, base = 0, -1
                injected = self.produce_errors.get(tp)
                if part is None:
                    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                elif part.leader != node:
                    code = ErrorCode.NOT_LEADER_OR_FOLLOWER
                elif injected:
                    code = injected.pop(0)
                else:
                    buf = bytearray(p["records"])
                    batches = list(iter_batches(buf))
                    try:
                        duplicate = part.producer_state.check_append(h for _, h in batches)
                    except KafkaError as exc:
                        code, duplicate = exc.code, None
                    if duplicate is not None:
                        base = duplicate.first_offset
                    elif not code:
                        base = part.leo
                        for pos, header in batches:
                            set_base_offset(buf, pos, part.leo)
                            set_partition_leader_epoch(buf, pos, part.leader_epoch)
                            part.batches.append((part.leo, bytes(buf[pos : pos + header.size])))
                            part.producer_state.update(parse_header(buf, pos))
                            part.leo += header.last_offset_delta + 1
                parts.append(
                    {
                        "partition": p["partition"],
                        "error_code": int(code),
                        "base_offset": base,
                        "error_message": f"injected by the fake on node {node}" if code else None,
                    }
                )
            out.append({"topic": t["topic"], "partitions": parts})
        async with self._appended:
            self._appended.notify_all()
        return None if body["acks"] == 0 else {"topics": out}

    def _fetch_one(self, node: int, topic: str, p: dict) -> tuple[dict, int]:
        part = self._partition(topic, p["partition"])
        result = {"partition": p["partition"], "error_code": 0, "high_watermark": -1, "records": b""}
        injected = self.fetch_errors.get((topic, p["partition"]))
        if part is None:
            result["error_code"] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        elif part.leader != node:
            result["error_code"] = ErrorCode.NOT_LEADER_OR_FOLLOWER
        elif 0 <= p["current_leader_epoch"] < part.leader_epoch:
            result["error_code"] = ErrorCode.FENCED_LEADER_EPOCH
        elif p["current_leader_epoch"] > part.leader_epoch:
            result["error_code"] = ErrorCode.UNKNOWN_LEADER_EPOCH
        elif injected:
            result["error_code"] = injected.pop(0)
        elif not part.log_start <= p["fetch_offset"] <= part.leo:
            result["error_code"] = ErrorCode.OFFSET_OUT_OF_RANGE
        else:
            result["high_watermark"] = part.leo
            chunks, size = [], 0
            for base, batch in part.batches:
                if base + _last_delta(batch) < p["fetch_offset"]:
                    continue
                if chunks and size + len(batch) > p["partition_max_bytes"]:
                    break
                chunks.append(batch)
                size += len(batch)
            result["records"] = b"".join(chunks)
        return result, len(result["records"])

    async def _fetch(self, node: int, body: dict) -> dict:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + body["max_wait_ms"] / 1000
        while True:
            total, out, errors = 0, [], False
            for t in body["topics"]:
                parts = []
                for p in t["partitions"]:
                    result, size = self._fetch_one(node, t["topic"], p)
                    total += size
                    errors = errors or result["error_code"] != 0
                    parts.append(result)
                out.append({"topic": t["topic"], "partitions": parts})
            remaining = deadline - loop.time()
            if total >= body["min_bytes"] or errors or remaining <= 0:
                return {"topics": out}
            async with self._appended:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._appended.wait(), remaining)

    async def _list_offsets(self, node: int, body: dict) -> dict:
        out = []
        for t in body["topics"]:
            parts = []
            for p in t["partitions"]:
                part = self._partition(t["topic"], p["partition"])
                entry = {"partition": p["partition"], "error_code": 0, "timestamp": -1, "offset": -1}
                if part is None:
                    entry["error_code"] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                elif part.leader != node:
                    entry["error_code"] = ErrorCode.NOT_LEADER_OR_FOLLOWER
                elif p["timestamp"] == api.EARLIEST_TIMESTAMP:
                    entry["offset"] = part.log_start
                elif p["timestamp"] == api.LATEST_TIMESTAMP:
                    entry["offset"] = part.leo
                else:
                    for _, batch in part.batches:
                        hit = next(
                            (r for _, r in decode_records(batch) if r.timestamp >= p["timestamp"]), None
                        )
                        if hit is not None:
                            entry["offset"], entry["timestamp"] = hit.offset, hit.timestamp
                            break
                parts.append(entry)
            out.append({"topic": t["topic"], "partitions": parts})
        return {"topics": out}

    async def _init_producer_id(self, node: int, body: dict) -> dict:
        if self.init_producer_id_errors:
            return {
                "error_code": self.init_producer_id_errors.pop(0),
                "producer_id": -1,
                "producer_epoch": -1,
            }
        epoch = bumped_epoch(body["producer_id"], body["producer_epoch"])  # KIP-360, as the broker
        if epoch is not None:
            return {"error_code": 0, "producer_id": body["producer_id"], "producer_epoch": epoch}
        producer_id = self.next_producer_id
        self.next_producer_id += 1
        return {"error_code": 0, "producer_id": producer_id, "producer_epoch": 0}

    async def _create_topics(self, node: int, body: dict) -> dict:
        out = []
        for t in body["topics"]:
            name, code, message = t["name"], 0, None
            rf = 1 if t["replication_factor"] == -1 else t["replication_factor"]
            if node != self.controller_id:
                code, message = ErrorCode.NOT_CONTROLLER, f"broker {node} is not the controller"
            elif name in self.topics:
                code, message = ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists."
            elif rf > len(self.node_ids):
                code = ErrorCode.INVALID_REPLICATION_FACTOR
                message = f"Replication factor: {rf} larger than available brokers: {len(self.node_ids)}."
            elif not body["validate_only"]:
                self.create(name, 1 if t["num_partitions"] == -1 else t["num_partitions"])
            out.append({"name": name, "error_code": int(code), "error_message": message})
        return {"topics": out}

    async def _create_partitions(self, node: int, body: dict) -> dict:
        out = []
        for t in body["topics"]:
            name, count, code, message = t["name"], t["count"], 0, None
            have = len(self.topics.get(name, ()))
            if node != self.controller_id:
                code, message = ErrorCode.NOT_CONTROLLER, f"broker {node} is not the controller"
            elif name not in self.topics:
                code, message = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist."
            elif count <= have:
                code = ErrorCode.INVALID_PARTITIONS
                message = (
                    f"Topic already has {have} partitions."
                    if count == have
                    else f"Topic currently has {have} partitions, which is higher than the requested {count}."
                )
            elif not body["validate_only"]:
                nodes = list(self.node_ids)
                self.topics[name] += [
                    FakePartition(leader=nodes[p % len(nodes)], replicas=[nodes[p % len(nodes)]])
                    for p in range(have, count)
                ]
            out.append({"name": name, "error_code": int(code), "error_message": message})
        return {"results": out}

    async def _delete_topics(self, node: int, body: dict) -> dict:
        out = []
        for name in body["topics"]:
            if node != self.controller_id:
                out.append({"name": name, "error_code": int(ErrorCode.NOT_CONTROLLER), "error_message": None})
            elif self.topics.pop(name, None) is None:
                out.append({"name": name, "error_code": int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)})
            else:
                out.append({"name": name, "error_code": 0})
        return {"topics": out}


def _last_delta(batch: bytes) -> int:
    return struct.unpack_from(">i", batch, 23)[0]


@contextlib.contextmanager
def running_in_a_thread(
    setup: Callable[[FakeCluster], None], node_ids: tuple[int, ...] | None = None
) -> Iterator[FakeCluster]:
    """A fake cluster on its own event loop in a thread, so synchronous callers (the sync
    clients, the CLI under CliRunner) can block theirs; ``setup`` creates its topics."""
    import uvloop

    loop = uvloop.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    async def make() -> FakeCluster:
        cluster = await (FakeCluster() if node_ids is None else FakeCluster(node_ids=node_ids)).start()
        setup(cluster)
        return cluster

    cluster = asyncio.run_coroutine_threadsafe(make(), loop).result(5)
    try:
        yield cluster
    finally:
        asyncio.run_coroutine_threadsafe(cluster.stop(), loop).result(5)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
