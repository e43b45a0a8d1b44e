"""A seeded fault schedule (docs/operations.md "Chaos runs and verification"; issue 4 item 3): the
same seed and duration always give the same list of faults, so a failing chaos run can be replayed.

Sans-IO: this module only decides *what* happens *when*; ``chaos.faults`` does it. Targets are
roles ("the leader of partition 3", "the controller", "broker 2"), resolved against the live
cluster at the moment the fault fires, because who leads depends on what happened before.

The fault kinds (docs/operations.md "Chaos runs and verification" lists them for operators):

=========== =============================================== ==========================================
kind        what it does                                    what it imitates
=========== =============================================== ==========================================
kill        SIGKILL a partition leader, restart it later     a crash (KafkaController.onBrokerFailure)
controller  SIGKILL the active controller, restart it later  controller failover (onControllerFailover)
pause       SIGSTOP longer than the ZooKeeper session, CONT  a long GC pause: the session expires
term        SIGTERM (controlled shutdown), restart later     a rolling restart
partition   isolate a broker's network, heal later (root)    a network partition
disk-full   fill the broker's disk (ENOSPC), free it later   a full disk (KIP-112 log-dir failure)
disk-error  fail every write with EIO, pass through later    a failing disk (KIP-112 log-dir failure)
zk-pause    SIGSTOP ZooKeeper under the session, then CONT   a ZooKeeper stall: ConnectionLoss and
                                                            SUSPENDED, but every session survives
fd-pressure lower a leader's open-file limit (prlimit) just   a broker out of file descriptors
            above what it holds, restore it later            (EMFILE on accept, connect, open)
reassign    move a partition to random live brokers (same    kafka-reassign-partitions.sh during
            replication factor), wait for it to complete     load (KIP-455, onPartitionReassignment)
consumer    crash a member of the run's consumer group (no   a consumer process killed: the
            commit, no LeaveGroup), start a fresh one later  coordinator expels it by session timeout
=========== =============================================== ==========================================

The two disk kinds are not in ``FAULT_KINDS`` (the set every run and test draws from): they
need root and a cluster whose brokers sit on faultable disks (``cluster up --disk-faults``,
devcluster/disk.py), so a run asks for them by name. Their target is drawn per fault, seeded: the
leader of partition P or one of its in-sync followers, half and half, because a leader's
failed disk moves leadership while a follower's only shrinks the ISR. The heal frees or fixes
the disk, then restarts the broker if it has halted (all its log dirs offline).

``zk-pause`` is not in ``FAULT_KINDS`` either (local backend only: it signals the ZooKeeper
server process). It lasts ``zk_pause_s``, by default a third of ``pause_s``: half the session
timeout when ``pause_s`` is 1.5 session timeouts, as chaos/run.py makes it. So every client
(controller, brokers) sees ConnectionLoss and goes SUSPENDED, yet no session expires: nothing
moves unless a component mistakes a disconnection for a lost session.

``fd-pressure`` is not in ``FAULT_KINDS`` either (adding a kind there would change every seed's
schedule): a run asks for it by name. Its target is the leader of partition P, drawn like a
kill's; its length is drawn like a kill's (3-8 s), so a schedule holding it draws nothing more
and a seed's schedule of the older kinds is unchanged. chaos/fd_pressure.py sets the limit (the
first free descriptor number: no room beyond what the broker holds) and restores it; the
heal restarts the broker if it died under the fault, and says so on the timeline.

``reassign`` is not in ``FAULT_KINDS`` either: on a cluster with as many brokers as replicas a
move can only reorder them, so a run asks for it by name, with more brokers than the replication
factor (``--replication-factor 2`` on the runner's three brokers, or a cluster started with more
brokers: chaos/run.py uses one already running in the data dir). It targets no broker: its
partition is drawn like the others', and its target replicas are drawn when it fires (from the
brokers live then, chaos/reassign.py) with a seeded ``pick`` drawn here, so the same seed on the
same cluster states picks the same brokers. Its length is how long the schedule watches the move
before going on (3-8 s); a move still running then is left to the final heal, which waits for
every move to complete.

``consumer`` is not in ``FAULT_KINDS`` either, nor in ``ALL_FAULT_KINDS`` (the faults of the
cluster, which act through a fault backend): it acts on the workload's consumer group
(``chaos run --consumers N``, chaos/consumers.py), so a run with consumers asks for it by name
(:data:`FAULT_VOCABULARY` is every name ``--faults`` accepts). Like ``reassign`` it draws a
seeded ``pick``, only for itself: the member it crashes is ``pick`` modulo the group's size. Its
length (3-8 s) is how long the member stays dead before a fresh one joins in its place.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass

FAULT_KINDS = ("kill", "controller", "pause", "term", "partition")
DISK_FAULT_KINDS = ("disk-full", "disk-error")
ZK_FAULT_KINDS = ("zk-pause",)
REASSIGN_FAULT_KINDS = ("reassign",)
FD_FAULT_KINDS = ("fd-pressure",)  # asked for by name (module docstring)
ALL_FAULT_KINDS = FAULT_KINDS + DISK_FAULT_KINDS + ZK_FAULT_KINDS + FD_FAULT_KINDS + REASSIGN_FAULT_KINDS
CONSUMER_FAULT_KINDS = ("consumer",)  # the workload's consumers, not the cluster (module docstring)
FAULT_VOCABULARY = ALL_FAULT_KINDS + CONSUMER_FAULT_KINDS
#: The kinds that draw a seeded ``pick`` (no other kind draws one, so old seeds hold).
PICKING_FAULT_KINDS = REASSIGN_FAULT_KINDS + CONSUMER_FAULT_KINDS
ZK_PAUSE_OVER_PAUSE = 1 / 3  # zk-pause length / pause length: 0.5 x session when a pause is 1.5 x
ROLES = ("leader", "follower")


@dataclass(frozen=True)
class Fault:
    """One fault: start ``at_s`` seconds into the run, last ``duration_s`` (then heal/restart)."""

    at_s: float
    kind: str
    partition: int  # whose leader a "kill"/"partition" targets, which "reassign" moves; unused by
    # "controller", "zk-pause"
    duration_s: float
    role: str = "leader"  # disk faults only: "leader" or "follower" (an in-sync one) of the partition
    pick: int = 0  # "reassign": seeds the draw of its target replicas; "consumer": whom it crashes

    def describe(self) -> str:
        whose = f"the {self.role} of partition {self.partition}"
        if self.role == "follower":
            whose = f"an in-sync follower of partition {self.partition}"
        what = {
            "kill": f"SIGKILL the leader of partition {self.partition}",
            "controller": "SIGKILL the controller",
            "pause": f"SIGSTOP the leader of partition {self.partition}",
            "term": f"SIGTERM (controlled shutdown) the leader of partition {self.partition}",
            "partition": f"cut the leader of partition {self.partition} off the network",
            "disk-full": f"fill the disk of {whose} (ENOSPC)",
            "disk-error": f"fail every write to the disk of {whose} (EIO)",
            "zk-pause": "SIGSTOP the ZooKeeper server",
            "fd-pressure": f"lower the open-file limit of the leader of partition {self.partition}",
            "reassign": f"move partition {self.partition} to random live brokers (reassignment)",
            "consumer": "crash a consumer of the group (no commit, no LeaveGroup)",
        }[self.kind]
        return f"t+{self.at_s:.1f}s: {what} for {self.duration_s:.1f}s"

    def as_dict(self) -> dict:
        doc = asdict(self)
        if self.kind not in PICKING_FAULT_KINDS:
            del doc["pick"]  # run.json's schedules of the other kinds stay as they were
        return doc


def parse_fault_kinds(text: str) -> tuple[str, ...]:
    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    unknown = [k for k in kinds if k not in FAULT_VOCABULARY]
    if unknown or not kinds:
        raise ValueError(
            f"unknown fault kind(s) {unknown or [text]}: choose from {', '.join(FAULT_VOCABULARY)}"
        )
    return kinds


def make_schedule(
    seed: int,
    duration_s: float,
    kinds: tuple[str, ...],
    partitions: int,
    pause_s: float,
    settle_s: float = 4.0,
    zk_pause_s: float | None = None,
) -> list[Fault]:
    """Faults one after another, never overlapping, with ``settle_s`` of calm between them, each
    kind appearing at least once when the duration allows (in a seeded order), then more drawn at
    random. The last fault ends ``settle_s`` before ``duration_s`` so the run ends healed.
    ``pause_s`` is the length of a pause or a partition: longer than the ZooKeeper session
    timeout, so the session does expire and the controller does act. ``zk_pause_s`` is the length
    of a zk-pause, shorter than the session timeout (default ``pause_s * ZK_PAUSE_OVER_PAUSE``)."""
    rng = random.Random(seed)
    fixed = {"pause": pause_s, "partition": pause_s}
    fixed["zk-pause"] = pause_s * ZK_PAUSE_OVER_PAUSE if zk_pause_s is None else zk_pause_s
    order = list(kinds)
    rng.shuffle(order)
    faults: list[Fault] = []
    t = settle_s
    while True:
        kind = order[len(faults)] if len(faults) < len(order) else rng.choice(kinds)
        length = fixed[kind] if kind in fixed else rng.uniform(3.0, 8.0)  # no draw: old seeds hold
        if t + length + settle_s > duration_s:
            break
        partition = rng.randrange(partitions)
        role = rng.choice(ROLES) if kind in DISK_FAULT_KINDS else "leader"  # no draw: old seeds hold
        pick = rng.getrandbits(32) if kind in PICKING_FAULT_KINDS else 0  # no draw: old seeds hold
        faults.append(Fault(round(t, 3), kind, partition, round(length, 3), role, pick))
        t += length + rng.uniform(settle_s, 2 * settle_s)
    return faults
