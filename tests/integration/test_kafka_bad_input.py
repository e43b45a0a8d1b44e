"""Bad input on the KAFKA listener of live brokers (docs/design.md "Two wire protocols"): over
10,000 malformed Kafka frames (tests/kafka_bad_frames.py, one seeded PRNG) written over raw
sockets to two broker processes, while confluent-kafka produces with acks=all through the same
listeners.

Frames are pipelined on a connection while the broker keeps it open; a frame the broker must
close on ends its connection. Every read is bounded. Checked: both brokers live; each frame
answered under its own correlation id by a response kafka-python (or kio) reads whole at the
version asked, saying what it must, or its connection closed, as its kind requires: never a
hang, never a stray correlation id; confluent-kafka's records, from before, during and after the
flood, all read back; ``kafka_network_errors_total{kind}`` grown by at least the frames known
rejected, and no handler failed. ZooKeeper and the brokers are real processes.
"""

from __future__ import annotations

import asyncio
import random
import signal
import struct
import subprocess
import sys
import time
from collections import Counter, deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING
from confluent_kafka import Consumer as CkConsumer
from confluent_kafka import Producer as CkProducer
from confluent_kafka import TopicPartition as CkTopicPartition
from kafka.protocol.metadata import ApiVersionsRequest
from kazoo.client import KazooClient

from client.admin import AdminClient, NewTopic
from client.connection import BrokerConnection
from client.protocol.api import ApiKey
from devcluster.ports import free_port
from devcluster.processes import launch_broker
from devcluster.zookeeper import ZooKeeperProcess
from tests.integration.cluster_fixtures import scrape_metrics
from tests.integration.failover_helpers import eventually
from tests.kafka_bad_frames import ANSWER, CLOSE, EITHER, BadFrame, FrameSource, bad_frames
from tests.kafka_oracle import PRODUCE, Served, answer_problem, read_answer
from zk.paths import BROKER_IDS_PATH

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]

HOST = "127.0.0.1"
BROKERS = (1, 2)
SEED = 20261124
MAX_FRAME = 1 << 20
#: Frames of each kind (tests/kafka_bad_frames.py KINDS): 10,800 in all.
COUNTS = {
    "bytes_flipped": 2400,
    "length_short": 400,
    "length_long_eof": 350,
    "length_zero": 200,
    "length_tiny": 250,
    "length_negative": 300,
    "length_oversize": 300,
    "unknown_api_key": 500,
    "version_unknown": 450,
    "version_unadvertised": 650,
    "unserved_api": 750,
    "api_versions_unsupported": 500,
    "string_truncated": 450,
    "array_truncated": 300,
    "array_count_inflated": 300,
    "negative_length": 450,
    "header_tags_lie": 450,
    "body_tags_lie": 400,
    "body_tags_unknown": 400,
    "trailing_bytes": 300,
    "truncated_eof": 400,
    "fetch_incremental": 300,
}
#: Rejections each kind is counted as by the processor when the broker does what it must.
METRIC_KINDS = {
    "length_negative": "oversize_frame",
    "length_oversize": "oversize_frame",
    "length_long_eof": "truncated_frame",
    "truncated_eof": "truncated_frame",
    "unknown_api_key": "unsupported_version",
    "version_unknown": "unsupported_version",
    "version_unadvertised": "unsupported_version",
    "unserved_api": "unsupported_version",
    "api_versions_unsupported": "unsupported_version",
    "fetch_incremental": "fetch_session_id_not_found",
}
#: The other closing kinds: a header (bad_header) or a body (invalid_request) that cannot be read.
UNREADABLE = "bad_header+invalid_request"
READ_TIMEOUT = 10.0
WORKERS = 6
BEFORE, DURING, AFTER = 300, 600, 300
ERRORS = "kafka_network_errors_total"


@dataclass
class Broker:
    id: int
    port: int
    kafka_port: int
    metrics_port: int
    out: Path
    process: subprocess.Popen | None = None

    @property
    def metrics(self) -> dict[str, float]:
        return scrape_metrics(f"http://{HOST}:{self.metrics_port}/metrics")


def properties(broker: Broker, zk_connect: str, log_dir: Path) -> str:
    props = {
        "broker.id": broker.id,
        "listeners": f"PLAINTEXT://{HOST}:{broker.port},KAFKA://{HOST}:{broker.kafka_port}",
        "log.dirs": log_dir,
        "zookeeper.connect": zk_connect,
        "zookeeper.session.timeout.ms": 6000,
        "metrics.port": broker.metrics_port,
        "socket.request.max.bytes": MAX_FRAME,
        "auto.create.topics.enable": "false",
        "num.network.threads": 2,
        "num.io.threads": 4,
        "controlled.shutdown.enable": "false",
    }
    return "".join(f"{key}={value}\n" for key, value in props.items())


def _stop(brokers: list[Broker]) -> None:
    for broker in brokers:
        if broker.process is not None and broker.process.poll() is None:
            broker.process.send_signal(signal.SIGINT)
    for broker in brokers:
        if broker.process is not None:
            try:
                broker.process.wait(15)
            except subprocess.TimeoutExpired:
                broker.process.kill()
                broker.process.wait(5)


@pytest.fixture(scope="module")
def brokers(zookeeper: ZooKeeperProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Broker]]:
    data = tmp_path_factory.mktemp("kafka-bad-input")
    chroot = "/t_kafka_bad_input"
    client = KazooClient(zookeeper.connect_string)
    client.start(10)
    try:
        if client.exists(chroot):
            client.delete(chroot, recursive=True)
        client.ensure_path(chroot)
    finally:
        client.stop()
        client.close()
    zk_connect = zookeeper.connect_string + chroot
    ports = iter(free_port() for _ in range(3 * len(BROKERS)))
    started = [
        Broker(i, next(ports), next(ports), next(ports), data / f"broker-{i}" / "out.log") for i in BROKERS
    ]
    assert len({p for b in started for p in (b.port, b.kafka_port, b.metrics_port)}) == 3 * len(BROKERS)
    client = KazooClient(zk_connect)
    client.start(10)
    try:
        for broker in started:
            config = data / f"broker-{broker.id}.properties"
            config.write_text(properties(broker, zk_connect, data / f"broker-{broker.id}" / "data"))
            argv = [sys.executable, "-m", "broker", "--config", str(config)]
            broker.process = launch_broker(argv, broker.out, "test_kafka_bad_input")
        deadline = time.monotonic() + 30
        while sorted(
            int(c) for c in (client.get_children(BROKER_IDS_PATH) if client.exists(BROKER_IDS_PATH) else [])
        ) != list(BROKERS):
            exited = {b.id: b.process.poll() for b in started if b.process.poll() is not None}
            assert not exited and time.monotonic() < deadline, (
                f"brokers not registered (exited: {exited}):\n"
                + "\n".join(b.out.read_text()[-2000:] for b in started)
            )
            time.sleep(0.2)
        yield started
    finally:
        client.stop()
        client.close()
        _stop(started)


# -- the flood ------------------------------------------------------------------------------------


@dataclass
class Tally:
    """What became of each frame, by kind, and everything that went wrong."""

    outcomes: dict[str, Counter] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    connections: int = 0

    def record(self, frame: BadFrame, outcome: str, problem: str | None = None) -> None:
        self.outcomes.setdefault(frame.kind, Counter())[outcome] += 1
        allowed = {ANSWER: {"answered"}, CLOSE: {"closed"}, EITHER: {"answered", "closed"}}[frame.expect]
        if frame.expect == EITHER and frame.header[0] == PRODUCE:
            allowed = allowed | {"silent"}  # a flip may leave acks=0, which is never answered
        if problem is not None or outcome not in allowed:
            self.failures.append(
                f"{frame.kind} {frame.header if len(frame.data) >= 12 else ''}: {outcome} {problem or ''}"
            )

    def count(self, kind: str, outcome: str) -> int:
        return self.outcomes.get(kind, Counter())[outcome]


async def _read_frame(reader: asyncio.StreamReader) -> bytes | None:
    """One response payload; None when the broker closed the connection (or reset it)."""
    try:
        (size,) = struct.unpack(">I", await asyncio.wait_for(reader.readexactly(4), READ_TIMEOUT))
        return await asyncio.wait_for(reader.readexactly(size), READ_TIMEOUT)
    except (asyncio.IncompleteReadError, ConnectionError):
        return None


async def _answers(
    reader: asyncio.StreamReader, sent: list[BadFrame], served: Served, tally: Tally
) -> list[BadFrame] | None:
    """Read the answers to pipelined frames, in order; returns None when the connection is still
    open, else the frames the broker never got to (it closed the connection on an earlier one)."""
    waiting = deque(sent)
    while waiting:
        try:
            payload = await _read_frame(reader)
        except TimeoutError:
            for frame in waiting:
                tally.record(frame, "hang")
            return []
        if payload is None:
            tally.record(waiting.popleft(), "closed")
            return list(waiting)
        (correlation_id,) = struct.unpack_from(">i", payload)
        if all(f.header[2] != correlation_id for f in waiting):
            tally.failures.append(
                f"an answer with correlation id {correlation_id}, not one of {[f.header[2] for f in waiting]}"
            )
            return []
        while waiting[0].header[2] != correlation_id:
            tally.record(waiting.popleft(), "silent")
        frame = waiting.popleft()
        api_key, version, _ = frame.header
        try:
            _, body = read_answer(payload, api_key, version, served)
        except Exception as exc:
            tally.record(frame, "answered", f"unreadable answer: {exc.__class__.__name__}: {exc}")
            continue
        tally.record(frame, "answered", answer_problem(frame.check, body, served))
    return None


async def _closed_on(reader: asyncio.StreamReader, frame: BadFrame, tally: Tally) -> None:
    """The broker must close the connection on ``frame`` without answering it."""
    try:
        data = await asyncio.wait_for(reader.read(1 << 16), READ_TIMEOUT)
    except TimeoutError:
        tally.record(frame, "hang")
        return
    except ConnectionError:
        data = b""
    tally.record(frame, "closed" if not data else "answered", f"got {data[:64]!r}" if data else None)


async def _connection(port: int, batch: list[BadFrame], served: Served, tally: Tally) -> list[BadFrame]:
    """One connection: the answerable frames pipelined, then the closing one; returns the frames
    to write again on a new connection (the broker closed before reading them)."""
    tally.connections += 1
    reader, writer = await asyncio.wait_for(asyncio.open_connection(HOST, port), READ_TIMEOUT)
    try:
        body = [f for f in batch if f.expect != CLOSE]
        closing = [f for f in batch if f.expect == CLOSE]
        writer.write(b"".join(f.data for f in body))
        unread = await _answers(reader, body, served, tally)
        if unread is not None:
            return unread + closing
        for frame in closing:  # at most one
            writer.write(frame.data)
            if frame.eof:
                writer.write_eof()
            await _closed_on(reader, frame, tally)
        return []
    finally:
        writer.close()


def batches(frames: list[BadFrame], rng: random.Random, most: int = 24) -> list[list[BadFrame]]:
    """Frames grouped by connection: up to ``most`` answerable ones, then at most one closing one."""
    answerable = deque(f for f in frames if f.expect != CLOSE)
    closing = deque(f for f in frames if f.expect == CLOSE)
    out = []
    while answerable or closing:
        batch = [answerable.popleft() for _ in range(min(len(answerable), rng.randint(0, most)))]
        if closing:
            batch.append(closing.popleft())
        if batch:
            out.append(batch)
    return out


async def flood(port: int, frames: list[BadFrame], served: Served, rng: random.Random, tally: Tally) -> None:
    queue: deque[list[BadFrame]] = deque(batches(frames, rng))

    async def worker() -> None:
        while queue:
            batch = queue.popleft()
            again = await _connection(port, batch, served, tally)
            if again:
                queue.append(again)

    await asyncio.gather(*(worker() for _ in range(WORKERS)))


# -- a well-behaved client and the broker's own view ----------------------------------------------


async def advertised(port: int) -> dict[int, tuple[int, int]]:
    """The listener's ApiVersions v3 answer, as kafka-python reads it."""
    request = ApiVersionsRequest[3](client_software_name="flood-check", client_software_version="1.0")
    request.with_header(correlation_id=7, client_id="flood-check")
    reader, writer = await asyncio.open_connection(HOST, port)
    try:
        writer.write(bytes(request.encode(header=True, framed=True)))
        payload = await _read_frame(reader)
    finally:
        writer.close()
    assert payload is not None
    correlation_id, body = read_answer(payload, 18, 3, {18: (0, 3)})
    assert correlation_id == 7 and body["error_code"] == 0, body
    return {int(a["api_key"]): (a["min_version"], a["max_version"]) for a in body["api_keys"]}


def produce(bootstrap: str, topic: str, values: list[str]) -> dict[str, tuple[str | None, float]]:
    """confluent-kafka, idempotent, acks=all: each value's delivery error (None) and time."""
    producer = CkProducer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "message.timeout.ms": 30000,
        }
    )
    outcomes: dict[str, tuple[str | None, float]] = {}

    def delivered(err, message) -> None:
        outcomes[message.value().decode()] = (None if err is None else str(err), time.monotonic())

    for start in range(0, len(values), 50):
        for value in values[start : start + 50]:
            producer.produce(topic, value=value.encode(), on_delivery=delivered)
        producer.poll(0.05)
    assert producer.flush(40) == 0, f"{len(values) - len(outcomes)} records never delivered"
    return outcomes


def consume_all(bootstrap: str, topic: str, partitions: int, expected: int) -> list[str]:
    """Every record of ``topic`` from the beginning, by confluent-kafka (bounded in time)."""
    consumer = CkConsumer(
        {"bootstrap.servers": bootstrap, "group.id": "flood-check", "enable.auto.commit": False}
    )
    try:
        consumer.assign([CkTopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        got: list[str] = []
        deadline = time.monotonic() + 40
        while len(got) < expected and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None:
                assert message.error() is None, message.error()
                got.append(message.value().decode())
        return got
    finally:
        consumer.close()


async def create_topics(brokers: list[Broker]) -> None:
    async with AdminClient([f"{HOST}:{b.port}" for b in brokers]) as admin:
        errors = await admin.create_topics(
            [NewTopic("kept", 2, 2, {"min.insync.replicas": "2"}), NewTopic("flood", 1, 2)]
        )
    assert not any(errors.values()), errors

    async def led() -> bool:
        partitions = [
            p for b in brokers for t in await _metadata(b, ["kept", "flood"]) for p in t["partitions"]
        ]
        return len(partitions) == 3 * len(brokers) and all(
            p["leader"] in BROKERS and len(p["isr"]) == 2 for p in partitions
        )

    await eventually(led, "kept and flood led, their ISR full, on every broker", timeout=20)


async def _metadata(broker: Broker, topics: list[str]) -> list[dict]:
    conn = await BrokerConnection.open(HOST, broker.port, "flood-check")
    try:
        body = await conn.request(ApiKey.METADATA, {"topics": topics}, timeout=10)
    finally:
        conn.close()
    return body["topics"]


def error_counts(broker: Broker) -> Counter:
    """``kafka_network_errors_total`` by kind."""
    prefix = ERRORS + '{kind="'
    return Counter(
        {name[len(prefix) : -2]: value for name, value in broker.metrics.items() if name.startswith(prefix)}
    )


def known_rejections(tally: Tally) -> Counter:
    """Lower bounds on what the brokers counted, by metric kind: each frame the broker closed on
    or answered with a refusal, as its kind requires."""
    known: Counter = Counter()
    for kind, outcomes in tally.outcomes.items():
        if kind in METRIC_KINDS:
            known[METRIC_KINDS[kind]] += outcomes["answered"] + outcomes["closed"]
        elif kind != "bytes_flipped":  # a flipped frame may be refused for any reason, or none
            known[UNREADABLE] += outcomes["closed"]
    return known


def report(tally: Tally, grown: Counter, known: Counter, seconds: float, acked_during: int) -> str:
    frames = sum(sum(o.values()) for o in tally.outcomes.values())
    lines = [f"{frames} frames on {tally.connections} connections in {seconds:.1f} s"]
    lines.append(f"confluent-kafka: {acked_during} of {DURING} records acknowledged during the flood")
    lines.append("outcomes by kind:")
    lines += [
        f"  {kind:26} {dict(sorted(outcomes.items()))}" for kind, outcomes in sorted(tally.outcomes.items())
    ]
    lines.append(f"{ERRORS} grown by {dict(sorted(grown.items()))}")
    lines.append(f"known rejected: {dict(sorted(known.items()))}")
    return "\n".join(lines)


async def test_ten_thousand_malformed_kafka_frames_leave_the_brokers_serving(brokers: list[Broker]) -> None:
    await create_topics(brokers)
    bootstrap = ",".join(f"{HOST}:{b.kafka_port}" for b in brokers)
    served = await advertised(brokers[0].kafka_port)
    assert await advertised(brokers[1].kafka_port) == served
    before = await asyncio.to_thread(produce, bootstrap, "kept", [f"before-{i}" for i in range(BEFORE)])
    assert all(err is None for err, _ in before.values()), before
    errors_before = [error_counts(b) for b in brokers]

    rng = random.Random(SEED)
    frames = bad_frames(FrameSource(rng, served, "flood", MAX_FRAME), COUNTS)
    assert len(frames) == sum(COUNTS.values()) >= 10_000
    tally = Tally()
    flood_started = time.monotonic()
    producing = asyncio.create_task(
        asyncio.to_thread(produce, bootstrap, "kept", [f"during-{i}" for i in range(DURING)])
    )
    floods = [
        flood(b.kafka_port, frames[i :: len(brokers)], served, random.Random(SEED + b.id), tally)
        for i, b in enumerate(brokers)
    ]
    await asyncio.wait_for(asyncio.gather(*floods), 60)
    flood_ended = time.monotonic()
    during = await asyncio.wait_for(producing, 60)

    assert [b.process.poll() for b in brokers] == [None] * len(brokers), "a broker died"
    grown = sum((error_counts(b) - old for b, old in zip(brokers, errors_before, strict=True)), Counter())
    known = known_rejections(tally)
    acked_during = sum(t < flood_ended for _, t in during.values())
    summary = report(tally, grown, known, flood_ended - flood_started, acked_during)
    print(summary)
    assert not tally.failures, (
        f"{len(tally.failures)} frames mishandled, e.g.:\n" + "\n".join(tally.failures[:20]) + "\n" + summary
    )
    assert sum(sum(o.values()) for o in tally.outcomes.values()) == len(frames), summary
    assert all(err is None for err, _ in during.values()), during
    assert acked_during >= DURING // 2, "not served during the flood\n" + summary

    after = await asyncio.to_thread(produce, bootstrap, "kept", [f"after-{i}" for i in range(AFTER)])
    assert all(err is None for err, _ in after.values()), after
    got = await asyncio.to_thread(consume_all, bootstrap, "kept", 2, BEFORE + DURING + AFTER)
    assert sorted(got) == sorted([*before, *during, *after]), f"{len(got)} records read back"

    for kind, count in known.items():
        have = grown["bad_header"] + grown["invalid_request"] if kind == UNREADABLE else grown[kind]
        assert have >= count, f"{kind}: counted {have}, rejected {count}\n{summary}"
    assert grown["handler_exception"] == 0, summary
    for broker in brokers:
        log = broker.out.read_text(errors="replace")
        for sign in ("Traceback", "error handling", "cannot decode the frame", "failed to send a response"):
            assert sign not in log, f"broker {broker.id} logged {sign!r}"
