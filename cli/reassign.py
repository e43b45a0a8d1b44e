"""``floodmark reassign``: Kafka 3.7's ``kafka-reassign-partitions.sh`` (ReassignPartitionsCommand,
tools/.../reassign/) with its actions, options, files and output lines, over KIP-455's
AlterPartitionReassignments and ListPartitionReassignments (answered by any broker, which writes
``/admin/reassign_partitions`` for the controller) and Metadata (docs/operations.md
"Reassigning partitions").

* ``--generate --topics-to-move-json-file F --broker-list 4,5,6`` proposes, for each topic of
  ``{"topics": [{"topic": "t"}], "version": 1}``, a placement of its partitions with its
  replication factor over the brokers listed (Kafka's ``AdminUtils.assignReplicasToBrokers``,
  :func:`controller.placement.assign_replicas`, with a random start index and replica shift).
  It prints the current and the proposed assignment and changes nothing.
* ``--execute --reassignment-json-file F`` (executeAssignment) refuses while any reassignment
  runs in the cluster unless ``--additional`` is given; else it prints the current assignment of
  the partitions of ``{"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas":
  [4, 5, 6]}]}`` (to keep for a rollback), with ``--throttle B`` throttles every move the cluster
  will run, the running ones and the plan's (:mod:`cli.reassign_throttle`), and starts the
  plan's moves. A planned partition already moving to the same brokers is not sent again (the
  resubmission that changes the throttle); one moving elsewhere is refused before anything is
  written (this broker cannot change a running move's target, nor cancel it). The broker starts
  every partition or none.
* ``--verify --reassignment-json-file F`` (verifyAssignment) prints each partition's status and,
  once no reassignment runs anywhere in the cluster, clears the throttles (clearAllThrottles)
  unless ``--preserve-throttles``. Exit status 0 only when every partition is at its target.
* ``--list`` (listReassignments) prints the reassignments running.

``--cancel`` is not offered: the broker refuses a null target (docs/operations.md
"AlterPartitionReassignments"). The JSON is Kafka's (compact, partitions sorted by topic and
partition, ``log_dirs`` all ``"any"``); a ``log_dirs`` list in the input is accepted and ignored
(replicas are not moved between a broker's log dirs). Malformed input is one ``Error:`` line
naming the file and the problem, in Kafka's words where Kafka has them, and nothing is sent.
"""

from __future__ import annotations

import json
import random
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TypeVar

import click
from click.core import ParameterSource

from cli import reassign_throttle as throttling
from cli.common import CliError, bootstrap_option, close_quietly, resolve_bootstrap, run
from cli.reassign_files import (
    Assignment,
    Partition,
    parse_broker_list,
    parse_reassignment,
    parse_topics_to_move,
    partition_name,
)

T = TypeVar("T")

#: Where ``--generate`` gets its randomness (replaced by tests).
new_rng: Callable[[], random.Random] = random.Random

_FILE = click.Path(exists=True, dir_okay=False, path_type=Path)

#: Kafka 3.7's CANNOT_EXECUTE_BECAUSE_OF_EXISTING_MESSAGE.
CANNOT_EXECUTE = (
    "Cannot execute because there is an existing partition assignment.  Use --additional to "
    "override this and create a new partition assignment in addition to the existing one. The "
    "--additional flag can also be used to change the throttle by resubmitting the current "
    "reassignment."
)

#: The actions (Kafka 3.7's but --cancel), the options each needs and the others each takes.
ACTIONS = ("generate", "execute", "verify", "list")
REQUIRED = {
    "generate": ("topics-to-move-json-file", "broker-list"),
    "execute": ("reassignment-json-file",),
    "verify": ("reassignment-json-file",),
    "list": (),
}
PERMITTED = {
    "generate": (),
    "execute": ("additional", "throttle", "timeout-ms"),
    "verify": ("preserve-throttles", "timeout-ms"),
    "list": ("timeout-ms",),
}
OPTIONS = (
    "topics-to-move-json-file",
    "broker-list",
    "reassignment-json-file",
    "additional",
    "throttle",
    "preserve-throttles",
    "timeout-ms",
)


class TerseError(CliError):
    """Kafka's TerseException: printed as its message alone (no ``Error:``), exit status 1."""

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(self.format_message(), file=file, err=True)


def _throttle_value(ctx: click.Context, param: click.Parameter, value: int) -> int:
    if value != throttling.NO_THROTTLE and not 1 <= value <= throttling.MAX_RATE:
        raise click.BadParameter(
            f"{value} is not a number of bytes per second (at least 1), nor -1 (no throttle)"
        )
    return value


@click.command(name="reassign")
@bootstrap_option
@click.option("--generate", is_flag=True, help="Propose an assignment of the topics over --broker-list.")
@click.option("--execute", is_flag=True, help="Start the reassignment of --reassignment-json-file.")
@click.option(
    "--verify",
    is_flag=True,
    help="Report the status of the reassignment of --reassignment-json-file; once no reassignment "
    "runs in the cluster, remove the throttles.",
)
@click.option("--list", "list_", is_flag=True, help="List the partition reassignments running.")
@click.option(
    "--topics-to-move-json-file",
    type=_FILE,
    default=None,
    help='For --generate: {"topics": [{"topic": "t"}, ...], "version": 1}.',
)
@click.option(
    "--broker-list", default=None, metavar="ID,ID,...", help="For --generate: the brokers to place on."
)
@click.option(
    "--reassignment-json-file",
    type=_FILE,
    default=None,
    help='For --execute and --verify: {"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [4, 5, 6]}, ...]}.',
)
@click.option(
    "--additional",
    is_flag=True,
    help="For --execute: run this reassignment in addition to the ones running; also the way to "
    "change the throttle of a running reassignment (resubmit it).",
)
@click.option(
    "--throttle",
    type=int,
    default=throttling.NO_THROTTLE,
    show_default=True,
    metavar="BYTES_PER_S",
    callback=_throttle_value,
    help="For --execute: throttle the replication of every running and planned move to this many "
    "bytes/s (-1: no throttle). Resubmit with --additional to change it; --verify removes it "
    "once no reassignment runs.",
)
@click.option(
    "--preserve-throttles", is_flag=True, help="For --verify: do not remove broker or topic throttles."
)
@click.option("--timeout-ms", type=click.IntRange(min=1), default=60000, show_default=True)
@click.pass_context
def reassign(
    ctx: click.Context,
    bootstrap_server: str | None,
    generate: bool,
    execute: bool,
    verify: bool,
    list_: bool,
    topics_to_move_json_file: Path | None,
    broker_list: str | None,
    reassignment_json_file: Path | None,
    additional: bool,
    throttle: int,
    preserve_throttles: bool,
    timeout_ms: int,
) -> None:
    """Move partitions to other brokers (kafka-reassign-partitions.sh)."""
    mode = _mode(ctx)
    if mode == "list":
        bootstrap = resolve_bootstrap(bootstrap_server)
        run(_with_admin(bootstrap, lambda admin: _list(admin, timeout_ms)))
        return
    if mode == "generate":
        assert topics_to_move_json_file is not None and broker_list is not None
        topics = parse_topics_to_move(topics_to_move_json_file)
        brokers = parse_broker_list(broker_list)
        bootstrap = resolve_bootstrap(bootstrap_server)
        run(_with_admin(bootstrap, lambda admin: _generate(admin, topics, brokers)))
        return
    assert reassignment_json_file is not None
    targets = parse_reassignment(reassignment_json_file)
    bootstrap = resolve_bootstrap(bootstrap_server)
    if mode == "execute":
        run(_with_admin(bootstrap, lambda admin: _execute(admin, targets, additional, throttle, timeout_ms)))
    else:
        run(_with_admin(bootstrap, lambda admin: _verify(admin, targets, preserve_throttles, timeout_ms)))


def _mode(ctx: click.Context) -> str:
    """The one action asked for, with the options it needs and none it cannot use, checked in
    Kafka 3.7's order and words (validateAndParseArgs, CommandLineUtils.checkRequiredArgs)."""
    given = {
        name
        for name in (*ACTIONS, *OPTIONS)
        if ctx.get_parameter_source(_param(name))
        in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)
    }
    actions = [a for a in ACTIONS if a in given]
    if len(actions) != 1:
        raise click.UsageError(
            f"Command must include exactly one action: {', '.join('--' + a for a in ACTIONS)}"
        )
    (mode,) = actions
    for option in REQUIRED[mode]:
        if option not in given:
            raise click.UsageError(f'Missing required argument "[{option}]"')
    for option in OPTIONS:
        if option in given and option not in (*REQUIRED[mode], *PERMITTED[mode]):
            raise click.UsageError(f'Option "[{option}]" can\'t be used with action "[{mode}]"')
    return mode


def _param(option: str) -> str:
    return "list_" if option == "list" else option.replace("-", "_")


# -- input files ---------------------------------------------------------------------------------


def _ids(brokers: Iterable[int]) -> str:
    return ",".join(map(str, brokers))


def reassignment_json(assignment: Mapping[Partition, Sequence[int]]) -> str:
    """Kafka's formatAsReassignmentJson: compact, sorted by topic and partition, ``log_dirs`` any."""
    partitions = [
        {"topic": t, "partition": p, "replicas": list(replicas), "log_dirs": ["any"] * len(replicas)}
        for (t, p), replicas in sorted(assignment.items())
    ]
    return json.dumps({"version": 1, "partitions": partitions}, separators=(",", ":"))


def generate_lines(current: Assignment, proposed: Assignment) -> list[str]:
    return [
        "Current partition replica assignment",
        reassignment_json(current),
        "",
        "Proposed partition reassignment configuration",
        reassignment_json(proposed),
    ]


def rollback_lines(current: Assignment) -> list[str]:
    """currentPartitionReplicaAssignmentToString."""
    return [
        "Current partition replica assignment",
        "",
        reassignment_json(current),
        "",
        "Save this to use as the --reassignment-json-file option during rollback",
    ]


def started_line(partitions: Iterable[Partition]) -> str:
    names = [partition_name(tp) for tp in sorted(partitions)]
    return (
        f"Successfully started partition reassignment{'' if len(names) == 1 else 's'} for {','.join(names)}"
    )


@dataclass(frozen=True)
class ReassignmentState:
    """Kafka's PartitionReassignmentState: the replicas now, the target, and whether no
    reassignment of the partition runs (``done``)."""

    current: list[int]
    target: list[int]
    done: bool


def reassignment_states(
    targets: Assignment, current: Assignment, running: Mapping[Partition, Any]
) -> dict[Partition, ReassignmentState]:
    """findPartitionReassignmentStates: a partition being reassigned is not done (its replicas
    are the running move's); any other is done, with its replicas now (none: it does not exist)."""
    return {
        tp: ReassignmentState(list(running[tp].replicas), list(target), False)
        if tp in running
        else ReassignmentState(list(current.get(tp, [])), list(target), True)
        for tp, target in sorted(targets.items())
    }


def verify_lines(states: Mapping[Partition, ReassignmentState]) -> list[str]:
    """partitionReassignmentStatesToString."""
    lines = ["Status of partition reassignment:"]
    for tp, state in sorted(states.items()):
        if not state.done:
            lines.append(f"Reassignment of partition {partition_name(tp)} is still in progress.")
        elif state.current == state.target:
            lines.append(f"Reassignment of partition {partition_name(tp)} is completed.")
        else:
            lines.append(
                f"There is no active reassignment of partition {partition_name(tp)}, but replica set is "
                f"{_ids(state.current)} rather than {_ids(state.target)}."
            )
    return lines


def list_lines(running: Mapping[Partition, Any]) -> list[str]:
    """curReassignmentsToString."""
    if not running:
        return ["No partition reassignments found."]
    lines = ["Current partition reassignments:"]
    for tp, r in sorted(running.items()):
        adding = f" adding: {_ids(r.adding_replicas)}." if r.adding_replicas else ""
        removing = f" removing: {_ids(r.removing_replicas)}." if r.removing_replicas else ""
        lines.append(f"{partition_name(tp)}: replicas: {_ids(r.replicas)}.{adding}{removing}")
    return lines


def refusal_message(results: Mapping[Partition, Any]) -> str:
    """Kafka's "Error reassigning partition(s):" and one line per refused partition with the
    broker's reason; the partitions refused only because others were (this broker starts all or
    none: INVALID_REQUEST ``not written``) are counted, not listed."""
    errors = {tp: error for tp, error in sorted(results.items()) if error is not None}
    collateral = {
        tp
        for tp, error in errors.items()
        if error.name == "INVALID_REQUEST" and error.message.startswith("not written")
    }
    listed = [tp for tp in errors if tp not in collateral] or list(errors)
    lines = ["Error reassigning partition(s):"] + [f"{partition_name(tp)}: {errors[tp]}" for tp in listed]
    others = len(errors) - len(listed)
    if others:
        lines.append(f"({others} other partition(s) not written because of these)")
    return "\n".join(lines)


# -- the actions ---------------------------------------------------------------------------------


async def _with_admin(bootstrap: str, work: Callable[[Any], Awaitable[T]]) -> T:
    from client.admin import AdminClient

    admin = AdminClient(bootstrap)
    try:
        await admin.start()
        return await work(admin)
    finally:
        await close_quietly(admin)


async def _assignment(admin: Any, topics: Iterable[str], strict: bool) -> Assignment:
    """The replicas of every partition of ``topics``; an unknown topic is an error when ``strict``
    (Kafka's describeTopics: "Topic t not found."), else has no partitions."""
    from client.protocol.errors import ErrorCode, KafkaError

    out: Assignment = {}
    for desc in await admin.describe_topics(sorted(set(topics))):
        if desc.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and strict:
            raise KafkaError(desc.error_code, f"Topic {desc.name} not found.")
        if desc.error_code and strict:
            raise KafkaError(desc.error_code, f"describe topic '{desc.name}' failed")
        for p in desc.partitions:
            out[desc.name, p.partition] = list(p.replicas)
    return out


async def _live_brokers(admin: Any) -> set[int]:
    return {b.node_id for b in (await admin.describe_cluster()).brokers}


async def _generate(admin: Any, topics: list[str], brokers: list[int]) -> None:
    from client.protocol.errors import KafkaError
    from controller.placement import assign_replicas

    current = await _assignment(admin, topics, strict=True)
    live = await _live_brokers(admin)
    unknown = [b for b in brokers if b not in live]
    if unknown:
        raise CliError(
            f"--broker-list names broker(s) not in the cluster: {_ids(unknown)} (live brokers: {_ids(sorted(live))})"
        )
    rng = new_rng()
    proposed: Assignment = {}
    for topic in sorted(set(topics)):
        partitions = sorted(p for t, p in current if t == topic)
        rf = len(current[topic, partitions[0]]) if partitions else 0
        try:
            placed = assign_replicas(brokers, len(partitions), rf, rng)
        except KafkaError as exc:
            raise KafkaError(exc.code, f"topic '{topic}': {exc.message}") from None
        proposed.update(((topic, p), replicas) for p, replicas in placed.items())
    for line in generate_lines(current, proposed):
        click.echo(line)


def _resubmitted(targets: Assignment, running: Mapping[Partition, Any]) -> set[Partition]:
    """The planned partitions already moving to the same brokers (compared as sets: a running
    move's replicas, ZooKeeper's AR, need not keep the target's order). Anything else of the plan
    that is moving cannot be redirected here: refused before anything is written."""
    from client.reassignments import target_replicas

    same: set[Partition] = set()
    redirected: list[str] = []
    for tp, target in sorted(targets.items()):
        if tp not in running:
            continue
        now = target_replicas(running[tp])
        if sorted(now) == sorted(target):
            same.add(tp)
        else:
            redirected.append(
                f"{partition_name(tp)}: REASSIGNMENT_IN_PROGRESS: {partition_name(tp)} is being reassigned to {_ids(now)}; "
                "this broker cannot change the target of a running reassignment"
            )
    if redirected:
        raise TerseError("\n".join(["Error reassigning partition(s):", *redirected]))
    return same


async def _execute(admin: Any, targets: Assignment, additional: bool, throttle: int, timeout_ms: int) -> None:
    """executeAssignment: refuse beside a running reassignment unless --additional; check the
    brokers; print the rollback; throttle the move map; start the moves."""
    running = await admin.list_partition_reassignments(None, timeout_ms)
    if running and not additional:
        raise TerseError(CANNOT_EXECUTE)
    unknown = sorted({b for replicas in targets.values() for b in replicas} - await _live_brokers(admin))
    if unknown:
        raise CliError(f"Unknown broker id {unknown[0]}")
    current = {
        tp: replicas
        for tp, replicas in (await _assignment(admin, {t for t, _ in targets}, strict=True)).items()
        if tp in targets
    }
    for line in rollback_lines(current):
        click.echo(line)
    resubmitted = _resubmitted(targets, running)
    if throttle != throttling.NO_THROTTLE:
        moves = throttling.proposed_move_map(running, targets, current)
        if throttling.copies(moves):
            click.echo(throttling.WARNING)
            await throttling.modify_reassignment_throttle(admin, moves, throttle)
            click.echo(throttling.limit_line(throttle))
        else:
            click.echo(throttling.NOTHING_THROTTLED)
    moving = {tp: replicas for tp, replicas in targets.items() if tp not in resubmitted}
    results = await admin.alter_partition_reassignments(moving, timeout_ms)
    if any(error is not None for error in results.values()):
        raise TerseError(refusal_message(results))
    click.echo(started_line(targets))


async def _verify(admin: Any, targets: Assignment, preserve_throttles: bool, timeout_ms: int) -> None:
    """verifyAssignment: each partition's state; the throttles cleared only when no reassignment
    runs anywhere in the cluster (another plan's moves share the brokers' rates)."""
    running = await admin.list_partition_reassignments(None, timeout_ms)
    current = await _assignment(admin, {t for t, _ in targets}, strict=False)
    states = reassignment_states(targets, current, running)
    for line in verify_lines(states):
        click.echo(line)
    if not running and not preserve_throttles:
        existing = {t for t, _ in targets if any(tp[0] == t for tp in current)}
        brokers, topics = await throttling.clear_all_throttles(admin, existing)
        for line in throttling.clearing_lines(brokers, topics):
            click.echo(line)
    pending = sum(1 for s in states.values() if not s.done)
    elsewhere = sum(1 for s in states.values() if s.done and s.current != s.target)
    if pending or elsewhere:
        counts = [
            f"{pending} still in progress" if pending else "",
            f"{elsewhere} not at the target replicas" if elsewhere else "",
        ]
        raise CliError(f"reassignment not completed: {', '.join(c for c in counts if c)}")


async def _list(admin: Any, timeout_ms: int) -> None:
    for line in list_lines(await admin.list_partition_reassignments(None, timeout_ms)):
        click.echo(line)
