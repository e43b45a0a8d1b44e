"""The simulation's virtual-time event loop and seeded scheduler (sim/loop.py, sim/runner.py;
docs/design.md "Simulation"): virtual time, the seeded order of ready callbacks, the trace hash,
asyncio's primitives unchanged, the inline executor, the refusals, and the progress checks (spin,
livelock, deadlock). Every test drives the loop itself: no real sleeping, no timed assertion but
the one that shows 60 virtual seconds are not 60 wall seconds.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from sim.clock import DEFAULT_EPOCH_MS, SimClock
from sim.errors import Deadlock, Livelock, RealWorldRefused, TaskSpinning
from sim.loop import Ordering, SimEventLoop
from sim.progress import Limits
from sim.runner import run_simulation

SEEDS = range(20)


def sim_loop() -> SimEventLoop:
    loop = asyncio.get_running_loop()
    assert isinstance(loop, SimEventLoop)
    return loop


# -- virtual time --


def test_sixty_seconds_of_sleeps_take_no_wall_time() -> None:
    async def main() -> float:
        loop = asyncio.get_running_loop()
        start = loop.time()
        for _ in range(6):
            await asyncio.sleep(10)
        return loop.time() - start

    result = run_simulation(main, seed=1)
    assert result.completed and result.result == 60.0
    assert result.virtual_seconds == 60.0
    assert result.wall_seconds < 1.0, f"60 virtual seconds took {result.wall_seconds:.3f} s of wall time"


def test_the_clock_jumps_to_the_earliest_timer_and_fires_timers_in_time_order() -> None:
    async def main() -> list[tuple[str, float]]:
        loop = asyncio.get_running_loop()
        start, fired = loop.time(), []
        for name, delay in (("c", 3.0), ("a", 0.25), ("b", 1.5)):
            loop.call_later(delay, lambda n=name: fired.append((n, loop.time() - start)))
        await asyncio.sleep(5)
        return fired

    assert run_simulation(main, seed=2).result == [("a", 0.25), ("b", 1.5), ("c", 3.0)]


def test_sim_clock_is_the_virtual_clock_in_wall_clock_milliseconds() -> None:
    async def main() -> list[int]:
        clock = SimClock(sim_loop())
        seen = [clock(), clock.time_ms()]
        await asyncio.sleep(1.5)
        seen.append(clock())
        await asyncio.sleep(0.0004)  # below a millisecond: truncated, as int(time.time() * 1000) is
        seen.append(clock())
        assert clock.monotonic() == asyncio.get_running_loop().time()
        assert clock.time() == pytest.approx((DEFAULT_EPOCH_MS + 1500.4) / 1000)
        return seen

    epoch = DEFAULT_EPOCH_MS
    assert run_simulation(main, seed=3).result == [epoch, epoch, epoch + 1500, epoch + 1500]


# -- the seeded order --


async def two_tasks_ready_together() -> list[str]:
    """A and B become ready at the same instant and take three steps each."""
    order: list[str] = []

    async def worker(name: str) -> None:
        for step in range(3):
            order.append(f"{name}{step}")
            await asyncio.sleep(0)

    await asyncio.gather(worker("A"), worker("B"))
    return order


def test_tasks_ready_together_run_in_an_order_drawn_from_the_seed() -> None:
    orders, hashes = {}, {}
    for seed in SEEDS:
        first = run_simulation(two_tasks_ready_together, seed)
        again = run_simulation(two_tasks_ready_together, seed)
        assert (again.result, again.trace_hash) == (first.result, first.trace_hash), f"seed {seed} replayed"
        orders[seed], hashes[seed] = tuple(first.result), first.trace_hash
    assert len(set(orders.values())) > 2, f"only the orders {set(orders.values())}"
    assert len(set(hashes.values())) >= len(set(orders.values()))
    for a in SEEDS:  # a different interleaving is a different trace
        for b in SEEDS:
            assert orders[a] == orders[b] or hashes[a] != hashes[b]


def test_fifo_ordering_is_asyncios_own_order() -> None:
    real = asyncio.new_event_loop()
    try:
        expected = real.run_until_complete(two_tasks_ready_together())
    finally:
        real.close()
    for seed in range(5):
        assert run_simulation(two_tasks_ready_together, seed, ordering=Ordering.FIFO).result == expected


def test_callbacks_one_callback_schedules_keep_their_order() -> None:
    """asyncio's promise (call_soon and done callbacks run in registration order) holds under
    every seed; only callbacks from different sources are interleaved."""

    async def main() -> tuple[list[str], list[str]]:
        loop = asyncio.get_running_loop()
        ours: list[str] = []
        for name in "abcde":
            loop.call_soon(ours.append, name)
        future = loop.create_future()
        for name in "vwxyz":
            future.add_done_callback(lambda _, n=name: ours.append(n))
        event, woken = asyncio.Event(), []

        async def waiter(name: str) -> None:
            await event.wait()
            woken.append(name)

        waiters = [asyncio.create_task(waiter(str(i))) for i in range(5)]
        await asyncio.sleep(0.1)
        future.set_result(None)
        event.set()
        await asyncio.gather(*waiters)
        return ours, woken

    interleavings = set()
    for seed in SEEDS:
        ours, woken = run_simulation(main, seed).result
        assert [c for c in ours if c in "abcde"] == list("abcde")
        assert [c for c in ours if c in "vwxyz"] == list("vwxyz")
        assert woken == list("01234")  # Event.set wakes its waiters in the order they waited
        interleavings.add(tuple(ours))
    assert len(interleavings) == 1  # each list is filled by one chain, in the order it was registered


# -- asyncio's primitives, unchanged --


async def primitives() -> dict[str, object]:
    loop = asyncio.get_running_loop()
    out: dict[str, object] = {}

    lock, inside, most = asyncio.Lock(), [0], [0]

    async def critical() -> None:
        async with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
            await asyncio.sleep(0.01)
            inside[0] -= 1

    await asyncio.gather(*(critical() for _ in range(5)))
    out["lock"] = most[0]

    queue: asyncio.Queue[int] = asyncio.Queue(maxsize=2)

    async def produce() -> None:
        for i in range(10):
            await queue.put(i)

    async def consume() -> list[int]:
        return [await queue.get() for _ in range(10)]

    _, got = await asyncio.gather(produce(), consume())
    out["queue"] = got

    semaphore, active, peak = asyncio.Semaphore(2), [0], [0]

    async def limited() -> None:
        async with semaphore:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
            await asyncio.sleep(0.01)
            active[0] -= 1

    await asyncio.gather(*(limited() for _ in range(6)))
    out["semaphore"] = peak[0]

    start = loop.time()
    try:
        async with asyncio.timeout(2.5):
            await asyncio.Event().wait()
    except TimeoutError:
        out["timeout"] = loop.time() - start
    try:
        await asyncio.wait_for(asyncio.sleep(10), 1.0)
    except TimeoutError:
        out["wait_for timeout"] = loop.time() - start
    out["wait_for"] = await asyncio.wait_for(asyncio.sleep(0.5, result="done"), 1.0)
    out["gather"] = await asyncio.gather(*(asyncio.sleep(d, result=d) for d in (0.3, 0.1, 0.2)))

    cleaned = []

    async def sleeper() -> None:
        try:
            await asyncio.sleep(100)
        finally:
            cleaned.append(loop.time() - start)

    task = asyncio.create_task(sleeper())
    await asyncio.sleep(1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    out["cancelled"] = (task.cancelled(), cleaned)
    return out


def test_asyncio_primitives_behave_under_every_seed() -> None:
    for seed in range(5):
        out = run_simulation(primitives, seed).result
        assert out == {
            "lock": 1,
            "queue": list(range(10)),
            "semaphore": 2,
            "timeout": 2.5,
            "wait_for timeout": 3.5,
            "wait_for": "done",
            "gather": [0.3, 0.1, 0.2],
            "cancelled": (True, [pytest.approx(5.3)]),
        }, f"seed {seed}"


# -- what leaves the thread or real time --


def test_run_in_executor_runs_inline_on_the_loop_thread() -> None:
    loop_thread: list[int] = []

    def blocking_disk_work(x: int) -> int:
        loop_thread.append(threading.get_ident())
        order.append("work")
        return x * 2

    def failing() -> None:
        raise OSError(5, "EIO")

    order: list[str] = []

    async def main() -> tuple[int, int, float]:
        loop = asyncio.get_running_loop()
        start = loop.time()

        async def other() -> None:
            await asyncio.sleep(1)
            await asyncio.sleep(0)  # ready again in the same batch as the work below
            order.append("other")

        other_task = asyncio.create_task(other())
        await asyncio.sleep(1)
        doubled = await loop.run_in_executor(None, blocking_disk_work, 21)
        tripled = await asyncio.to_thread(lambda: 3 * 7)
        with pytest.raises(OSError, match="EIO"):
            await loop.run_in_executor(None, failing)
        await other_task
        return doubled, tripled, loop.time() - start

    orders = set()
    for seed in SEEDS:
        order.clear()
        assert run_simulation(main, seed).result == (42, 21, 1.0)  # the work takes no virtual time
        orders.add(tuple(order))
    assert set(loop_thread) == {threading.get_ident()}
    # The caller is suspended at its await, as with a real executor: the other ready task may run
    # before the work or after it, as the seed decides.
    assert orders == {("work", "other"), ("other", "work")}


@pytest.mark.parametrize(
    "reach_out",
    [
        pytest.param(lambda: asyncio.open_connection("127.0.0.1", 9), id="open_connection"),
        pytest.param(lambda: asyncio.start_server(lambda r, w: None, "127.0.0.1", 0), id="start_server"),
        pytest.param(lambda: asyncio.get_running_loop().getaddrinfo("localhost", 80), id="getaddrinfo"),
        pytest.param(lambda: asyncio.create_subprocess_exec("true"), id="subprocess"),
    ],
)
def test_real_sockets_and_processes_are_refused(reach_out) -> None:
    async def main() -> None:
        await reach_out()

    with pytest.raises(RealWorldRefused, match="not available under the simulation loop"):
        run_simulation(main, seed=4)


def test_a_refusal_stops_the_run_even_when_the_code_swallows_it() -> None:
    attempts = []

    async def main() -> None:
        while True:  # a reconnect loop that catches everything
            attempts.append(asyncio.get_running_loop().time())
            try:
                await asyncio.open_connection("127.0.0.1", 9)
            except Exception:
                await asyncio.sleep(1)

    with pytest.raises(RealWorldRefused, match="create_connection"):
        run_simulation(main, seed=5)
    assert len(attempts) == 1


def test_signal_handlers_and_other_threads_are_refused() -> None:
    async def signal_handler() -> None:
        asyncio.get_running_loop().add_signal_handler(15, lambda: None)

    with pytest.raises(RealWorldRefused, match="add_signal_handler"):
        run_simulation(signal_handler, seed=6)

    # a thread started before the run (starting one under it is refused: test_replay.py) calls in
    loops: list[asyncio.AbstractEventLoop] = []
    errors: list[BaseException] = []
    ready = threading.Event()

    def other_thread() -> None:
        ready.wait(timeout=60)
        try:
            loops[0].call_soon_threadsafe(lambda: None)
        except RealWorldRefused as exc:
            errors.append(exc)

    thread = threading.Thread(target=other_thread)
    thread.start()

    async def from_a_thread() -> None:
        loops.append(asyncio.get_running_loop())
        ready.set()
        thread.join()
        assert errors

    with pytest.raises(RealWorldRefused, match="another thread"):
        run_simulation(from_a_thread, seed=6)


# -- progress: spins, livelocks, deadlocks --


def test_a_spinning_task_is_caught_and_named() -> None:
    async def main() -> None:
        async def spin() -> None:
            while True:
                await asyncio.sleep(0)

        spinner = asyncio.create_task(spin(), name="spinner")
        await spinner

    with pytest.raises(TaskSpinning, match=r"task spinner .*spin.* spins: 1001 steps") as caught:
        run_simulation(main, seed=7)
    assert "simulation seed 7" in "\n".join(caught.value.__notes__)


def test_a_livelock_of_two_tasks_is_caught() -> None:
    async def main() -> None:
        ping: asyncio.Queue[int] = asyncio.Queue()
        pong: asyncio.Queue[int] = asyncio.Queue()

        async def player(inbox: asyncio.Queue[int], outbox: asyncio.Queue[int]) -> None:
            while True:
                outbox.put_nowait(await inbox.get() + 1)

        ping.put_nowait(0)
        await asyncio.gather(player(ping, pong), player(pong, ping))

    with pytest.raises(Livelock, match="10001 callbacks at one virtual instant.*player"):
        run_simulation(main, seed=8, limits=Limits(spin_steps=100, callbacks_per_instant=10_000))


def test_long_runs_that_block_each_step_are_not_spins() -> None:
    """A task that awaits a timer each step, one that does blocking work through the executor
    each step, and two tasks that hand work to each other through a bounded queue, run far more
    than K steps without being flagged."""

    async def main() -> tuple[int, int]:
        ticks = 0
        for _ in range(5_000):
            await asyncio.sleep(0.001)
            ticks += 1
        for _ in range(1_000):
            ticks += await asyncio.to_thread(int, "0")
        queue: asyncio.Queue[int] = asyncio.Queue(maxsize=1)

        async def produce() -> None:
            for i in range(2_000):
                await queue.put(i)

        async def consume() -> int:
            return sum([await queue.get() for _ in range(2_000)])

        _, total = await asyncio.gather(produce(), consume())
        return ticks, total

    result = run_simulation(main, seed=9, limits=Limits(spin_steps=100, callbacks_per_instant=100_000))
    assert result.result == (5_000, sum(range(2_000)))


def test_a_run_where_nothing_can_happen_is_a_deadlock() -> None:
    async def main() -> None:
        async def stuck() -> None:
            await asyncio.Event().wait()

        await asyncio.create_task(stuck(), name="waiter")

    with pytest.raises(Deadlock, match=r"waiter .*stuck at .*Event.wait"):
        run_simulation(main, seed=10)


def test_a_time_limit_ends_an_endless_run_and_cancels_what_is_left() -> None:
    stopped = []

    async def main() -> None:
        try:
            while True:
                await asyncio.sleep(1)
        finally:
            stopped.append(asyncio.get_running_loop().time())

    result = run_simulation(main, seed=11, time_limit_s=30)
    assert (result.completed, result.result, result.virtual_seconds) == (False, None, 30.0)
    assert len(stopped) == 1  # main was cancelled and its finally ran


def test_a_failure_in_the_code_under_test_is_raised_with_its_seed() -> None:
    async def main() -> None:
        await asyncio.sleep(2)
        raise AssertionError("acknowledged offset 7 missing on the leader")

    with pytest.raises(AssertionError, match="offset 7") as caught:
        run_simulation(main, seed=12)
    (note,) = caught.value.__notes__
    assert "simulation seed 12 (shuffle): failed at virtual 2.000000 s" in note


# -- a real piece of the broker under the loop --


def fetcher_scenario(root: Path):
    """tests/scenarios/test_fetcher_races.py's stale OffsetsForLeaderEpoch answer: three real
    ReplicaManagers with logs on disk, their replica fetchers, and the scenario's fake network."""
    from tests.scenarios.fetcher_net import Net
    from tests.scenarios.test_fetcher_races import (
        test_epoch_answer_from_before_a_leadership_round_trip_is_ignored as scenario,
    )

    async def main() -> int:
        net = Net()
        try:
            await scenario(net, root)
        finally:
            for broker in net.brokers.values():
                await broker.shutdown()
        return len(net.sent)

    return main


def test_a_replica_fetcher_scenario_runs_deterministically_under_the_loop(tmp_path: Path) -> None:
    runs = [run_simulation(fetcher_scenario(tmp_path / f"run-{i}"), seed=3) for i in range(2)]
    assert all(run.completed and not run.unhandled for run in runs)
    assert runs[0].trace_hash == runs[1].trace_hash
    assert runs[0].callbacks == runs[1].callbacks and runs[0].result == runs[1].result
    others = {run_simulation(fetcher_scenario(tmp_path / f"seed-{s}"), seed=s).trace_hash for s in (4, 5, 6)}
    assert len(others | {runs[0].trace_hash}) > 1  # other seeds, other interleavings


REPLAY = """
import sys, tempfile
from pathlib import Path
from sim.runner import run_simulation
from tests.sim.test_loop import fetcher_scenario
with tempfile.TemporaryDirectory() as root:
    print(run_simulation(fetcher_scenario(Path(root)), seed=3).trace_hash)
"""


def test_a_replay_in_another_process_gives_the_same_trace_hash(tmp_path: Path) -> None:
    """What a failing seed's replay command relies on: nothing process-wide (asyncio's task-name
    counter, object addresses, string hashing) reaches the trace."""
    here = run_simulation(fetcher_scenario(tmp_path), seed=3).trace_hash
    root = Path(__file__).resolve().parents[2]
    for hash_seed in ("0", "1"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": str(root)}
        out = subprocess.run(
            [sys.executable, "-c", REPLAY], cwd=root, env=env, capture_output=True, text=True, check=True
        )
        assert out.stdout.strip() == here, out.stderr
