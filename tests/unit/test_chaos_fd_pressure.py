"""The ``fd-pressure`` chaos fault (chaos/fd_pressure.py, issue 25): asked for by name without
changing any older seed's schedule, the limit set to what the process holds plus the margin and
restored on the same process, on a fake ``/proc`` and on a real child process, the injector's
events and heal, and the docker backend's way to the container's broker."""

from __future__ import annotations

import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chaos.faults import DockerBackend, FaultUnsupported
from chaos.fd_pressure import (
    FD_MARGIN,
    FdPressure,
    ProcessGone,
    limit_leaving,
    lower_open_files,
    restore_open_files,
)
from chaos.injector import FaultInjector
from chaos.schedule import (
    ALL_FAULT_KINDS,
    FAULT_KINDS,
    FAULT_VOCABULARY,
    Fault,
    make_schedule,
    parse_fault_kinds,
)

# -- the schedule ---------------------------------------------------------------------------------

#: Seed 8 with 60 s over FAULT_KINDS (tests/chaos/test_chaos_run.py's), as it was before
#: fd-pressure existed: the kind is asked for by name, so this schedule must never change.
SEED_8_BEFORE_FD_PRESSURE = [
    (4.0, "term", 0, 3.966),
    (12.306, "kill", 4, 4.237),
    (21.381, "partition", 5, 9.0),
    (34.502, "pause", 3, 9.0),
    (49.315, "controller", 1, 5.475),
]


def test_fd_pressure_is_asked_for_by_name_and_older_seeds_keep_their_schedules():
    assert parse_fault_kinds("kill,fd-pressure") == ("kill", "fd-pressure")
    assert "fd-pressure" in ALL_FAULT_KINDS and "fd-pressure" in FAULT_VOCABULARY
    assert "fd-pressure" not in FAULT_KINDS
    assert FAULT_KINDS == ("kill", "controller", "pause", "term", "partition")
    schedule = make_schedule(8, 60, FAULT_KINDS, 6, pause_s=9.0)
    assert [(f.at_s, f.kind, f.partition, f.duration_s) for f in schedule] == SEED_8_BEFORE_FD_PRESSURE


def test_fd_pressure_draws_like_a_kill_so_a_schedule_with_it_draws_nothing_more():
    # fd-pressure in place of term (both 3-8 s, a leader, no role or pick): the same times,
    # partitions and lengths for every seed, only the kind's name differs
    for seed in range(30):
        with_term = make_schedule(seed, 60, ("kill", "term"), 6, pause_s=9.0)
        with_fd = make_schedule(seed, 60, ("kill", "fd-pressure"), 6, pause_s=9.0)
        renamed = [f.kind.replace("term", "fd-pressure") for f in with_term]
        assert [f.kind for f in with_fd] == renamed
        assert [(f.at_s, f.partition, f.duration_s, f.role) for f in with_fd] == [
            (f.at_s, f.partition, f.duration_s, f.role) for f in with_term
        ]
        assert all("pick" not in f.as_dict() for f in with_fd)
    assert Fault(1, "fd-pressure", 2, 3).describe() == (
        "t+1.0s: lower the open-file limit of the leader of partition 2 for 3.0s"
    )


def test_the_chaos_tests_seed_fires_fd_pressure_between_kills():
    from tests.chaos.test_chaos_run import CONSUMER_KINDS, ZK_PAUSE_SEED

    kinds = [f.kind for f in make_schedule(ZK_PAUSE_SEED, 60, CONSUMER_KINDS, 6, pause_s=9.0)]
    assert "fd-pressure" in kinds and kinds.index("controller") < kinds.index("fd-pressure") < kinds.index(
        "kill"
    )


# -- the limit, on a fake /proc ---------------------------------------------------------------------


def fake_proc(root: Path, pid: int, fds: int, start: int = 4242, cmdline: str = "python -m broker") -> Path:
    process = root / str(pid)
    (process / "fd").mkdir(parents=True, exist_ok=True)
    for old in (process / "fd").iterdir():
        old.unlink()
    for fd in range(fds):
        (process / "fd" / str(fd)).touch()
    fields = ["S", "1"] + ["0"] * 17 + [str(start), "0"]
    (process / "stat").write_text(f"{pid} (python3 -m x) {' '.join(fields)}\n")
    (process / "cmdline").write_bytes(cmdline.replace(" ", "\0").encode() + b"\0")
    return root


class FakePrlimit:
    def __init__(self, soft: int, hard: int) -> None:
        self.limits = (soft, hard)
        self.calls: list[tuple[int, tuple[int, int] | None]] = []

    def __call__(self, pid: int, which: int, limits: tuple[int, int] | None = None) -> tuple[int, int]:
        assert which == resource.RLIMIT_NOFILE
        self.calls.append((pid, limits))
        before = self.limits
        if limits is not None:
            self.limits = limits
        return before


def test_the_limit_leaves_exactly_the_margin_free_holes_included():
    assert FD_MARGIN == 0  # just above what it holds (the module docstring says why)
    assert limit_leaving([0, 1, 2, 3], 0) == 4
    assert limit_leaving([0, 1, 2, 3, 10], 0) == 4  # 10 stays open above the limit
    assert limit_leaving([0, 1, 2, 3, 10], 2) == 6  # 4 and 5 free
    assert limit_leaving([0, 1, 3, 4], 0) == 2  # the hole at 2 would be room
    assert limit_leaving([0, 1, 3, 4], 1) == 5  # the hole is the room
    assert limit_leaving([], 3) == 3


def test_the_limit_is_set_just_above_what_the_process_holds_and_the_heal_restores_it(tmp_path):
    proc = fake_proc(tmp_path, 77, fds=40)
    prlimit = FakePrlimit(65536, 65536)
    fault = lower_open_files(77, prlimit=prlimit, proc=proc)
    assert (fault.held, fault.soft, fault.hard, fault.limit, fault.room) == (40, 65536, 65536, 40, 0)
    assert prlimit.limits == (40, 65536)
    assert fault.detail() == {
        "pid": 77,
        "fds_held": 40,
        "nofile_soft": 65536,
        "nofile_hard": 65536,
        "nofile_limit": 40,
        "room": 0,
    }
    fake_proc(tmp_path, 77, fds=38)  # two closed meanwhile
    assert restore_open_files(fault, prlimit, proc) == {"pid": 77, "fds_held": 38, "nofile_soft": 65536}
    assert prlimit.limits == (65536, 65536)
    assert lower_open_files(77, 16, prlimit, proc).limit == 38 + 16  # a margin when asked for


def test_the_limit_never_rises_above_a_lower_soft_limit(tmp_path):
    fault = lower_open_files(77, 16, FakePrlimit(30, 1024), fake_proc(tmp_path, 77, fds=20))
    assert fault.limit == 30


def test_the_heal_never_touches_another_process_that_took_the_pid(tmp_path):
    proc = fake_proc(tmp_path, 77, fds=10)
    prlimit = FakePrlimit(1024, 1024)
    pressure = FdPressure(lambda broker_id: 77, prlimit=prlimit, proc=proc)
    pressure.lower(2)
    fake_proc(tmp_path, 77, fds=3, start=9999)  # the broker died; its pid went to another process
    with pytest.raises(ProcessGone, match="pid now names another"):
        pressure.restore(2)
    assert prlimit.calls[-1] == (77, (10, 1024)) and not pressure.in_force  # forgotten, not retried
    assert pressure.restore(2) == {}


def test_a_fault_on_a_process_that_has_gone_says_so(tmp_path):
    with pytest.raises(ProcessGone):
        lower_open_files(12345, prlimit=FakePrlimit(1024, 1024), proc=tmp_path)


# -- the limit, on a real process ---------------------------------------------------------------------

CHILD = """
import os, sys
sys.stdin.readline()  # the test lowers the limit meanwhile
opened = []
try:
    while len(opened) < 1000:
        opened.append(os.open(os.devnull, os.O_RDONLY))
except OSError as exc:
    print(len(opened), exc.errno, flush=True)
else:
    print(len(opened), 0, flush=True)
sys.stdin.readline()  # restored: the room is back
more = [os.open(os.devnull, os.O_RDONLY) for _ in range(100)]
print(len(more), flush=True)
"""


def test_a_real_process_meets_emfile_after_the_margin_and_has_its_room_back_after_the_heal():
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdin is not None and child.stdout is not None
        time.sleep(0.2)  # let the interpreter settle its own descriptors
        before = resource.prlimit(child.pid, resource.RLIMIT_NOFILE)
        fault = lower_open_files(child.pid, margin=5)
        assert resource.prlimit(child.pid, resource.RLIMIT_NOFILE) == (fault.limit, before[1])
        child.stdin.write("go\n")
        child.stdin.flush()
        opened, code = map(int, child.stdout.readline().split())
        assert (opened, code) == (5, 24)  # exactly the room the margin leaves, then EMFILE
        restore_open_files(fault)
        assert resource.prlimit(child.pid, resource.RLIMIT_NOFILE) == before
        child.stdin.write("go\n")
        child.stdin.flush()
        assert int(child.stdout.readline()) == 100
    finally:
        child.kill()
        child.wait()


# -- the injector ------------------------------------------------------------------------------------


class LimitingBackend:
    name = "limiting"

    def __init__(self, gone: bool = False) -> None:
        self.calls: list[tuple[str, int]] = []
        self.gone = gone

    def limit_open_files(self, broker_id: int) -> dict:
        self.calls.append(("limit_open_files", broker_id))
        return {"pid": 100 + broker_id, "fds_held": 50, "nofile_limit": 66}

    def restore_open_files(self, broker_id: int) -> dict:
        self.calls.append(("restore_open_files", broker_id))
        if self.gone:
            raise ProcessGone(f"process {100 + broker_id} is not running")
        return {"pid": 100 + broker_id, "fds_held": 64}

    def restart(self, broker_id: int) -> None:
        self.calls.append(("restart", broker_id))


async def leader_of(partition: int) -> int:
    return 2


async def test_the_injector_records_the_limit_and_restores_it_on_the_same_broker():
    backend, events = LimitingBackend(), []
    injector = FaultInjector(backend, leader_of, None, lambda kind, detail: events.append((kind, detail)))
    await injector.run([Fault(0, "fd-pressure", 1, 0.01)], time.monotonic())
    assert backend.calls == [("limit_open_files", 2), ("restore_open_files", 2)]
    fault, heal = events
    assert fault == (
        "fault",
        {
            "kind": "fd-pressure",
            "broker": 2,
            "partition": 1,
            "planned_at_s": 0,
            "duration_s": 0.01,
            "pid": 102,
            "fds_held": 50,
            "nofile_limit": 66,
        },
    )
    assert heal == ("heal", {"kind": "fd-pressure", "broker": 2, "pid": 102, "fds_held": 64})
    assert not injector.faulted() and not injector.unhealed()


async def test_a_broker_that_died_under_the_limit_is_restarted_and_the_heal_says_it_exited():
    backend, events = LimitingBackend(gone=True), []
    injector = FaultInjector(backend, leader_of, None, lambda kind, detail: events.append((kind, detail)))
    await injector.run([Fault(0, "fd-pressure", 1, 0.01)], time.monotonic())
    assert backend.calls == [("limit_open_files", 2), ("restore_open_files", 2), ("restart", 2)]
    assert events[-1] == (
        "heal",
        {"kind": "fd-pressure", "broker": 2, "exited": True, "error": "process 102 is not running"},
    )


async def test_heal_all_restores_a_limit_an_interrupted_run_left():
    backend = LimitingBackend()
    injector = FaultInjector(backend, leader_of, None, lambda *_: None)
    injector.fd_limited = {3}
    assert injector.unhealed() == ["broker 3"]
    await injector.heal_all()
    assert backend.calls == [("restore_open_files", 3)] and not injector.unhealed()


# -- the docker backend --------------------------------------------------------------------------------


def test_the_docker_backend_finds_the_broker_under_docker_init(tmp_path):
    fake_proc(tmp_path, 500, fds=3, cmdline="/sbin/docker-init -- broker-entrypoint")
    fake_proc(
        tmp_path, 501, fds=30, cmdline="/usr/local/bin/python /usr/local/bin/floodmark-broker --config x"
    )
    (tmp_path / "500" / "task" / "500").mkdir(parents=True)
    (tmp_path / "500" / "task" / "500" / "children").write_text("501 ")
    reads = []

    def read(argv):
        reads.append(list(argv))
        return "500\n"

    prlimit = FakePrlimit(1048576, 1048576)
    backend = DockerBackend(read=read, proc=tmp_path)
    backend.fd_pressure.prlimit = prlimit
    assert backend.limit_open_files(2)["pid"] == 501
    assert reads == [["docker", "inspect", "--format", "{{.State.Pid}}", "floodmark-broker-2"]]
    assert prlimit.limits == (30, 1048576)
    backend.restore_open_files(2)
    assert prlimit.limits == (1048576, 1048576)


def test_the_docker_backend_refuses_fd_pressure_where_the_engines_processes_are_not_visible(tmp_path):
    backend = DockerBackend(read=lambda argv: "4321\n", proc=tmp_path)
    with pytest.raises(FaultUnsupported, match="not visible from here"):
        backend.limit_open_files(1)
    with pytest.raises(FaultUnsupported, match="is not running"):
        DockerBackend(read=lambda argv: "0\n", proc=tmp_path).limit_open_files(1)
