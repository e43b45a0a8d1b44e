"""Issue 25: a chaos run whose schedule lowers a leader's open-file limit (``fd-pressure``,
chaos/fd_pressure.py) twice, around a leader SIGKILL, ends clean in the Spark verification, and
no broker halts under the pressure (docs/operations.md "Chaos runs and verification").

35 s of idempotent acks=all writes to a 6-partition, RF 3, min.insync.replicas 2 topic. Each
fd-pressure fault sets the leader's soft RLIMIT_NOFILE just above the descriptors it holds (no
number free below it) for its length (prlimit(2) on the broker process: the same user as the
runner, or root), then restores it; high-watermark checkpoints every second make sure the broker
needs a new descriptor during each fault. The test asks that:

- both faults were injected, each with the held count and the limits on the timeline, and each
  healed on the very process it lowered (the same pid, never ``"exited"``);
- the brokers met the limit (a broker's log says "Too many open files"): a fault that never bit
  proves nothing;
- no broker halted or was started more often than the kill restarted it (each launch writes a
  banner line to the broker's broker.out);
- the verification found nothing lost, duplicated or divergent.
"""

from __future__ import annotations

import collections
import json

import pytest

from chaos.run import ChaosSettings
from cli.chaos import run_chaos
from tests.chaos.test_chaos_run import assert_verified_clean

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

#: With 35 s: fd-pressure on the leader of partition 5 at t+4 for 4.5 s, a leader kill at
#: t+14.1, fd-pressure on the leader of partition 0 at t+22 for 7 s
#: (tests/unit/test_chaos_fd_pressure.py holds the seed to it).
SEED = 4
DURATION_S = 35
KINDS = ("kill", "fd-pressure")
BROKERS = (1, 2, 3)


async def test_chaos_with_fd_pressure_loses_duplicates_and_diverges_nothing_and_no_broker_halts(tmp_path):
    settings = ChaosSettings(
        data_dir=tmp_path / "cluster",
        report_dir=tmp_path / "report",
        duration_s=DURATION_S,
        seed=SEED,
        faults=KINDS,
        stop_cluster=True,
        records_per_second=300,
        overrides={"replica.high.watermark.checkpoint.interval.ms": "1000"},
    )
    result = await run_chaos(settings, print)

    events = [json.loads(line) for line in (settings.report_dir / "events.jsonl").read_text().splitlines()]
    faults = [e["detail"] for e in events if e["type"] == "fault"]
    heals = [e["detail"] for e in events if e["type"] == "heal"]
    pressured = [f for f in faults if f["kind"] == "fd-pressure"]
    assert len(pressured) >= 2 and any(f["kind"] == "kill" for f in faults), faults
    for fault in pressured:
        assert fault["room"] == 0 and fault["nofile_limit"] <= fault["fds_held"] < fault["nofile_soft"], fault
        assert fault["nofile_hard"] >= fault["nofile_soft"], fault
    fd_heals = [h for h in heals if h["kind"] == "fd-pressure"]
    assert [(h["broker"], h.get("pid")) for h in fd_heals] == [(f["broker"], f["pid"]) for f in pressured]
    assert not any(h.get("exited") for h in heals), heals
    assert not result.heal_failures and not result.unhealed, (result.heal_failures, result.unhealed)

    outs = {b: (tmp_path / "cluster" / f"broker-{b}" / "broker.out").read_text() for b in BROKERS}
    assert any("Too many open files" in out for out in outs.values()), "no broker met the lowered limit"
    kills = collections.Counter(f["broker"] for f in faults if f["kind"] == "kill")
    for broker_id, out in outs.items():
        assert "Shutdown broker because" not in out, f"broker {broker_id} halted"
        starts = sum(1 for line in out.splitlines() if line.startswith("--- "))
        assert starts == 1 + kills[broker_id], (broker_id, starts, dict(kills))

    assert_verified_clean(settings.report_dir, result, min_acknowledged=4_000)
