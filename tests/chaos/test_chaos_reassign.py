"""Issue 22: partitions reassigned under load (``reassign`` faults among leader kills) lose,
duplicate and diverge nothing, and the moves really happen.

A minute of idempotent acks=all writes to a 6-partition, RF 3, min.insync.replicas 2 topic on
four brokers, so every move puts a replica on a broker that had none and removes one (Kafka's
``kafka-reassign-partitions.sh`` during load: the new replica starts empty and fetches from the
leader, the leaving one is stopped and its directory renamed ``<topic>-<p>.<uuid>-delete``).
``log.segment.delete.delay.ms`` is ten minutes, so those renamed directories are still in the
log dirs when the Spark job reads them: the verification must skip them, and must accept the new
replicas once they caught up. The test then checks the moves on disk: after the last completed
move of each partition, every target broker holds ``chaos-<p>`` with data, and every broker it
left holds only the renamed directory.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from chaos.run import ChaosSettings
from cli.chaos import run_chaos
from tests.chaos.test_chaos_run import assert_verified_clean

pytestmark = pytest.mark.integration

SEED = 6  # with 60 s: kill, reassign p4, kill, reassign p3, reassign p4 (tests/chaos/test_reassign_fault.py)
TOPIC = "chaos"


def log_dir_of(log_dirs: list[str]) -> dict[int, Path]:
    """Broker id -> its log dir (one each: the runner's ``broker-<id>/...``)."""
    return {int(re.search(r"broker-(\d+)", d).group(1)): Path(d) for d in log_dirs}


async def test_partitions_moved_under_load_lose_duplicate_and_diverge_nothing(tmp_path, spark):
    settings = ChaosSettings(
        data_dir=tmp_path / "cluster",
        report_dir=tmp_path / "report",
        duration_s=60,
        seed=SEED,
        faults=("reassign", "kill"),
        topic=TOPIC,
        brokers=4,
        overrides={"log.segment.delete.delay.ms": "600000"},  # renamed dirs outlive the verification
        stop_cluster=True,
        records_per_second=300,
    )
    result = await run_chaos(settings, print, spark=spark)

    events = [json.loads(line) for line in (settings.report_dir / "events.jsonl").read_text().splitlines()]
    faults = [e["detail"] for e in events if e["type"] == "fault"]
    assert {f["kind"] for f in faults} == {"reassign", "kill"}, faults
    completed = [e["detail"] for e in events if e["type"] == "heal" and e["detail"].get("completed")]
    assert completed, f"no move completed: {faults}"
    assert result.moves["completed"] == len(completed) and result.moves["unfinished"] == 0
    assert result.heal_failures == [] and result.unhealed == []
    for move in completed:
        assert move["replicas"] == move["replicas_target"] != move["replicas_before"], move
        assert set(move["replicas_target"]) != set(move["replicas_before"]), move  # four brokers, RF 3

    assert_verified_clean(settings.report_dir, result, min_acknowledged=5_000)

    log_dirs = log_dir_of(json.loads((settings.report_dir / "run.json").read_text())["log_dirs"])
    on_disk = {broker: {p.name for p in d.iterdir() if p.is_dir()} for broker, d in log_dirs.items()}
    last = {m["partition"]: m for m in completed}  # in time order: the last move of each partition
    for partition, move in last.items():
        name = f"{TOPIC}-{partition}"
        for broker in move["replicas_target"]:
            assert name in on_disk[broker], (broker, move)
            segments = (log_dirs[broker] / name).glob("*.log")
            assert sum(s.stat().st_size for s in segments) > 0, f"broker {broker} holds no data of {name}"
        for broker in set(move["replicas_before"]) - set(move["replicas_target"]):
            assert name not in on_disk[broker], (broker, move)
            renamed = [d for d in on_disk[broker] if d.startswith(f"{name}.") and d.endswith("-delete")]
            assert renamed, f"broker {broker} left {name} without a renamed directory: {on_disk[broker]}"
