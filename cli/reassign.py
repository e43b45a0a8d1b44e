"""``floodmark reassign``: Kafka's ``kafka-reassign-partitions.sh`` (ReassignPartitionsCommand of
Kafka 2.x) with its flags, files and output lines, over KIP-455's AlterPartitionReassignments and
ListPartitionReassignments (answered by any broker, which writes ``/admin/reassign_partitions``
for the controller) and Metadata (docs/operations.md "The floodmark CLI").

* ``--generate --topics-to-move-json-file F --broker-list 4,5,6`` proposes, for each topic of
  ``{"topics": [{"topic": "t"}], "version": 1}``, a placement of its partitions with its
  replication factor over the brokers listed (Kafka's ``AdminUtils.assignReplicasToBrokers``,
  :func:`controller.placement.assign_replicas`, with a random start index and replica shift).
  It prints the current and the proposed assignment and changes nothing.
* ``--execute --reassignment-json-file F`` prints the current assignment of the partitions of
  ``{"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [4, 5, 6]}]}`` (to
  keep for a rollback) and starts the reassignment. The broker starts every partition or none:
  a refusal prints each refused partition with the broker's reason and exits 1. With
  ``--throttle B`` the replication of the moving partitions is throttled first
  (:mod:`cli.reassign_throttle`); rerun while every partition of the file still moves, it
  prints ``There is an existing assignment running.`` and only changes the rate.
* ``--verify --reassignment-json-file F`` prints each partition's status: completed (its
  replicas are the target, in order, and it is not moving), still in progress, or failed. Exit
  status 0 only when every one completed, and then it removes a throttle (``Throttle was
  removed.``).

The JSON is Kafka's (compact, partitions sorted by topic and partition, ``log_dirs`` all
``"any"``); a ``log_dirs`` list in the input is accepted and ignored (replicas are not moved
between a broker's log dirs). Malformed input is one ``Error:`` line naming the file and the
problem, in Kafka's words where Kafka has them, and nothing is sent.
"""

from __future__ import annotations

import json
import random
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click

from cli import reassign_throttle as throttling
from cli.common import CliError, bootstrap_option, close_quietly, resolve_bootstrap, run

T = TypeVar("T")
#: A partition as (topic, partition); the client's TopicPartition is such a tuple.
Partition = tuple[str, int]
Assignment = dict[Partition, list[int]]

#: Where ``--generate`` gets its randomness (replaced by tests).
new_rng: Callable[[], random.Random] = random.Random

_FILE = click.Path(exists=True, dir_okay=False, path_type=Path)


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
    "--verify", is_flag=True, help="Report the status of the reassignment of --reassignment-json-file."
)
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
    "--throttle",
    type=int,
    default=throttling.NO_THROTTLE,
    show_default=True,
    metavar="BYTES_PER_S",
    callback=_throttle_value,
    help="For --execute: throttle the replication of the moving partitions to this many bytes/s "
    "(-1: no throttle). Rerun while they move to change it; --verify removes it once they completed.",
)
@click.option("--timeout-ms", type=click.IntRange(min=1), default=60000, show_default=True)
def reassign(
    bootstrap_server: str | None,
    generate: bool,
    execute: bool,
    verify: bool,
    topics_to_move_json_file: Path | None,
    broker_list: str | None,
    reassignment_json_file: Path | None,
    throttle: int,
    timeout_ms: int,
) -> None:
    """Move partitions to other brokers (kafka-reassign-partitions.sh)."""
    mode = _mode(generate, execute, verify, topics_to_move_json_file, broker_list, reassignment_json_file)
    if throttle != throttling.NO_THROTTLE and mode != "execute":
        raise click.UsageError(f"--throttle cannot be used with --{mode}")
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
        run(_with_admin(bootstrap, lambda admin: _execute(admin, targets, throttle, timeout_ms)))
    else:
        run(_with_admin(bootstrap, lambda admin: _verify(admin, targets, timeout_ms)))


def _mode(
    generate: bool,
    execute: bool,
    verify: bool,
    topics_file: Path | None,
    broker_list: str | None,
    reassignment_file: Path | None,
) -> str:
    """The one action asked for, with the options it needs and none it cannot use (Kafka's
    ReassignPartitionsCommand option checks)."""
    actions = [name for name, on in (("generate", generate), ("execute", execute), ("verify", verify)) if on]
    if len(actions) != 1:
        raise click.UsageError("Command must include exactly one action: --generate, --execute or --verify")
    (mode,) = actions
    if mode == "generate":
        if topics_file is None or broker_list is None:
            raise click.UsageError(
                "If --generate option is used, command must include both --topics-to-move-json-file "
                "and --broker-list options"
            )
        if reassignment_file is not None:
            raise click.UsageError("--reassignment-json-file cannot be used with --generate")
        return mode
    if reassignment_file is None:
        raise click.UsageError(f"If --{mode} option is used, command must include --reassignment-json-file")
    for given, option in ((topics_file, "--topics-to-move-json-file"), (broker_list, "--broker-list")):
        if given is not None:
            raise click.UsageError(f"{option} cannot be used with --{mode}")
    return mode


# -- input files ---------------------------------------------------------------------------------


def _load(path: Path, what: str) -> dict[str, Any]:
    """The JSON object of ``path``, its ``version`` (default 1) checked."""
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise CliError(f"{path}: not valid JSON: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CliError(f"{path}: cannot read it: {exc}") from None
    if not isinstance(data, dict):
        raise CliError(f"{path}: expected a JSON object ({what}), got {type(data).__name__}")
    version = data.get("version", 1)
    if version != 1:
        raise CliError(f"{path}: Not supported version field value {version}")
    return data


def _is_id(value: Any) -> bool:
    return type(value) is int and value >= 0


def parse_topics_to_move(path: Path) -> list[str]:
    """The topics of ``{"topics": [{"topic": "t"}, ...], "version": 1}`` (Kafka's parseTopicsData)."""
    data = _load(path, '{"topics": [{"topic": ...}, ...]}')
    entries = data.get("topics")
    if not isinstance(entries, list):
        raise CliError(f'{path}: "topics" must be a list of {{"topic": ...}} objects')
    topics = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or not isinstance(entry.get("topic"), str) or not entry["topic"]:
            raise CliError(f'{path}: topics[{i}] must be {{"topic": "<name>"}}, got {json.dumps(entry)}')
        topics.append(entry["topic"])
    if not topics:
        raise CliError(f"{path}: no topics to move")
    duplicates = sorted({t for t in topics if topics.count(t) > 1})
    if duplicates:
        raise CliError(
            f"{path}: List of topics to reassign contains duplicate entries: {','.join(duplicates)}"
        )
    return topics


def parse_broker_list(text: str) -> list[int]:
    """``--broker-list 4,5,6`` -> [4, 5, 6]; duplicates refused in Kafka's words."""
    try:
        brokers = [int(item) for item in text.split(",")]
    except ValueError:
        brokers = []
    if not brokers or any(b < 0 for b in brokers):
        raise click.BadParameter(
            f"{text!r} is not a list of broker ids such as 4,5,6", param_hint="--broker-list"
        )
    duplicates = sorted({b for b in brokers if brokers.count(b) > 1})
    if duplicates:
        raise CliError(f"Broker list contains duplicate entries: {','.join(map(str, duplicates))}")
    return brokers


def parse_reassignment(path: Path) -> Assignment:
    """The target of each partition of ``{"version": 1, "partitions": [{"topic", "partition",
    "replicas", "log_dirs"?}]}``, checked as Kafka's ReassignPartitionsCommand.parseAndValidate."""
    data = _load(path, '{"version": 1, "partitions": [...]}')
    entries = data.get("partitions")
    if not isinstance(entries, list):
        raise CliError(f'{path}: "partitions" must be a list of {{"topic", "partition", "replicas"}} objects')
    if not entries:
        raise CliError(f"{path}: Partition reassignment data file is empty")
    listed: list[tuple[Partition, list[int]]] = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise CliError(f"{path}: partitions[{i}] must be an object, got {json.dumps(entry)}")
        topic, partition, replicas = entry.get("topic"), entry.get("partition"), entry.get("replicas")
        if not isinstance(topic, str) or not topic or not _is_id(partition):
            raise CliError(
                f'{path}: partitions[{i}] needs a "topic" name and a "partition" number, got {json.dumps(entry)}'
            )
        if not isinstance(replicas, list) or not all(_is_id(r) for r in replicas):
            raise CliError(
                f'{path}: partitions[{i}] ({topic}-{partition}): "replicas" must be a list of broker ids, '
                f"got {json.dumps(replicas)}"
            )
        listed.append(((topic, partition), replicas))
    _check_partitions(path, listed)
    return dict(listed)


def _check_partitions(path: Path, listed: list[tuple[Partition, list[int]]]) -> None:
    """Kafka's checks, in its order and words: empty replica lists, partitions listed twice,
    brokers listed twice for one partition."""
    empty = [_name(tp) for tp, replicas in listed if not replicas]
    if empty:
        raise CliError(f"{path}: Partition replica list cannot be empty: {','.join(empty)}")
    names = [_name(tp) for tp, _ in listed]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise CliError(
            f"{path}: Partition reassignment contains duplicate topic partitions: {','.join(twice)}"
        )
    repeated = [
        f"{_name(tp)} contains multiple entries for {','.join(str(r) for r in sorted({r for r in rs if rs.count(r) > 1}))}"
        for tp, rs in listed
        if len(set(rs)) != len(rs)
    ]
    if repeated:
        raise CliError(
            f"{path}: Partition replica lists may not contain duplicate entries: {'. '.join(repeated)}"
        )


# -- output --------------------------------------------------------------------------------------


def _name(tp: Partition) -> str:
    return f"{tp[0]}-{tp[1]}"


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
    return [
        "Current partition replica assignment",
        "",
        reassignment_json(current),
        "",
        "Save this to use as the --reassignment-json-file option during rollback",
    ]


def verify_status(
    targets: Assignment, current: Assignment, moving: Iterable[Partition]
) -> dict[Partition, str]:
    """Each partition's status, as Kafka's checkIfPartitionReassignmentSucceeded: "in progress"
    while it is being reassigned, else "completed" when its replicas are the target, else "failed"."""
    in_progress = {(t, p) for t, p in moving}
    return {
        tp: "in progress" if tp in in_progress else "completed" if current.get(tp) == target else "failed"
        for tp, target in sorted(targets.items())
    }


def verify_lines(status: Mapping[Partition, str]) -> list[str]:
    words = {"completed": "completed successfully", "in progress": "is still in progress", "failed": "failed"}
    return ["Status of partition reassignment:"] + [
        f"Reassignment of partition {_name(tp)} {words[state]}" for tp, state in sorted(status.items())
    ]


def refusal_message(results: Mapping[Partition, Any]) -> str:
    """The CliError of an AlterPartitionReassignments with errors: one line per refused partition
    with the broker's reason; the partitions refused only because others were (INVALID_REQUEST
    ``not written``) are counted, not listed."""
    errors = {tp: error for tp, error in sorted(results.items()) if error is not None}
    collateral = {
        tp
        for tp, error in errors.items()
        if error.name == "INVALID_REQUEST" and error.message.startswith("not written")
    }
    listed = [tp for tp in errors if tp not in collateral] or list(errors)
    started = len(results) - len(errors)
    head = (
        "reassignment refused, nothing was started:"
        if not started
        else f"{len(errors)} reassignment(s) refused:"
    )
    lines = [head] + [f"{_name(tp)}: {errors[tp]}" for tp in listed]
    others = len(errors) - len(listed)
    if others:
        lines.append(f"({others} other partition(s) not written because of these)")
    return "\n".join(lines)


# -- the three actions ---------------------------------------------------------------------------


async def _with_admin(bootstrap: str, work: Callable[[Any], Awaitable[T]]) -> T:
    from client.admin import AdminClient

    admin = AdminClient(bootstrap)
    try:
        await admin.start()
        return await work(admin)
    finally:
        await close_quietly(admin)


async def _assignment(admin: Any, topics: Iterable[str], strict: bool) -> Assignment:
    """The replicas of every partition of ``topics``; an unknown topic is an error when ``strict``,
    else has no partitions."""
    from client.protocol.errors import ErrorCode, KafkaError

    out: Assignment = {}
    for desc in await admin.describe_topics(sorted(set(topics))):
        if desc.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and strict:
            raise KafkaError(desc.error_code, f"Topic '{desc.name}' does not exist.")
        if desc.error_code and strict:
            raise KafkaError(desc.error_code, f"describe topic '{desc.name}' failed")
        for p in desc.partitions:
            out[desc.name, p.partition] = list(p.replicas)
    return out


async def _generate(admin: Any, topics: list[str], brokers: list[int]) -> None:
    from client.protocol.errors import KafkaError
    from controller.placement import assign_replicas

    current = await _assignment(admin, topics, strict=True)
    live = {b.node_id for b in (await admin.describe_cluster()).brokers}
    unknown = [b for b in brokers if b not in live]
    if unknown:
        raise CliError(
            f"--broker-list names broker(s) not in the cluster: {','.join(map(str, unknown))} "
            f"(live brokers: {','.join(map(str, sorted(live)))})"
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


async def _execute(admin: Any, targets: Assignment, throttle: int, timeout_ms: int) -> None:
    topics = {t for t, _ in targets}
    throttled = throttle != throttling.NO_THROTTLE
    in_progress = await admin.list_partition_reassignments(list(targets), timeout_ms) if throttled else {}
    if throttled and len(in_progress) == len(targets):
        # Kafka's rerun during the move: the broker would refuse every partition
        # (REASSIGNMENT_IN_PROGRESS), so only the rate changes.
        current = await _assignment(admin, topics, strict=False)
        click.echo(throttling.EXISTING)
        await throttling.set_rate(admin, throttling.brokers_of(current, targets, targets), throttle)
        click.echo(throttling.limit_line(throttle))
        return
    current = await _assignment(admin, topics, strict=False)
    for line in rollback_lines({tp: replicas for tp, replicas in current.items() if tp in targets}):
        click.echo(line)
    if throttled and not in_progress:  # else refused below: a running move keeps its throttle
        brokers = await throttling.set_throttle(admin, current, targets, throttle)
        if brokers:
            click.echo(throttling.WARNING)
            click.echo(throttling.limit_line(throttle))
        elif brokers is not None:
            click.echo(throttling.NOTHING_THROTTLED)
    results = await admin.alter_partition_reassignments(targets, timeout_ms)
    if any(error is not None for error in results.values()):
        raise CliError(refusal_message(results))
    click.echo("Successfully started reassignment of partitions.")


async def _verify(admin: Any, targets: Assignment, timeout_ms: int) -> None:
    moving = await admin.list_partition_reassignments(list(targets), timeout_ms)
    current = await _assignment(admin, {t for t, _ in targets}, strict=False)
    status = verify_status(targets, current, moving)
    for line in verify_lines(status):
        click.echo(line)
    pending = sum(1 for s in status.values() if s == "in progress")
    failed = sum(1 for s in status.values() if s == "failed")
    if pending or failed:
        counts = [f"{pending} still in progress" if pending else "", f"{failed} failed" if failed else ""]
        raise CliError(f"reassignment not completed: {', '.join(c for c in counts if c)}")
    if await throttling.remove_throttle(admin, {t for t, _ in targets}):
        click.echo(throttling.REMOVED)
