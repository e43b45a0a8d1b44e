"""Failover time: from SIGKILL of a partition leader to the first acks=all write acknowledged after it.

On a 3-broker cluster, a topic with replication factor 3 and ``min.insync.replicas=2`` gets a
steady stream of acks=all writes to partition 0 from one :class:`client.producer.Producer`
(asyncio, about 500 records/s, default retries and delivery timeout). Each round:

1. waits until partition 0 has a leader and a full ISR (3) and a write sent after that was
   acknowledged (the steady state);
2. SIGKILLs the leader of partition 0 (``LocalCluster.kill(id, "KILL")``) and measures the time
   from the kill to the first acknowledgement of a write *sent after the kill*, which only a
   new leader can give. While waiting it watches ZooKeeper (:mod:`bench.zk_view`), to split that
   time into "the broker's ephemeral ``/brokers/ids/<id>`` disappeared" (the session timeout) and
   "the state znode names a new leader" (the controller's election);
3. restarts the killed broker (``LocalCluster.start``) and waits for the ISR to be full again.

Every wait is bounded. A round that does not finish says what it saw (the partition's state
znode, the registered brokers, the producer's last error) instead of hanging, and a round whose
ISR does not become full again ends the measurement (with min.insync.replicas=2 a further kill
could not succeed). Run alone: ``.venv/bin/python bench/failover.py [--rounds 3]``; ``run_all.py``
calls :func:`measure` on its own cluster.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import CLUSTER_SETTINGS, bench_cluster, say  # noqa: E402
from bench.zk_view import ZK_CALL_TIMEOUT_S, PartitionState, ZooKeeperView  # noqa: E402
from devcluster.cluster import LocalCluster  # noqa: E402
from devcluster.errors import ClusterError  # noqa: E402
from devcluster.state import DEFAULT_SESSION_TIMEOUT_MS  # noqa: E402
from zk.paths import broker_id_path  # noqa: E402

TOPIC = "bench-failover"
PARTITIONS = 3
REPLICATION_FACTOR = 3
MIN_INSYNC = 2
PARTITION = 0
RECORD = b"x" * 100
SEND_INTERVAL_S = 0.002  # about 500 records/s: steady, and a fine time resolution
MAX_OUTSTANDING = 20_000
POLL_S = 0.05
STEADY_TIMEOUT_S = 60.0
FAILOVER_TIMEOUT_S = 60.0
RESTART_TIMEOUT_S = 60.0
ISR_TIMEOUT_S = 45.0
CLOSE_TIMEOUT_S = 15.0


# -- the writer ----------------------------------------------------------------------------------


@dataclass
class Writer:
    """Sends RECORD to partition 0 every SEND_INTERVAL_S and tracks acknowledgements."""

    producer: Any
    topic: str
    sent: int = 0
    acked: int = 0
    failed: int = 0
    last_error: str | None = None
    _waiters: list[tuple[float, asyncio.Future]] = field(default_factory=list)
    _stop: bool = False

    async def run(self) -> None:
        slots = asyncio.Semaphore(MAX_OUTSTANDING)
        while not self._stop:
            await slots.acquire()
            sent_at = time.monotonic()
            try:
                future = await self.producer.send(self.topic, RECORD, partition=PARTITION)
            except Exception as exc:  # noqa: BLE001 - a send refused outright counts as a failure
                slots.release()
                self.failed += 1
                self.last_error = f"send refused: {exc}"
                await asyncio.sleep(0.1)
                continue
            self.sent += 1
            future.add_done_callback(lambda f, t=sent_at: (slots.release(), self._done(t, f)))
            await asyncio.sleep(SEND_INTERVAL_S)

    def stop(self) -> None:
        self._stop = True

    def _done(self, sent_at: float, future: asyncio.Future) -> None:
        now = time.monotonic()
        if future.cancelled() or future.exception() is not None:
            self.failed += 1
            self.last_error = "cancelled" if future.cancelled() else str(future.exception())
            return
        self.acked += 1
        for threshold, waiter in list(self._waiters):
            if sent_at >= threshold and not waiter.done():
                waiter.set_result(now)

    async def first_ack_sent_after(self, threshold: float, timeout: float) -> float | None:
        """The monotonic time of the first acknowledgement of a record sent at or after
        ``threshold``; None when none comes within ``timeout`` seconds."""
        waiter = asyncio.get_running_loop().create_future()
        entry = (threshold, waiter)
        self._waiters.append(entry)
        try:
            return await asyncio.wait_for(waiter, timeout)
        except TimeoutError:
            return None
        finally:
            self._waiters.remove(entry)


# -- one round -----------------------------------------------------------------------------------


@dataclass
class Round:
    number: int
    killed: int | None = None
    killed_was_controller: bool = False
    before: PartitionState | None = None
    after: PartitionState | None = None
    failover_s: float | None = None
    unregistered_s: float | None = None
    elected_s: float | None = None
    new_leader: int | None = None
    isr_full_s: float | None = None
    problem: str | None = None

    def line(self) -> str:
        head = f"round {self.number}:"
        if self.killed is None:
            return f"{head} not started: {self.problem}"
        role = " (also the controller)" if self.killed_was_controller else ""
        parts = [f"{head} SIGKILL broker {self.killed}, leader of partition {PARTITION}{role}"]
        if self.failover_s is not None:
            parts.append(f"first acks=all ack after {self.failover_s:.2f} s")
        else:
            parts.append(f"NO acks=all ack within {FAILOVER_TIMEOUT_S:.0f} s")
        if self.unregistered_s is not None:
            parts.append(f"{broker_id_path(self.killed)} gone after {self.unregistered_s:.2f} s")
        if self.elected_s is not None:
            parts.append(f"new leader {self.new_leader} in ZooKeeper after {self.elected_s:.2f} s")
        if self.isr_full_s is not None:
            parts.append(f"ISR full again {self.isr_full_s:.2f} s after the restart")
        text = "; ".join(parts)
        return f"{text}. PROBLEM: {self.problem}" if self.problem else text + "."


@dataclass
class FailoverReport:
    session_timeout_ms: int
    settings: dict[str, str]
    rounds: list[Round]
    error: str | None = None
    notes: list[str] = field(default_factory=list)
    sent: int = 0
    acked: int = 0
    failed: int = 0

    @property
    def times(self) -> list[float]:
        return [r.failover_s for r in self.rounds if r.failover_s is not None]

    def summary(self) -> str:
        times = self.times
        if not times:
            return "no failover completed"
        return (
            f"{len(times)} of {len(self.rounds)} round(s): min {min(times):.2f} s, "
            f"median {statistics.median(times):.2f} s, max {max(times):.2f} s"
        )


async def _observe(
    zk: ZooKeeperView, topic: str, killed: int, killed_at: float, result: Round, done: asyncio.Event
) -> None:
    """Until ``done``: note when the killed broker unregisters and when a new leader is written."""
    while not done.is_set() and (result.unregistered_s is None or result.elected_s is None):
        try:
            if result.unregistered_s is None and killed not in await zk.registered():
                result.unregistered_s = time.monotonic() - killed_at
            if result.elected_s is None:
                state = await zk.partition_state(topic, PARTITION)
                if state is not None and state.leader >= 0 and state.leader != killed:
                    result.elected_s = time.monotonic() - killed_at
                    result.new_leader = state.leader
        except Exception as exc:  # noqa: BLE001 - observing is best effort
            say(f"watching ZooKeeper failed: {exc}")
        await asyncio.sleep(POLL_S)


async def _wait_full_isr(zk: ZooKeeperView, topic: str, timeout: float) -> PartitionState | None:
    """The state once partition 0 has a leader and all REPLICATION_FACTOR replicas in its ISR;
    None after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = await zk.partition_state(topic, PARTITION)
        if state is not None and state.leader >= 0 and len(state.isr) == REPLICATION_FACTOR:
            return state
        await asyncio.sleep(POLL_S * 4)
    return None


async def _state_text(zk: ZooKeeperView, topic: str, writer: Writer) -> str:
    try:
        state = await zk.partition_state(topic, PARTITION)
        registered = await zk.registered()
        controller = await zk.controller()
    except Exception as exc:  # noqa: BLE001
        return f"(could not read ZooKeeper: {exc})"
    znode = state.describe() if state is not None else "missing"
    return (
        f"state znode of {topic}-{PARTITION}: {znode}; registered brokers {registered}; controller {controller}; "
        f"producer: {writer.sent} sent, {writer.acked} acked, {writer.failed} failed"
        + (f", last error: {writer.last_error}" if writer.last_error else "")
    )


async def _round(number: int, cluster: LocalCluster, zk: ZooKeeperView, writer: Writer, topic: str) -> Round:
    result = Round(number)
    before = await _wait_full_isr(zk, topic, ISR_TIMEOUT_S)
    if before is None:
        result.problem = (
            f"partition {PARTITION} had no leader with a full ISR within {ISR_TIMEOUT_S:.0f} s: "
            + await _state_text(zk, topic, writer)
        )
        return result
    steady = await writer.first_ack_sent_after(time.monotonic(), STEADY_TIMEOUT_S)
    if steady is None:
        result.problem = (
            f"no acks=all write was acknowledged within {STEADY_TIMEOUT_S:.0f} s before the kill: "
            + await _state_text(zk, topic, writer)
        )
        return result
    result.before = await zk.partition_state(topic, PARTITION) or before
    result.killed = result.before.leader
    result.killed_was_controller = await zk.controller() == result.killed
    say(f"round {number}: partition {PARTITION} {result.before.describe()}; SIGKILL broker {result.killed}")

    killed_at = time.monotonic()
    await asyncio.wait_for(asyncio.to_thread(cluster.kill, result.killed, "KILL"), 20)
    done = asyncio.Event()
    observer = asyncio.create_task(_observe(zk, topic, result.killed, killed_at, result, done))
    acked_at = await writer.first_ack_sent_after(killed_at, FAILOVER_TIMEOUT_S)
    if acked_at is not None:
        result.failover_s = acked_at - killed_at
        # The observer polls: give it a moment to record what already happened.
        catch_up = time.monotonic() + 1.0
        while (result.unregistered_s is None or result.elected_s is None) and time.monotonic() < catch_up:
            await asyncio.sleep(POLL_S)
    done.set()
    await asyncio.wait_for(observer, ZK_CALL_TIMEOUT_S * 3)
    result.after = await zk.partition_state(topic, PARTITION)
    if acked_at is None:
        result.problem = f"timed out after {FAILOVER_TIMEOUT_S:.0f} s: " + await _state_text(
            zk, topic, writer
        )
    say(result.line())

    say(f"round {number}: restarting broker {result.killed}")
    restarted_at = time.monotonic()
    try:
        await asyncio.wait_for(
            asyncio.to_thread(cluster.start, result.killed, RESTART_TIMEOUT_S), RESTART_TIMEOUT_S + 15
        )
    except (ClusterError, TimeoutError) as exc:
        result.problem = (result.problem + "; " if result.problem else "") + f"restart failed: {exc}"
        return result
    full = await _wait_full_isr(zk, topic, ISR_TIMEOUT_S)
    if full is None:
        note = (
            f"broker {result.killed} restarted but the ISR was not full again within {ISR_TIMEOUT_S:.0f} s "
            f"(ISR expand may not be implemented yet): " + await _state_text(zk, topic, writer)
        )
        result.problem = (result.problem + "; " if result.problem else "") + note
    else:
        result.isr_full_s = time.monotonic() - restarted_at
    return result


async def measure(cluster: LocalCluster, rounds: int = 3) -> FailoverReport:
    """Create the topic, start the writer, run ``rounds`` rounds (stopping early when a round
    leaves the partition unable to fail over again), stop the writer. Never raises for a
    failover that did not happen: the report says what went wrong."""
    from client.admin import AdminClient
    from client.producer import Producer
    from client.protocol.errors import ErrorCode, KafkaError

    state = cluster.state
    settings = dict(state.overrides) if state is not None else {}
    session_ms = int(settings.get("zookeeper.session.timeout.ms", DEFAULT_SESSION_TIMEOUT_MS))
    report = FailoverReport(session_timeout_ms=session_ms, settings=settings, rounds=[])
    bootstrap = cluster.bootstrap_servers

    admin = AdminClient(bootstrap)
    try:
        await asyncio.wait_for(admin.start(), 30)
        await admin.create_topic(
            TOPIC, PARTITIONS, REPLICATION_FACTOR, {"min.insync.replicas": str(MIN_INSYNC)}
        )
    except KafkaError as exc:
        if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
            report.error = f"could not create topic {TOPIC}: {exc}"
            return report
    except TimeoutError:
        report.error = "could not reach the cluster to create the topic within 30 s"
        return report
    finally:
        await asyncio.wait_for(admin.close(), CLOSE_TIMEOUT_S)

    zk = ZooKeeperView(cluster.zookeeper_connect)
    await zk.start()
    producer: Any = None
    writer: Writer | None = None
    task: asyncio.Task | None = None
    try:
        producer = await _start_producer(Producer, bootstrap, report)
        writer = Writer(producer, TOPIC)
        task = asyncio.create_task(writer.run(), name="bench-failover-writer")
        for number in range(1, rounds + 1):
            result = await _round(number, cluster, zk, writer, TOPIC)
            report.rounds.append(result)
            if result.problem:
                say(f"round {number}: {result.problem}")
            if result.isr_full_s is None:
                if number < rounds:
                    say("stopping the failover measurement: the partition cannot fail over cleanly again")
                break
    except Exception as exc:  # noqa: BLE001 - the report carries it; the caller stops the cluster
        report.error = f"{exc.__class__.__name__}: {exc}"
        say(f"failover measurement failed: {report.error}")
    finally:
        if writer is not None:
            writer.stop()
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        if producer is not None:
            try:  # delivers (or fails) what is still in flight, so the totals below add up
                await asyncio.wait_for(producer.close(timeout=5), CLOSE_TIMEOUT_S)
            except Exception as exc:  # noqa: BLE001
                say(f"closing the producer failed: {exc}")
        if writer is not None:
            report.sent, report.acked, report.failed = writer.sent, writer.acked, writer.failed
        await zk.stop()
    return report


async def _start_producer(producer_class: Any, bootstrap: str, report: FailoverReport) -> Any:
    """An acks=all producer (idempotent where the client makes it so, as Kafka 3.x does). When the
    brokers refuse InitProducerId (idempotence not served yet), fall back to a non-idempotent
    acks=all producer and say so in the report: the failover time does not depend on it."""
    from client.protocol.errors import KafkaError

    options: dict[str, Any] = {"acks": "all", "linger_ms": 0, "client_id": "bench-failover"}
    producer = producer_class(bootstrap, **options)
    try:
        await asyncio.wait_for(producer.start(), 30)
        return producer
    except KafkaError as exc:
        if "INIT_PRODUCER_ID" not in str(exc).upper() and "InitProducerId" not in str(exc):
            raise
        report.notes.append(
            f"the idempotent producer could not start ({exc}); measured with enable_idempotence=False"
        )
        say(report.notes[-1])
    producer = producer_class(bootstrap, enable_idempotence=False, **options)
    await asyncio.wait_for(producer.start(), 30)
    return producer


# -- output --------------------------------------------------------------------------------------


def render(report: FailoverReport) -> str:
    """The failover section of the markdown report."""
    lines = [
        f"Topic `{TOPIC}`: {PARTITIONS} partitions, replication factor {REPLICATION_FACTOR}, "
        f"`min.insync.replicas={MIN_INSYNC}`; one producer with `acks=all` writing about "
        f"{1 / SEND_INTERVAL_S:.0f} records/s of {len(RECORD)} bytes to partition {PARTITION}. "
        f"Broker settings: `zookeeper.session.timeout.ms={report.session_timeout_ms}`"
        + "".join(
            f", `{k}={v}`" for k, v in sorted(report.settings.items()) if k != "zookeeper.session.timeout.ms"
        )
        + ", everything else at its default.",
        "",
        "Failover time = from the SIGKILL of partition 0's leader to the first acknowledgement of an "
        "acks=all write sent after the kill.",
        "",
        f"**Result: {report.summary()}** (zookeeper.session.timeout.ms = {report.session_timeout_ms}).",
        "",
    ]
    if report.rounds:
        lines += [
            "| round | killed broker | failover (s) | ZK session expired (s) | new leader elected (s) "
            "| new leader, epoch | ISR full after restart (s) |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in report.rounds:
            killed = (
                "-" if r.killed is None else f"{r.killed}{' (controller)' if r.killed_was_controller else ''}"
            )
            after = f"{r.after.leader}, {r.after.leader_epoch}" if r.after is not None else "-"
            lines.append(
                f"| {r.number} | {killed} | {_fmt(r.failover_s, 'timeout')} | {_fmt(r.unregistered_s)} "
                f"| {_fmt(r.elected_s)} | {after} | {_fmt(r.isr_full_s, 'not full')} |"
            )
        lines.append("")
    lines += [f"- note: {note}" for note in report.notes]
    problems = [r for r in report.rounds if r.problem]
    for r in problems:
        lines.append(f"- round {r.number}: {r.problem}")
    if report.error:
        lines.append(f"- the measurement stopped: {report.error}")
    lines.append(
        f"- producer totals: {report.sent} sent, {report.acked} acknowledged, {report.failed} failed "
        "(failures are records whose delivery timed out or was refused)."
    )
    return "\n".join(lines)


def _fmt(value: float | None, missing: str = "-") -> str:
    return f"{value:.2f}" if value is not None else missing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=3, help="kill/restart rounds (default 3)")
    parser.add_argument("--keep-data", action="store_true", help="keep the cluster's temp dir")
    args = parser.parse_args(argv)
    import uvloop

    logging.basicConfig(
        level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    logging.getLogger("kazoo").setLevel(logging.ERROR)

    with bench_cluster(CLUSTER_SETTINGS, keep_data=args.keep_data, prefix="floodmark-failover-") as cluster:
        report = uvloop.run(measure(cluster, args.rounds))
    print(render(report))
    return 0 if report.times and not report.error else 1


if __name__ == "__main__":
    sys.exit(main())
