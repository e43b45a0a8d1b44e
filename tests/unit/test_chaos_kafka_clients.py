"""``chaos run --client kafka``, the pure parts (chaos/kafka_producers.py, chaos/kafka_member.py,
chaos/kafka_consumers.py, chaos/clients.py, cli/chaos.py; docs/operations.md "Chaos runs and
verification"): librdkafka's delivery reports become the ledger rows the floodmark producers
write (fake delivery callbacks, a fake producer: no broker), a writer resolves every record it
sent within its bounds, a member's facts cross the pipe into the consumer ledger, and the CLI
plumbs ``--client``. The real run is tests/chaos/test_chaos_kafka_client.py."""

from __future__ import annotations

import os
import struct
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner
from confluent_kafka import KafkaError as CkError
from confluent_kafka import TopicPartition as CkTopicPartition

from chaos.clients import Clients, kafka_bootstrap_of
from chaos.consumers import GroupStats
from chaos.kafka_consumers import apply_line
from chaos.kafka_member import KafkaMember, Out, group_metadata
from chaos.kafka_producers import UNRESOLVED, DeliveryRecorder, KafkaWriter, error_name
from chaos.workload import WorkloadSettings
from client.types import TopicPartition
from ledger.consumed import ConsumerLedgerWriter, read_consumer_ledger
from ledger.entries import Ack, WriteError, value_digest
from ledger.format import LedgerWriter, read_ledger

TOPIC = "chaos"


class FakeMessage:
    """What a delivery report or a consumed message carries."""

    def __init__(self, partition: int, offset: int = -1, value: bytes | None = None, error=None) -> None:
        self._partition, self._offset, self._value, self._error = partition, offset, value, error

    def topic(self) -> str:
        return TOPIC

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def value(self) -> bytes | None:
        return self._value

    def error(self):
        return self._error


def test_delivery_reports_become_the_ledger_rows_the_floodmark_producers_write(tmp_path):
    clock = iter([1_000_050, 1_000_080, 1_000_090])
    with LedgerWriter(tmp_path, format="jsonl") as ledger:
        recorder = DeliveryRecorder(ledger, TOPIC, clock_ms=lambda: next(clock))
        recorder.delivered(b"r/0/0", b"key-0", 1_000_000, None, FakeMessage(3, 41))
        recorder.delivered(
            b"r/0/1", b"key-2", 1_000_010, CkError(CkError.NOT_ENOUGH_REPLICAS), FakeMessage(4)
        )
        recorder.delivered(b"r/0/2", b"key-4", 1_000_020, CkError(CkError._MSG_TIMED_OUT), FakeMessage(-1))
    entries = list(read_ledger(tmp_path))
    assert entries[0] == Ack(TOPIC, 3, 41, "key-0", value_digest(b"r/0/0"), -1, -1, 1_000_050, 50.0), (
        "the report's partition and offset; no producer id or sequence in a librdkafka report"
    )
    assert [(e.partition, e.error, e.value_digest) for e in entries[1:]] == [
        (4, "NOT_ENOUGH_REPLICAS", value_digest(b"r/0/1")),
        (-1, "_MSG_TIMED_OUT", value_digest(b"r/0/2")),
    ]
    assert all(isinstance(e, WriteError) for e in entries[1:])
    s = recorder.stats
    assert (s.acknowledged, s.failed, s.errors) == (1, 2, {"NOT_ENOUGH_REPLICAS": 1, "_MSG_TIMED_OUT": 1})


def test_a_report_after_the_ledger_closed_is_dropped_not_raised_into_poll(tmp_path):
    ledger = LedgerWriter(tmp_path)
    recorder = DeliveryRecorder(ledger, TOPIC)
    ledger.close()
    recorder.delivered(b"v", b"k", 0, None, FakeMessage(0, 1))  # a cancelled run's late report
    assert recorder.stats.acknowledged == 1


class FakeProducer:
    """librdkafka's Producer as the writer uses it: ``produce`` queues the callback; ``poll``
    acknowledges up to ``per_poll`` of them (offsets per partition from 0) unless ``stuck``;
    ``flush`` does too and returns what is left; ``purge`` fails what is queued; ``fatal_after``
    raises librdkafka's fatal error through ``error_cb`` after that many sends."""

    def __init__(self, config: dict, stuck: bool = False, fatal_after: int | None = None) -> None:
        self.config, self.stuck, self.fatal_after = config, stuck, fatal_after
        self.queued: list = []
        self.sent = 0
        self.offsets: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self.queued)

    def produce(self, topic, value, key, on_delivery) -> None:
        self.sent += 1
        partition = int(key.decode().split("-")[1]) % 3
        self.queued.append((partition, on_delivery))
        if self.fatal_after is not None and self.sent == self.fatal_after:
            self.config["error_cb"](CkError(CkError._FATAL, "idempotence gave up", fatal=True))

    def poll(self, timeout: float = 0) -> int:
        if self.stuck:
            return 0
        served, self.queued = self.queued, []
        for partition, callback in served:
            offset = self.offsets.get(partition, 0)
            self.offsets[partition] = offset + 1
            callback(None, FakeMessage(partition, offset))
        return len(served)

    def flush(self, timeout: float = 0) -> int:
        self.poll()
        return len(self.queued)

    def purge(self, in_queue=True, in_flight=True, blocking=True) -> None:
        purged, self.queued = self.queued[:1], self.queued[1:]  # one report comes, the rest never do
        for partition, callback in purged:
            callback(CkError(CkError._PURGE_QUEUE), FakeMessage(partition))


def run_writer(tmp_path: Path, factory, sends: int, **settings) -> tuple[KafkaWriter, list]:
    """A writer on its own thread, stopped once ``sends`` records were handed to its producers;
    what it wrote to the ledger."""
    stop = threading.Event()
    producers: list = []

    def make(config: dict):
        producers.append(factory(config))
        return producers[-1]

    ws = WorkloadSettings(TOPIC, "r", writers=1, records_per_second=10_000, delivery_timeout_ms=1, **settings)
    with LedgerWriter(tmp_path, format="jsonl") as ledger:
        writer = KafkaWriter(
            0, "127.0.0.1:1", ws, DeliveryRecorder(ledger, TOPIC), stop, producer_factory=make
        )
        thread = threading.Thread(target=writer.run)
        thread.start()
        for _ in range(3000):
            if sum(p.sent for p in producers) >= sends:
                break
            time.sleep(0.01)
        stop.set()
        thread.join(30)
        assert not thread.is_alive(), "the writer ends within its bounds"
    return writer, list(read_ledger(tmp_path))


def test_a_writer_records_each_value_once_with_its_acknowledged_partition_and_offset(tmp_path):
    writer, entries = run_writer(tmp_path, FakeProducer, 300)
    acks = [e for e in entries if isinstance(e, Ack)]
    assert len(acks) == len(entries) == writer.recorder.stats.sent >= 300 and writer.producers == 1
    assert len({a.value_digest for a in acks}) == len(acks), "unique values, one outcome each"
    assert {(a.partition, a.offset) for a in acks} == {
        (p, o) for p in range(3) for o in range(sum(a.partition == p for a in acks))
    }
    assert {a.key for a in acks} <= {f"key-{k}" for k in range(256)}


def test_the_producer_config_is_idempotent_acks_all_on_the_kafka_listener(tmp_path):
    configs = []

    def factory(config: dict) -> FakeProducer:
        configs.append(config)
        return FakeProducer(config)

    run_writer(tmp_path, factory, 10)
    (config,) = configs
    assert config["enable.idempotence"] is True and config["acks"] == "all"
    assert config["bootstrap.servers"] == "127.0.0.1:1" and config["partitioner"] == "murmur2_random"
    assert config["message.timeout.ms"] == 1  # the run's delivery timeout bounds every record


def test_records_without_a_report_are_purged_and_then_recorded_unresolved(tmp_path):
    writer, entries = run_writer(tmp_path, lambda c: FakeProducer(c, stuck=True), 20, max_in_flight=20)
    errors = [e for e in entries if isinstance(e, WriteError)]
    assert len(errors) == len(entries) == 20 and not writer.pending
    assert [e.error for e in errors].count("_PURGE_QUEUE") == 1  # the purge's one report
    assert [e.error for e in errors].count(UNRESOLVED) == 19  # no report within the bounds


def test_a_fatal_error_gives_the_writer_a_new_producer(tmp_path):
    made = []

    def factory(config: dict) -> FakeProducer:
        made.append(FakeProducer(config, fatal_after=50 if not made else None))
        return made[-1]

    writer, entries = run_writer(tmp_path, factory, 120)
    assert writer.producers == len(made) == 2 and made[0].sent == 50 and made[1].sent >= 70
    assert len(entries) == len({e.value_digest for e in entries}) >= 120, "values go on, none repeated"


def test_error_names_are_librdkafkas():
    from confluent_kafka import KafkaException

    assert error_name(CkError(CkError._MSG_TIMED_OUT)) == "_MSG_TIMED_OUT"
    assert error_name(KafkaException(CkError(CkError._FATAL, "x", fatal=True))) == "_FATAL"
    assert error_name(BufferError()) == "BufferError"


def metadata(generation: int, member_id: str) -> bytes:
    return b"CGMDv2:" + struct.pack("=i", generation) + b"chaos-g\0" + member_id.encode() + b"\0\x01"


def test_generation_and_member_id_come_from_librdkafkas_serialised_group_metadata():
    assert group_metadata(metadata(7, "rdkafka-1")) == (7, "rdkafka-1")
    assert group_metadata(metadata(-1, "")) == (-1, "")
    assert group_metadata(b"CGMDv9:....") == (-1, "")


class FakeConsumer:
    """librdkafka's Consumer as a member uses it: the group metadata, sync commits (``refuse``:
    per-partition errors; ``fail``: the whole commit raises)."""

    def __init__(self) -> None:
        self.generation, self.member_id = -1, ""
        self.commits: list[list[tuple[int, int]]] = []
        self.refuse: set[int] = set()
        self.fail = False

    def consumer_group_metadata(self) -> bytes:
        return metadata(self.generation, self.member_id)

    def commit(self, offsets, asynchronous):
        from confluent_kafka import KafkaException

        assert asynchronous is False
        if self.fail:
            raise KafkaException(CkError(CkError.REBALANCE_IN_PROGRESS))
        self.commits.append([(tp.partition, tp.offset) for tp in offsets])
        refused = CkError(CkError.ILLEGAL_GENERATION)
        return [
            SimpleNamespace(
                partition=tp.partition,
                offset=tp.offset,
                error=refused if tp.partition in self.refuse else None,
            )
            for tp in offsets
        ]


def tps(*partitions: int) -> list[CkTopicPartition]:
    return [CkTopicPartition(TOPIC, p) for p in partitions]


def member_facts_into_the_ledger(tmp_path: Path, play) -> tuple[list, GroupStats, dict]:
    """``play(member, consumer)`` on a member writing to a real pipe; its lines applied to a
    consumer ledger as the parent does."""
    read_end, write_end = os.pipe()
    consumer = FakeConsumer()
    settings = {"topic": TOPIC, "commit_interval_s": 1.0, "lifetime_s": 10}
    member = KafkaMember(settings, Out(write_end, clock_ms=iter(range(1000, 2000)).__next__), consumer)
    play(member, consumer)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as lines:
        data = lines.readlines()
    stats, reached = GroupStats(), {}
    with ConsumerLedgerWriter(tmp_path) as ledger:
        for line in [*data, b'{"k": "consumed", "t": 5, "topic": "cha']:  # a torn last line: skipped
            apply_line(line, "c0-0", ledger, stats, lambda tp, at: reached.__setitem__(tp, at))
    return list(read_consumer_ledger(tmp_path)), stats, reached


def test_a_member_records_what_it_consumed_and_commits_only_what_it_owns_under_a_generation(tmp_path):
    def play(member: KafkaMember, consumer: FakeConsumer) -> None:
        member.record([FakeMessage(0, 5, b"early")])  # before a generation: recorded, never committed
        member.commit()
        consumer.generation, consumer.member_id = 3, "rdkafka-a"
        member.on_assign(consumer, tps(0, 1))
        member.record([FakeMessage(0, 7, b"a"), FakeMessage(1, 2, None), FakeMessage(2, 9, b"x")])
        member.commit()  # partition 2 is not owned: not committed
        member.commit()  # nothing moved: no commit
        consumer.refuse = {1}
        member.record([FakeMessage(0, 8, b"b"), FakeMessage(1, 3, b"c")])
        member.commit()  # partition 1 refused: only 0 is recorded
        consumer.fail = True
        member.record([FakeMessage(0, 9, b"d")])
        member.commit()
        consumer.fail, consumer.refuse = False, set()
        member.on_revoke(consumer, tps(0, 1))  # commits what it consumed of them before the rejoin
        member.on_lost(consumer, tps())

    rows, stats, reached = member_facts_into_the_ledger(tmp_path, play)
    facts = [(r.kind, r.generation, r.partition, r.offset) for r in rows]
    assert facts == [
        ("consumed", -1, 0, 5),
        ("assigned", 3, 0, None),
        ("assigned", 3, 1, None),
        ("consumed", 3, 0, 7),
        ("consumed", 3, 1, 2),
        ("consumed", 3, 2, 9),
        ("committed", 3, 0, 8),
        ("committed", 3, 1, 3),
        ("consumed", 3, 0, 8),
        ("consumed", 3, 1, 3),
        ("committed", 3, 0, 9),
        ("consumed", 3, 0, 9),
        ("committed", 3, 0, 10),
        ("committed", 3, 1, 4),
    ]
    assert {r.member for r in rows} == {"c0-0"} and {r.member_id for r in rows} == {"", "rdkafka-a"}
    assert rows[3].value_digest == value_digest(b"a") and rows[4].value_digest is None
    assert [r.time_ms for r in rows] == sorted(r.time_ms for r in rows), "the member's own clock"
    assert stats.consumed == 7 and stats.outside_assignment == 2  # offset 5 before, offset 9 of p2
    assert stats.commits == 3 and stats.commit_failures == {
        "ILLEGAL_GENERATION": 1,
        "REBALANCE_IN_PROGRESS": 1,
    }
    assert (stats.assignments, stats.highest_generation) == (1, 3)
    assert reached == {
        TopicPartition(TOPIC, 0): 10,
        TopicPartition(TOPIC, 1): 4,
        TopicPartition(TOPIC, 2): 10,
    }


def test_a_member_whose_membership_was_lost_commits_nothing_and_a_new_generation_starts_afresh(tmp_path):
    def play(member: KafkaMember, consumer: FakeConsumer) -> None:
        consumer.generation, consumer.member_id = 1, "m"
        member.on_assign(consumer, tps(0))
        member.record([FakeMessage(0, 0, b"a")])
        member.on_lost(consumer, tps(0))  # expelled: another member may own it already
        member.commit()
        consumer.generation = 2
        member.on_assign(consumer, tps())
        member.record([FakeMessage(0, 1, b"b")])
        member.commit()

    rows, stats, _ = member_facts_into_the_ledger(tmp_path, play)
    assert [(r.kind, r.generation, r.partition) for r in rows] == [
        ("assigned", 1, 0),
        ("consumed", 1, 0),
        ("assigned", 2, -1),  # an empty assignment: one row, partition -1
        ("consumed", 2, 0),
    ]
    assert stats.commits == 0 and stats.outside_assignment == 1


def test_the_kafka_bootstrap_is_the_runners_or_the_one_given():
    class Cluster:
        kafka_bootstrap_servers = "127.0.0.1:9192"

    assert kafka_bootstrap_of("floodmark", Cluster(), None) is None
    assert kafka_bootstrap_of("kafka", Cluster(), "ignored:1") == "127.0.0.1:9192"
    assert kafka_bootstrap_of("kafka", None, "h:9192") == "h:9192"
    with pytest.raises(ValueError, match="--kafka-bootstrap-server"):
        kafka_bootstrap_of("kafka", None, None)
    with pytest.raises(ValueError, match="unknown client"):
        kafka_bootstrap_of("kcat", None, None)
    assert Clients.of("floodmark", "b:1", Cluster(), None) == Clients("floodmark", "b:1", None)


def test_chaos_run_takes_the_client_and_refuses_kafka_on_docker_without_its_listener(monkeypatch, tmp_path):
    from cli import chaos as chaos_cli
    from cli.main import build_cli

    seen = []

    def no_run(settings):  # stands in for the run: only the parsed settings matter here
        seen.append(settings)
        raise SystemExit(0)

    monkeypatch.setattr(chaos_cli, "_run_reporting_runner_errors", no_run)
    args = ["chaos", "run", "--report-dir", str(tmp_path), "--no-verify"]
    assert CliRunner().invoke(build_cli(), args).exit_code == 0
    assert seen[-1].client == "floodmark" and seen[-1].kafka_bootstrap is None  # existing runs unchanged
    assert CliRunner().invoke(build_cli(), [*args, "--client", "kafka", "--consumers", "2"]).exit_code == 0
    assert (seen[-1].client, seen[-1].consumers) == ("kafka", 2)
    docker = [*args, "--client", "kafka", "--backend", "docker", "--bootstrap-server", "h:9092"]
    refused = CliRunner().invoke(build_cli(), docker)
    assert refused.exit_code == 2 and "--kafka-bootstrap-server" in refused.output and len(seen) == 2
    assert CliRunner().invoke(build_cli(), [*docker, "--kafka-bootstrap-server", "h:9192"]).exit_code == 0
    assert seen[-1].kafka_bootstrap == "h:9192"
    assert CliRunner().invoke(build_cli(), [*args, "--client", "kcat"]).exit_code == 2


async def test_member_processes_are_killed_replaced_and_stopped_within_their_bounds(tmp_path):
    """Real member processes (no broker answers: librdkafka retries quietly): the ``consumer``
    fault SIGKILLs one, a fresh incarnation replaces it, closing stops every one by its ``stop``
    line and the consumer ledger is closed with the group's stats."""
    import asyncio

    from chaos.kafka_consumers import KafkaConsumerGroup

    said: list[str] = []
    group = KafkaConsumerGroup.open_kafka(
        tmp_path, "127.0.0.1:1", "127.0.0.1:1", TOPIC, 2, "r", said.append, 5
    )
    group.start()
    await asyncio.sleep(1.0)
    first = group.members[0]
    assert await group.crash(0) == "c0-0" and first.task.done() and first.process.returncode == -9
    assert not first.closed, "a SIGKILLed member says nothing more"
    assert await group.restart("c0-0") == "c0-1"
    await asyncio.sleep(1.0)
    members = list(group.members.values())
    await asyncio.wait_for(group.close(), 30)
    assert all(m.task.done() and m.process.returncode == 0 and m.closed for m in members)
    assert sorted(p.name for p in (tmp_path / "kafka-consumers").iterdir()) == [
        "c0-0.log",
        "c0-1.log",
        "c1-0.log",
    ]
    assert (group.stats.crashes, group.stats.restarts, group.stats.consumed) == (1, 1, 0)
    assert (tmp_path / "consumed" / "_CLOSED").exists() and "consumer group: 0 consumed" in said[-1]
