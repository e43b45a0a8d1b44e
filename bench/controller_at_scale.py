"""The controller alone at scale (issue 25; docs/benchmarks.md "Partitions at scale (issue 25)"):
a real KafkaController in this process against a real ZooKeeper, with no brokers (its requests
are counted, not sent), timing topic creation and controller failover with N partitions, this
tree against a baseline revision.

* **create**: brokers 1-3 registered, the controller (broker 2) elected and idle; then one topic
  of N partitions on [p%3+1, ...] (RF 3) appears in ZooKeeper, and the time runs until the
  controller has sent LeaderAndIsr and is idle again;
* **failover**: the topic's N state znodes exist (leader the first replica, full ISR), broker 1
  is not registered (dead), and broker 2 becomes controller: the time from its start-up until it
  is idle, having read every state, removed broker 1 from every ISR, elected leaders for the
  partitions broker 1 led and sent LeaderAndIsr and UpdateMetadata.

Each also reports the longest event-loop stall (a task sleeping 50 ms, how late it woke) and the
requests each broker would have been sent (how many, the largest in partitions). A round runs in
a subprocess whose ``sys.path`` starts with the tree measured (the baseline is a ``git worktree``
of ``--base``). Every wait is bounded::

    .venv/bin/python bench/controller_at_scale.py [--sizes 4000,10000] [--base HEAD]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import baseline_worktree  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
ROUND_TIMEOUT_S = 600

#: One round, run as ``python -c ROUND TREE N MODE`` with TREE first on sys.path.
ROUND = r"""
import asyncio, json, random, sys, tempfile, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import uvloop
from controller.controller import ControllerConfig, KafkaController
from devcluster.ports import free_port
from devcluster.zookeeper import ZooKeeperProcess
from zk.bridge import ZkBridge
from zk.client import create_persistent_paths, register_broker
from zk.data import EndPoint, LeaderAndIsr, LeaderIsrAndControllerEpoch
from zk.data import encode_partition_state, encode_topic_assignment
from zk.paths import partition_state_path, topic_path

N, MODE, BOUND = int(sys.argv[2]), sys.argv[3], 300.0

async def until(check, what):
    deadline = time.monotonic() + BOUND
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        await asyncio.sleep(0.01)

async def main(connect):
    zk = ZkBridge(connect, session_timeout_ms=6000)
    await zk.start()
    await create_persistent_paths(zk)
    for b in (2, 3) if MODE == "failover" else (1, 2, 3):
        await register_broker(zk, b, [EndPoint("PLAINTEXT", "127.0.0.1", 9000 + b)], 0)
    assignment = {p: [(p + i) % 3 + 1 for i in range(3)] for p in range(N)}
    if MODE == "failover":
        await zk.create(topic_path("t"), encode_topic_assignment(assignment))
        for start in range(0, N, 500):
            await asyncio.gather(*(
                zk.create(partition_state_path("t", p), encode_partition_state(
                    LeaderIsrAndControllerEpoch(LeaderAndIsr(assignment[p][0], 0, tuple(assignment[p])), 1)),
                    makepath=True)
                for p in range(start, min(N, start + 500))))
    sent = []
    c = KafkaController(2, zk, ControllerConfig(auto_leader_rebalance_enable=False), lambda: 0,
                        random.Random(0), lambda r: None)
    c.batch._send = lambda b, k, body, cb: sent.append((b, k.name, len(body.get("partition_states", []))))
    idle = lambda: c.events.queue_size == 0 and c.events.current is None
    stall = [0.0]
    async def monitor():
        loop = asyncio.get_running_loop()
        while True:
            t = loop.time()
            await asyncio.sleep(0.05)
            stall[0] = max(stall[0], loop.time() - t - 0.05)
    task = asyncio.get_running_loop().create_task(monitor())
    if MODE == "create":
        await c.startup()
        await until(idle, "idle after start-up")
        sent.clear()
        stall[0] = 0.0
    start = time.perf_counter()
    if MODE == "create":
        await zk.create(topic_path("t"), encode_topic_assignment(assignment))
        await until(lambda: any(k == "LEADER_AND_ISR" for _, k, _ in sent), "LeaderAndIsr")
    else:
        await c.startup()
    await until(idle, "idle")
    seconds = time.perf_counter() - start
    task.cancel()
    requests = {}
    for b, k, n in sent:
        count, largest = requests.get(f"{k} to {b}", (0, 0))
        requests[f"{k} to {b}"] = (count + 1, max(largest, n))
    print(json.dumps({"seconds": seconds, "stall": stall[0], "requests": requests}))
    await c.shutdown()
    await zk.close()

server = ZooKeeperProcess(free_port(), Path(tempfile.mkdtemp())).start()
try:
    uvloop.run(main(server.connect_string))
finally:
    server.stop()
"""


def one_round(tree: Path, size: int, mode: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", ROUND, str(tree), str(size), mode],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=ROUND_TIMEOUT_S,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{mode} {size} in {tree} failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def requests_text(requests: dict) -> str:
    kinds = sorted({key.split(" to ")[0] for key in requests})
    parts = []
    for kind in kinds:
        mine = [v for k, v in requests.items() if k.startswith(kind) and v[1] > 0]
        if mine:
            parts.append(f"{kind} {mine[0][0]} x <= {max(n for _, n in mine):,}")
    return ", ".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="4000,10000")
    parser.add_argument("--base", default="HEAD")
    args = parser.parse_args()
    revision = subprocess.run(
        ["git", "rev-parse", "--short", args.base], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    print("| partitions | step | tree | time (s) | longest loop stall (s) | requests per broker |")
    print("|---:|---|---|---:|---:|---|")
    with baseline_worktree(revision) as base:
        for size in [int(s) for s in args.sizes.split(",")]:
            for mode in ("create", "failover"):
                for label, tree in ((f"base {revision}", base), ("this tree", ROOT)):
                    r = one_round(tree, size, mode)
                    print(
                        f"| {size:,} | {mode} | {label} | {r['seconds']:.2f} | {r['stall']:.2f} "
                        f"| {requests_text(r['requests'])} |",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
