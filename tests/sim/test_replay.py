"""Every seed replays (issue 35 item 1; docs/design.md "Simulation"): a simulated run depends on
its seed only, never on the interpreter's string hash seed, on object addresses, on threads or
on the host (its free disk space, its open-file limit, its random numbers).

The guard of `make test`: a full-length slice of the bounded sweep (64 seeds at the default steps,
the workload's operations on and a consumer group) runs in two fresh interpreters at once, under
``PYTHONHASHSEED`` 0 and 1, the second with its heap shifted (sim/trace_hashes.py) so that an
order taken from ``id()`` differs too, and every seed must give the same trace hash in both. A
failure names the seeds and prints where the first one's two runs part (sim/trace_diff.py).

Then one test per leak found, each forcing what the leak depended on: the order in which a fetch
session's partitions became dirty against the order of their hashes; a thread started by the
code under test; the host's ``statvfs`` and ``ulimit -n``; the uuid of a deleted log's directory.
"""

from __future__ import annotations

import asyncio
import os
import random
import resource
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from broker.log import LogConfig
from broker.log.log_manager import LogManager
from broker.replica.fetch_session import FetchSessionCache
from client.types import TopicPartition
from sim.errors import RealWorldRefused
from sim.runner import run_simulation
from sim.trace_diff import first_divergence, replay_check
from sim.world import World, WorldConfig
from tests.sim.test_invariants import CONFIG

#: The slice: the bounded sweep's schedule (default steps, operations on), with a consumer group.
REPLAY_SEEDS = range(0, 64)
REPLAY_CONFIG = replace(CONFIG, group=replace(CONFIG.group, members=max(CONFIG.group.members, 3)))


@pytest.mark.timeout(1200)
def test_every_seed_of_a_sweep_slice_replays_under_two_hash_seeds(capsys: pytest.CaptureFixture[str]) -> None:
    assert REPLAY_CONFIG.steps == 60 and REPLAY_CONFIG.group.members >= 1
    assert REPLAY_CONFIG.workload.reassign_rate > 0 and REPLAY_CONFIG.workload.preferred_election_rate > 0
    wall = time.perf_counter()
    check = replay_check(REPLAY_SEEDS, REPLAY_CONFIG, timeout_s=1800)
    assert sorted(check.first) == sorted(check.second) == list(REPLAY_SEEDS)
    assert not check.differing, check.report()
    with capsys.disabled():
        print(
            f"\nsim replay check: {len(REPLAY_SEEDS)} seeds x 2 processes in {time.perf_counter() - wall:.1f} wall s"
        )


def test_the_trace_diff_names_the_first_entry_where_two_dumps_part() -> None:
    same = ["1 10 a | x\n", "2 10 b | y\n", "3 20 c | z\n"]
    assert first_divergence(same, list(same)) is None
    found = first_divergence(same, ["1 10 a | x\n", "2 10 c | z\n"])
    assert found is not None and found.line == 2
    assert (
        found.before == ("1 10 a | x",) and found.first[0] == "2 10 b | y" and found.second[0] == "2 10 c | z"
    )
    shorter = first_divergence(same, same[:2])
    assert shorter is not None and shorter.line == 3 and shorter.second == ()


def test_a_fetch_session_reads_its_partitions_in_the_order_they_became_dirty() -> None:
    """The interleaving: partitions made dirty in the reverse of the order a set of them iterates
    in (str hashing, so PYTHONHASHSEED, decides that order). The session's next fetch reads them,
    and the leader appends and starts ISR expands, in the order they became dirty: once it was
    the set's order, and the same seed started its ISR writes in another order under another
    hash seed (seed 7's first divergence)."""
    tps = [TopicPartition(f"topic-{i}", i % 3) for i in range(12)]
    hashed = list(set(tps))
    cache = FetchSessionCache()
    session = cache.create(replica_id=2, now_ms=0)
    assert session is not None
    cache.update(session, {tp: {"fetch_offset": 0} for tp in reversed(hashed)}, ())
    assert list(session.to_read()) == list(reversed(hashed))


def test_a_thread_started_under_the_simulation_is_refused() -> None:
    """Whatever the code under test starts a thread for (a ThreadPoolExecutor's first submit
    among them) would run beside the loop in an order real timing picks."""
    ran: list[str] = []

    async def main() -> None:
        thread = threading.Thread(target=lambda: ran.append("thread"), name="leaky")
        thread.start()

    with pytest.raises(RealWorldRefused, match="starting thread 'leaky'"):
        run_simulation(main, 1, time_limit_s=10)
    assert ran == []
    done = threading.Thread(target=lambda: ran.append("after"))  # outside a run: threads as usual
    done.start()
    done.join()
    assert ran == ["after"]


def _world_run(main: Any, seed: int = 1, **config: Any) -> Any:
    async def run() -> Any:
        async with World(WorldConfig(**config)) as world:
            await world.start()
            return await main(world)

    result = run_simulation(run, seed, time_limit_s=3600)
    assert result.completed, result.recent
    return result


def test_the_brokers_log_pools_run_inline_under_the_simulation() -> None:
    """A topic of more partitions than one LeaderAndIsr creates one by one (EPOCH_WRITE_WINDOW:
    the log-create pool of 16 threads and the leader-epoch writers) and a broker restarted on
    its logs (the log-recovery pool) run every job on the loop's thread: no thread is started
    (the simulation refuses one), and the restarted broker has every log back."""

    async def main(world: World) -> int:
        admin = await world.admin()
        await admin.create_topic("wide", 70, 3)
        await world.wait_for(
            lambda: all(
                world.replica_log(b, "wide", p) is not None for b in world.brokers for p in range(70)
            ),
            "every replica of the wide topic has a log",
        )
        world.crash(2)
        await world.restart(2)
        return sum(world.replica_log(2, "wide", p) is not None for p in range(70))

    result = _world_run(main)
    assert result.result == 70
    assert not result.unhandled, result.unhandled


def test_a_simulated_brokers_free_space_is_its_modelled_disks_never_the_hosts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The host's ``statvfs`` (of /dev/shm, shared with every other process of the machine) is
    never asked; what the modelled disk reports usable is what the broker's free-space floor
    measures."""
    asked: list[str] = []
    real = os.statvfs

    def host_statvfs(path: Any) -> os.statvfs_result:
        asked.append(str(path))
        return real(path)

    monkeypatch.setattr(os, "statvfs", host_statvfs)

    async def main(world: World) -> tuple[int, bool]:
        await asyncio.sleep(3)  # the periodic job measures every log dir
        monitor = world.brokers[1].server.replica_manager.disk_space  # type: ignore[union-attr]
        disk = world.brokers[1].disk
        assert disk is not None
        disk.usable_bytes = 0
        log_dir = world.brokers[1].log_dirs[0]
        await world.wait_for(lambda: monitor.below_floor(log_dir), "broker 1's dir below its floor")
        return monitor.snapshot()[0].usable_bytes, monitor.below_floor(log_dir)

    result = _world_run(main)
    assert asked == []
    assert result.result == (0, True)


def test_a_simulated_brokers_file_budget_is_the_same_whatever_the_hosts_ulimit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    limits: list[int] = []

    async def main(world: World) -> None:
        limits.extend(b.server.file_budget.open_files_limit for b in world.brokers.values())  # type: ignore[union-attr]

    monkeypatch.setattr(resource, "getrlimit", lambda _which: (300, 300))
    _world_run(main, brokers=1)
    assert limits == [4096]


def test_a_deleted_logs_directory_is_named_from_the_brokers_random_source(tmp_path: Path) -> None:
    """Its uuid came from ``uuid.uuid4`` (the host's randomness): two replays deleting one log
    left two different directories."""
    names = []
    for run in range(2):
        manager = LogManager([tmp_path / str(run)], LogConfig(), lambda: 0, rng=random.Random(7))
        manager.get_or_create_log("t", 0)
        manager.delete_log("t", 0)
        names.append([p.name for p in (tmp_path / str(run)).iterdir() if p.name.endswith("-delete")])
        manager.shutdown()
    assert names[0] == names[1] and len(names[0]) == 1
