"""``chaos run --client kafka``: Kafka's own clients (confluent-kafka, librdkafka) under chaos on a
real cluster lose, duplicate and diverge nothing, and their group misses nothing
(docs/operations.md "Chaos runs and verification"; docs/guarantees.md "The proof").

35 s of writes by two librdkafka idempotent acks=all producers over the brokers' KAFKA listener
to a 6-partition, RF 3, min.insync.replicas 2 topic, while the seeded schedule SIGKILLs two
partition leaders and SIGKILLs one of the two librdkafka consumer processes of the group; then
the heal, the group's drain, and the same Spark verification as for floodmark's own clients,
from the same ledgers.
"""

from __future__ import annotations

import json

import pytest

from chaos.run import ChaosSettings
from cli.chaos import run_chaos
from ledger.format import read_ledger
from tests.chaos.test_chaos_run import CONSUMER_CHECKS, assert_verified_clean

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

SEED = 23  # with 35 s: a leader kill at t+4, a consumer crash at t+15.5, a leader kill at t+25.5
KINDS = ("kill", "consumer")


async def test_librdkafka_producers_and_consumers_under_kills_lose_duplicate_diverge_and_miss_nothing(
    tmp_path, spark
):
    settings = ChaosSettings(
        data_dir=tmp_path / "cluster",
        report_dir=tmp_path / "report",
        duration_s=35,
        seed=SEED,
        faults=KINDS,
        stop_cluster=True,
        records_per_second=300,
        consumers=2,
        client="kafka",
    )
    result = await run_chaos(settings, print, spark=spark)

    events = [json.loads(line) for line in (settings.report_dir / "events.jsonl").read_text().splitlines()]
    injected = [e["detail"]["kind"] for e in events if e["type"] == "fault"]
    assert injected.count("kill") == 2 and injected.count("consumer") == 1, injected
    replaced = [e["detail"] for e in events if e["type"] == "heal" and e["detail"].get("replacement")]
    assert replaced, "the crashed consumer was replaced by a fresh member"

    assert_verified_clean(settings.report_dir, result, min_acknowledged=5_000)
    acks = [e for e in read_ledger(settings.report_dir) if hasattr(e, "offset")]
    assert {(a.producer_id, a.sequence) for a in acks} == {(-1, -1)}, "librdkafka's reports, not ours"
    assert json.loads((settings.report_dir / "run.json").read_text())["settings"]["client"] == "kafka"

    report = json.loads((settings.report_dir / "verification.json").read_text())
    counts = report["counts"]
    assert {name: counts[name] for name in CONSUMER_CHECKS} == dict.fromkeys(CONSUMER_CHECKS, 0), {
        name: report["violations"][name] for name in CONSUMER_CHECKS
    }
    assert counts["consumed_offsets"] == counts["committed"] and counts["consumed"] >= counts["committed"]
    group = result.consumers
    assert group["drained"] is True and group["crashes"] == group["restarts"] == 1, group
    # Commits need an assignment: when a killed leader is also the group's coordinator (the
    # offsets partition's leader, placed by the group id's hash, so about one run in three), the
    # group spends most of the 35 s finding the new coordinator and waiting out the old members'
    # sessions, and commits little before the drain. So: at least the drain's commit of each
    # of the two members still alive, and a second generation after the crash.
    assert group["commits"] >= 2 and group["highest_generation"] >= 2 and not group["outside_assignment"], (
        group
    )
    logs = sorted(p.name for p in (settings.report_dir / "kafka-consumers").iterdir())
    assert len(logs) == 3, logs  # two members and the crashed one's replacement
