"""One member of the chaos run's librdkafka consumer group, as a process of its own
(``chaos run --client kafka --consumers N``; docs/operations.md "Chaos runs and verification"):
``python -m chaos.kafka_member '<json settings>'``, started and read by
:mod:`chaos.kafka_consumers`.

Why a process: librdkafka's consumer cannot be dropped in place the way a crash drops it. Its
``close()`` (and its destructor) revoke, commit if asked, and send LeaveGroup; the ``consumer``
fault must be a crash (no commit, no LeaveGroup, the coordinator expels the member after
``session.timeout.ms``: Kafka's DelayedHeartbeat). So the parent SIGKILLs this process.

The member is confluent-kafka's ``Consumer`` in Kafka's classic group protocol: ``group.id``,
``partition.assignment.strategy=range`` (the eager rebalance), ``enable.auto.commit=false``,
``auto.offset.reset=earliest``. As :class:`chaos.consumers.Member` does, it commits by hand
after processing (``commit(asynchronous=False)``) every ``commit_interval_s`` and in
``on_revoke`` before the rejoin, only partitions it owns, from what it consumed in the current
generation, the offset after the last record; ``on_lost`` (a membership lost by session timeout)
commits nothing. Its generation and member id come from ``consumer_group_metadata()``
(KIP-447's ConsumerGroupMetadata, which confluent-kafka hands over in librdkafka's serialised
form: :func:`group_metadata`).

Every fact goes to stdout as one JSON line (:data:`CONSUMED`, :data:`COMMITTED`,
:data:`ASSIGNED`, :data:`COMMIT_FAILED`, :data:`POLL_ERROR`), written whole before the next step:
what it consumed is on the pipe before the commit that covers it, a commit only once the
coordinator acknowledged it. What a SIGKILL leaves in the pipe is what the process had recorded;
the parent turns the lines into the consumer ledger (:mod:`ledger.consumed`). The member stops on
a ``stop`` line or the end of stdin (its parent gone: it never outlives the run) and at the
latest after ``lifetime_s``; stopping commits once more and closes (LeaveGroup).

This module imports nothing but the standard library and confluent-kafka, so it starts fast.
"""

from __future__ import annotations

import json
import os
import struct
import sys
import threading
import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

CONSUMED, COMMITTED, ASSIGNED = "consumed", "committed", "assigned"
COMMIT_FAILED, POLL_ERROR, CLOSED = "commit_failed", "poll_error", "closed"
STOP_LINE = b"stop\n"
NO_GENERATION = -1
BATCH = 500
POLL_TIMEOUT_S = 0.5
#: librdkafka's serialised ConsumerGroupMetadata (rd_kafka_consumer_group_metadata_write):
#: the magic, the generation (native int32), then group id and member id, each NUL-terminated.
METADATA_MAGIC = b"CGMDv2:"
_GENERATION = struct.Struct("=i")


def group_metadata(serialised: bytes) -> tuple[int, str]:
    """(generation, member id) of librdkafka's serialised ConsumerGroupMetadata; (-1, "") for a
    form it does not know."""
    if not serialised.startswith(METADATA_MAGIC) or len(serialised) < len(METADATA_MAGIC) + 4:
        return NO_GENERATION, ""
    (generation,) = _GENERATION.unpack_from(serialised, len(METADATA_MAGIC))
    fields = serialised[len(METADATA_MAGIC) + 4 :].split(b"\0")
    member_id = fields[1].decode(errors="replace") if len(fields) > 1 else ""
    return generation, member_id


def _error_name(exc: BaseException | KafkaError) -> str:
    err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else exc
    return err.name() if isinstance(err, KafkaError) else type(err).__name__


class Out:
    """Whole JSON lines on a file descriptor (a pipe: what is written survives the writer)."""

    def __init__(self, fd: int = 1, clock_ms: Any = None) -> None:
        self.fd = fd
        self.clock_ms = clock_ms or (lambda: time.time_ns() // 1_000_000)

    def emit(self, kind: str, **fields: Any) -> None:
        data = (
            json.dumps({"k": kind, "t": self.clock_ms(), **fields}, separators=(",", ":")) + "\n"
        ).encode()
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view) :]


class KafkaMember:
    """The member's consumer, its positions and commits (see the module docstring)."""

    def __init__(self, settings: dict[str, Any], out: Out, consumer: Any = None) -> None:
        self.s, self.out = settings, out
        self.topic: str = settings["topic"]
        self.consumer = consumer or Consumer(
            {
                "bootstrap.servers": settings["bootstrap"],
                "group.id": settings["group_id"],
                "client.id": f"chaos-kafka-consumer-{settings['name']}",
                "partition.assignment.strategy": settings.get("assignment_strategy", "range"),
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "session.timeout.ms": settings["session_timeout_ms"],
                "heartbeat.interval.ms": settings["heartbeat_interval_ms"],
                "socket.timeout.ms": settings["request_timeout_ms"],
            }
        )
        self.owned: set[int] = set()
        self.positions: dict[int, int] = {}  # partition -> the offset after the last record consumed
        self.committed: dict[int, int] = {}  # partition -> the last offset committed, this generation
        self.stop = threading.Event()

    def generation(self) -> tuple[int, str]:
        return group_metadata(bytes(self.consumer.consumer_group_metadata()))

    def run(self) -> None:
        """Poll, record, commit every ``commit_interval_s``, until stopped or ``lifetime_s``."""
        self.consumer.subscribe(
            [self.topic], on_assign=self.on_assign, on_revoke=self.on_revoke, on_lost=self.on_lost
        )
        deadline = time.monotonic() + self.s["lifetime_s"]
        interval = self.s["commit_interval_s"]
        next_commit = time.monotonic() + interval
        while not self.stop.is_set() and time.monotonic() < deadline:
            try:
                messages = self.consumer.consume(num_messages=BATCH, timeout=POLL_TIMEOUT_S)
            except KafkaException as exc:
                self.out.emit(POLL_ERROR, e=_error_name(exc))
                time.sleep(0.2)
                continue
            self.record(messages)
            if time.monotonic() >= next_commit:
                self.commit()
                next_commit = time.monotonic() + interval
        self.commit()
        self.consumer.close()  # revokes (its commit has nothing left), LeaveGroup
        self.out.emit(CLOSED)

    def record(self, messages: list[Any]) -> None:
        rows, outside = [], 0
        for m in messages:
            if m.error() is not None:
                self.out.emit(POLL_ERROR, e=_error_name(m.error()))
                continue
            partition, offset, value = m.partition(), m.offset(), m.value()
            outside += partition not in self.owned
            rows.append([partition, offset, None if value is None else value.hex()])
            self.positions[partition] = offset + 1
        if rows:
            generation, member_id = self.generation()
            self.out.emit(CONSUMED, g=generation, m=member_id, topic=self.topic, r=rows, x=outside)

    def commit(self, partitions: set[int] | None = None) -> None:
        """Commit the position of each owned partition (or of ``partitions``) that moved since the
        last commit, under the current generation; emit it once acknowledged."""
        generation, member_id = self.generation()
        if generation == NO_GENERATION:
            return
        owned = self.owned if partitions is None else partitions
        offsets = {p: at for p, at in self.positions.items() if p in owned and self.committed.get(p) != at}
        if not offsets:
            return
        tps = [TopicPartition(self.topic, p, at) for p, at in sorted(offsets.items())]
        try:
            answer = self.consumer.commit(offsets=tps, asynchronous=False) or []
        except KafkaException as exc:
            self.out.emit(COMMIT_FAILED, e=_error_name(exc))
            return
        refused = {tp.partition for tp in answer if tp.error is not None}
        for tp in answer:
            if tp.error is not None:
                self.out.emit(COMMIT_FAILED, e=_error_name(tp.error))
        done = [[p, at] for p, at in sorted(offsets.items()) if p not in refused]
        if done:
            self.out.emit(COMMITTED, g=generation, m=member_id, topic=self.topic, o=done)
            self.committed.update((p, at) for p, at in done)

    def on_assign(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        """A new generation: positions start from the group's committed offsets."""
        self.positions.clear()
        self.committed.clear()
        self.owned = {tp.partition for tp in partitions}
        generation, member_id = self.generation()
        self.out.emit(ASSIGNED, g=generation, m=member_id, topic=self.topic, p=sorted(self.owned))

    def on_revoke(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        """The eager rebalance takes every partition: commit what was consumed of them first."""
        revoked = {tp.partition for tp in partitions}
        self.commit(revoked)
        self._drop(revoked)

    def on_lost(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        """The membership is gone (expelled): another member may own them already; no commit."""
        self._drop({tp.partition for tp in partitions})

    def _drop(self, partitions: set[int]) -> None:
        for p in partitions:
            self.positions.pop(p, None)
            self.committed.pop(p, None)
        self.owned -= partitions


def _watch_stdin(stop: threading.Event) -> None:
    """A ``stop`` line, or the end of stdin (the parent closed it or died), stops the member."""
    try:
        for line in sys.stdin.buffer:
            if line == STOP_LINE:
                break
    finally:
        stop.set()


def main(argv: list[str]) -> int:
    settings = json.loads(argv[1])
    member = KafkaMember(settings, Out())
    threading.Thread(target=_watch_stdin, args=(member.stop,), daemon=True).start()
    member.run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
