"""Kafka's clients against the msgpack client (issue 24; docs/benchmarks.md "Kafka's clients
against the msgpack client (issue 24)"): what a record costs the brokers when it comes through
the KAFKA listener (Kafka's binary protocol, broker/kafka_protocol/) rather than the msgpack one.

One cluster (ZooKeeper and 3 brokers, bench/common.py's ``bench_cluster``), one run, side by side:

* **produce**, 100-byte records, 6 partitions, each case on a fresh topic with ``--records``
  records: (a) RF 3, acks=all, ``min.insync.replicas=2`` and (b) RF 1, acks=1, each by
  (i) ``floodmark perf produce`` over the msgpack listener and (ii) a confluent-kafka
  (librdkafka) Producer over the KAFKA listener (bench/kafka_client_worker.py); both with
  ``linger.ms=5``, ``batch.size=16384`` and ``enable.idempotence`` true exactly for acks=all.
  Two variants of (a): librdkafka with ``batch.size=32768``, so that its Produce requests (one
  batch of one partition each) carry about as many records as the msgpack client's (several
  batches a request); and both producers not idempotent, since librdkafka's idempotent producer
  keeps one Produce request in flight per partition (librdkafka PR #4989), whatever
  ``max.in.flight`` says;
* **consume**: ``floodmark perf consume`` against a confluent-kafka Consumer (every partition
  assigned from the beginning) reading one RF 3 topic of 5 x ``--records`` records (the brokers
  spend so little on a read that /proc's 10 ms clock ticks need the larger count);
* **ceiling**: N (``--parallel``, 2 and 4) producer processes at once, RF 3 acks=all, not
  idempotent (for the reason above), of each kind: the brokers' rate once one client process
  is not what limits it.

Each produce case's topic is deleted after it (and the run waits until the controller has
removed it), so every case meets the same partitions: a broker's CPU per record grows with the
partitions its follower fetches cover (it doubled with 72 more partitions here).

For every case: the clients' records/s; the brokers' CPU per record (user + system time of the
broker processes from /proc/<pid>/stat before and after the case, over the records); the client
processes' CPU per record (``RUSAGE_CHILDREN``: every client runs as a child process); records
per Produce request and Fetch requests (the followers', in a produce case) per 1,000 records
(the brokers' ``kafka_network_requestmetrics_requests_total``). The cases run ``--repeat`` times,
in reverse order every other round, so a busy machine hurts both sides alike; the report gives
medians and the median of the per-round Kafka/msgpack ratios of broker CPU per record.
``--profile DIR`` then runs both (a) cases once more with py-spy on every broker
(bench/broker_profile.py) and lists where the Kafka listener's extra CPU goes; at the end, with
the cluster down, the two codecs are timed alone in this process on requests shaped as each
client sends them. The table and JSON are bench/kafka_clients_report.py's.
Markdown on stdout, progress on stderr::

    .venv/bin/python bench/kafka_clients.py [--records 200000] [--repeat 2] [--json FILE] [--profile DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):  # run as a script: the repository root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import broker_profile  # noqa: E402
from bench.common import ROOT, bench_cluster, floodmark_command, load_average, say  # noqa: E402
from bench.kafka_clients_report import (  # noqa: E402
    BATCH_SIZE,
    KAFKA,
    LINGER_MS,
    MSGPACK,
    PARTITIONS,
    RECORD_SIZE,
    Case,
    Sample,
    medians,
    report,
    write_json,
)
from bench.perf_parse import ParseError, parse_consume, parse_produce  # noqa: E402
from devcluster.cluster import LocalCluster  # noqa: E402
from devcluster.zookeeper import zk_session  # noqa: E402
from zk import paths  # noqa: E402

WORKER = Path(__file__).resolve().parent / "kafka_client_worker.py"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
WARMUP_RECORDS = 20_000
IDLE_S = 3.0
CREATE_TIMEOUT_S = 60.0
DELETE_TIMEOUT_S = 60.0
REQUESTS_METRIC = "kafka_network_requestmetrics_requests_total"
COUNTED_REQUESTS = ("PRODUCE", "FETCH")


@dataclass
class Done:
    code: int
    out: str
    err: str
    exited: float  # time.monotonic() when the process was reaped


def run_parallel(argvs: list[list[str]], timeout: float) -> list[Done]:
    """Run the commands at once, each bounded by ``timeout``; one thread reaps each."""
    procs = [
        subprocess.Popen(a, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
        for a in argvs
    ]
    done: list[Done | None] = [None] * len(procs)

    def reap(i: int, proc: subprocess.Popen) -> None:
        try:
            out, err = proc.communicate(timeout=timeout)
            done[i] = Done(proc.returncode, out, err, time.monotonic())
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
            done[i] = Done(-1, out or "", f"timed out after {timeout:.0f} s", time.monotonic())

    threads = [threading.Thread(target=reap, args=(i, p)) for i, p in enumerate(procs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [d for d in done if d is not None]


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][-300:] if lines else "(no output)"


class Bench:
    """Runs the cases against one cluster and measures the brokers around each."""

    def __init__(self, cluster: LocalCluster, records: int) -> None:
        self.cluster = cluster
        self.records = records
        self.bootstrap = cluster.bootstrap_servers
        self.kafka_bootstrap = cluster.kafka_bootstrap_servers
        self.floodmark = floodmark_command()
        self.commands: dict[str, str] = {}
        self.timeout = 120 + records / 1000

    # -- the brokers -------------------------------------------------------------------------------
    def broker_pids(self) -> dict[int, int]:
        state = self.cluster.state
        return {b.id: b.pid for b in state.brokers.values() if b.pid} if state is not None else {}

    def broker_cpu_s(self) -> float:
        """CPU seconds (user + system, every thread) the broker processes have used so far."""
        total = 0.0
        for pid in self.broker_pids().values():
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            total += (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
        return total

    def request_counts(self) -> dict[str, int] | None:
        """Produce and Fetch requests (clients' and followers') the brokers have handled so far,
        from their /metrics; None when one cannot be read."""
        totals = dict.fromkeys(COUNTED_REQUESTS, 0)
        for address in self.cluster.metrics_addresses().values():
            if address is None:
                return None
            try:
                text = urllib.request.urlopen(address, timeout=5).read().decode()
            except OSError:
                return None
            for line in text.splitlines():
                for name in COUNTED_REQUESTS:
                    if line.startswith(f'{REQUESTS_METRIC}{{request="{name}"}}'):
                        totals[name] += int(float(line.split()[-1]))
        return totals

    # -- commands ----------------------------------------------------------------------------------
    def create_topic(self, topic: str, case: Case) -> None:
        argv = [*self.floodmark, "topics", "create", "--bootstrap-server", self.bootstrap, "--topic", topic]
        argv += ["--partitions", str(PARTITIONS), "--replication-factor", str(case.replication_factor)]
        for config in case.topic_configs:
            argv += ["--config", config]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=CREATE_TIMEOUT_S, cwd=ROOT)
        if done.returncode != 0:
            raise RuntimeError(f"topics create {topic} failed: {_last_line(done.stderr)}")

    def delete_topic(self, topic: str) -> None:
        """Delete a case's topic and wait (bounded) until the controller has removed it: every
        partition left behind adds to each follower fetch, and so to the next cases' broker CPU."""
        argv = [*self.floodmark, "topics", "delete", "--bootstrap-server", self.bootstrap, "--topic", topic]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=CREATE_TIMEOUT_S, cwd=ROOT)
        if done.returncode != 0:
            raise RuntimeError(f"topics delete {topic} failed: {_last_line(done.stderr)}")
        deadline = time.monotonic() + DELETE_TIMEOUT_S
        with zk_session(self.cluster.state.zookeeper.port) as zk:
            while zk.exists(paths.topic_path(topic)) or zk.exists(paths.delete_topic_path(topic)):
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"topic {topic} still exists {DELETE_TIMEOUT_S:.0f} s after its deletion"
                    )
                time.sleep(0.2)

    def argv(self, case: Case, side: str, topic: str, records: int, start_at: float) -> list[str]:
        """One client's command: ``floodmark perf`` for the msgpack side, the worker for Kafka's."""
        if side == MSGPACK:
            argv = [
                *self.floodmark,
                "perf",
                case.kind,
                "--bootstrap-server",
                self.bootstrap,
                "--topic",
                topic,
            ]
            if case.kind == "consume":
                return [*argv, "--messages", str(records)]
            argv += ["--num-records", str(records), "--record-size", str(RECORD_SIZE), "--throughput", "-1"]
            argv += ["--acks", case.acks, "--producer-props", f"linger.ms={LINGER_MS}"]
            return [*argv, f"batch.size={BATCH_SIZE}", f"enable.idempotence={str(case.idempotence).lower()}"]
        argv = [sys.executable, str(WORKER), case.kind, "--bootstrap", self.kafka_bootstrap, "--topic", topic]
        argv += ["--records", str(records)]
        if case.kind == "produce":
            argv += ["--record-size", str(RECORD_SIZE), "--acks", case.acks, "--linger-ms", str(LINGER_MS)]
            argv += [
                "--batch-size",
                str(case.kafka_batch_size),
                "--idempotence",
                str(case.idempotence).lower(),
            ]
            argv += ["--start-at", f"{start_at:.3f}"] if start_at else []
        return argv

    def shown(self, argv: list[str], topic: str) -> str:
        """A command as the report shows it: bootstrap strings and topic as variables."""
        text = " ".join(argv).replace(self.bootstrap, "$BOOTSTRAP").replace(self.kafka_bootstrap, "$KAFKA")
        text = re.sub(r"--start-at \S+", "--start-at $START", text.replace(f"{ROOT}/", ""))
        return text.replace(topic, "$TOPIC")

    # -- one case ----------------------------------------------------------------------------------
    def run(self, case: Case, side: str, round_: int, topic: str, records: int | None = None) -> Sample:
        """One case through one listener: ``case.processes`` clients at once, the brokers measured
        around them. Round 0 is not reported."""
        per = (records or self.records) // case.processes
        start_at = time.time() + 2.0 if side == KAFKA and case.processes > 1 else 0.0
        argvs = [self.argv(case, side, topic, per, start_at) for _ in range(case.processes)]
        if round_ == 1:
            self.commands.setdefault(f"{case.key} {side}", self.shown(argvs[0], topic))
        sample = Sample(case.key, side, round_)
        requests = self.request_counts() if case.kind == "produce" else None
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        brokers, started = self.broker_cpu_s(), time.monotonic()
        done = run_parallel(argvs, self.timeout)
        sample.window_s = time.monotonic() - started
        sample.broker_cpu_s = self.broker_cpu_s() - brokers
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        sample.client_cpu_s = after.ru_utime - children.ru_utime + after.ru_stime - children.ru_stime
        if requests is not None and (now := self.request_counts()) is not None:
            sample.produce_requests = now["PRODUCE"] - requests["PRODUCE"]
            sample.fetch_requests = now["FETCH"] - requests["FETCH"]
        self._tally(sample, case, side, done)
        say(
            f"round {round_} {case.key} {side}: {sample.records:,} records, {sample.records_per_sec:,.0f}/s, "
            f"brokers {sample.broker_us:.1f} us/record, client {sample.client_us:.1f} us/record"
            + (f"; problems: {sample.problems}" if sample.problems else "")
        )
        return sample

    def _tally(self, sample: Sample, case: Case, side: str, done: list[Done]) -> None:
        """Records and rate from each client's output: the sum, over the span from the first
        client's start to the last one's end."""
        spans: list[tuple[float, float]] = []
        for d in done:
            try:
                records, rate, start, end = _parse(case.kind, side, d)
            except (ParseError, ValueError, KeyError, IndexError) as exc:
                sample.problems.append(f"exit {d.code}: {exc}: {_last_line(d.err)}")
                continue
            if d.code != 0:
                sample.problems.append(f"exit {d.code}: {_last_line(d.err)}")
            sample.records += records
            spans.append((start, end))
            sample.records_per_sec = rate
        if len(spans) > 1:
            span = max(e for _, e in spans) - min(s for s, _ in spans)
            sample.records_per_sec = sample.records / span if span > 0 else 0.0


def _parse(kind: str, side: str, done: Done) -> tuple[int, float, float, float]:
    """(records, records/s, start, end) of one client: wall-clock times from the worker; for
    ``perf``, its end taken as the moment it was reaped and its start as its own elapsed before."""
    if side == KAFKA:
        doc = json.loads(done.out.strip().splitlines()[-1])
        return doc["records"], doc["records_per_sec"], doc["start_wall"], doc["end_wall"]
    if kind == "produce":
        result = parse_produce(done.out)
        records, rate = result.records, result.records_per_sec
    else:
        consumed = parse_consume(done.out)
        records, rate = consumed.messages, consumed.messages_per_sec
    end = time.time() - (time.monotonic() - done.exited)
    return records, rate, end - (records / rate if rate else 0.0), end


# -- the run -------------------------------------------------------------------------------------


def cases(parallel: list[int]) -> list[Case]:
    rf3 = "produce, RF 3, acks=all, min.insync.replicas=2"
    return [
        Case("rf3-acks-all", f"{rf3}, idempotent", "produce"),
        Case(
            "rf3-acks-all-32k",
            f"{rf3}, idempotent, librdkafka `batch.size=32768`",
            "produce",
            kafka_batch_size=2 * BATCH_SIZE,
        ),  # fmt: skip
        Case("rf3-acks-all-plain", f"{rf3}, not idempotent", "produce", idempotent=False),
        Case("rf1-acks-1", "produce, RF 1, acks=1", "produce", 1, "1"),
        Case("consume", "consume an RF 3 topic, every partition from the beginning", "consume"),
        *(
            Case(
                f"ceiling-{n}",
                f"{rf3}, not idempotent, {n} producer processes at once",
                "produce",
                idempotent=False,
                processes=n,
            )  # fmt: skip
            for n in parallel
        ),
    ]


CONSUME_TOPIC = "kc-consume"
#: The consume topic holds this many times ``--records``: reading takes the brokers so little CPU
#: that /proc's 10 ms clock ticks need the larger count.
CONSUME_FACTOR = 5


def warm_up(bench: Bench, rf3: Case, consume: Case) -> float:
    """Unreported warm-up through both listeners, the consume topic filled, then the brokers'
    idle CPU (in cores) over ``IDLE_S``."""
    say(f"warm-up (not reported): {WARMUP_RECORDS:,} records through each listener, then read back")
    bench.create_topic("kc-warmup", rf3)
    for case, side in ((rf3, MSGPACK), (rf3, KAFKA), (consume, MSGPACK), (consume, KAFKA)):
        bench.run(case, side, 0, "kc-warmup", WARMUP_RECORDS)
    bench.delete_topic("kc-warmup")
    records = bench.records * CONSUME_FACTOR
    say(f"filling {CONSUME_TOPIC} with {records:,} records (perf produce, acks=1)")
    bench.create_topic(CONSUME_TOPIC, rf3)
    filled = bench.run(Case("fill", "fill", "produce", acks="1"), MSGPACK, 0, CONSUME_TOPIC, records)
    if filled.records < records or filled.problems:
        raise RuntimeError(f"filling {CONSUME_TOPIC} failed: {filled.problems}")
    before = bench.broker_cpu_s()
    time.sleep(IDLE_S)
    idle = (bench.broker_cpu_s() - before) / IDLE_S
    say(f"brokers idle: {idle:.3f} cores")
    return idle


def run_round(bench: Bench, all_cases: list[Case], round_: int) -> list[Sample]:
    """Every case through both listeners; even rounds run the cases, and the sides, in reverse."""
    forward = round_ % 2 == 1
    samples = []
    for case in all_cases if forward else all_cases[::-1]:
        for side in (MSGPACK, KAFKA) if forward else (KAFKA, MSGPACK):
            topic = CONSUME_TOPIC if case.kind == "consume" else f"kc-{case.key}-{side}-{round_}"
            if case.kind == "produce":
                bench.create_topic(topic, case)
            records = bench.records * (CONSUME_FACTOR if case.kind == "consume" else 1)
            samples.append(bench.run(case, side, round_, topic, records))
            if case.kind == "produce":
                bench.delete_topic(topic)
    return samples


def profile(bench: Bench, rf3: Case, out_dir: Path) -> list[str]:
    """Both RF 3 acks=all produce cases once more under py-spy on every broker; the comparison."""
    out_dir.mkdir(parents=True, exist_ok=True)
    profiles, measured = {}, {}
    for side in (MSGPACK, KAFKA):
        topic = f"kc-profile-{side}"
        bench.create_topic(topic, rf3)
        say(f"profiling the brokers (py-spy) under {rf3.key} through the {side} listener")
        with broker_profile.Profiler(bench.broker_pids(), out_dir, f"{rf3.key}-{side}") as profiler:
            sample = bench.run(rf3, side, 0, topic)
        bench.delete_topic(topic)
        profiles[side] = broker_profile.load(list(profiler.files.values()), sample.records)
        measured[side] = sample.broker_us
    return [
        f"Broker CPU of these two profiled runs (/proc): msgpack {measured[MSGPACK]:.1f}, kafka "
        f"{measured[KAFKA]:.1f} us/record.",
        "",
        *broker_profile.summarize(MSGPACK, profiles[MSGPACK], KAFKA, profiles[KAFKA]),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000, help="records per case")
    parser.add_argument("--repeat", type=int, default=2, help="rounds of every case")
    parser.add_argument("--parallel", default="2,4", help="producer processes of the ceiling cases")
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    parser.add_argument("--profile", type=Path, help="then profile the brokers (py-spy), files in this dir")
    args = parser.parse_args()
    all_cases = cases([int(n) for n in args.parallel.split(",") if n.strip()])
    by_key = {c.key: c for c in all_cases}
    rf3, consume = by_key["rf3-acks-all"], by_key["consume"]
    run: dict = {"load_before": load_average(), "consume_records": args.records * CONSUME_FACTOR}
    started = time.monotonic()
    samples: list[Sample] = []
    with bench_cluster(prefix="floodmark-bench-kafka-clients-") as cluster:
        bench = Bench(cluster, args.records)
        run["idle_broker_cores"] = warm_up(bench, rf3, consume)
        for round_ in range(1, args.repeat + 1):
            samples += run_round(bench, all_cases, round_)
        run["profile"] = profile(bench, rf3, args.profile) if args.profile else []
        run["commands"] = bench.commands
    run["load_after"] = load_average()
    kafka_rpr = medians(samples, rf3, KAFKA)["records_per_produce_request"] or 147.0
    msgpack_rpr = medians(samples, rf3, MSGPACK)["records_per_produce_request"] or 2 * kafka_rpr
    say("timing the two codecs in this process")
    run["codec_us_per_request"] = broker_profile.codec_costs(round(kafka_rpr), 2)
    run["codec"] = broker_profile.codec_lines(run["codec_us_per_request"], kafka_rpr, msgpack_rpr)
    run["elapsed_s"] = time.monotonic() - started
    print(report(args, run, samples, all_cases))
    if args.json:
        write_json(args.json, args, run, samples, all_cases)


if __name__ == "__main__":
    main()
