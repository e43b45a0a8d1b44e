"""``floodmark groups list|describe|reset-offsets|delete``: Kafka's kafka-consumer-groups.sh
(ConsumerGroupCommand, KIP-122's offset reset) over the AdminClient's consumer group calls
(docs/operations.md "Consumer groups").

* ``list``: one group id a line (ListGroups at every broker).
* ``describe --group G``: Kafka's offsets table, a row per partition assigned or committed
  (LOG-END-OFFSET the high watermark, LAG "-" where nothing is committed) and per member without
  partitions; ``--members`` and ``--state`` Kafka's other tables, ``--json`` all of it. Kafka's
  notices: "Consumer group 'G' has no active members." on stderr, and "Error: Consumer group 'G'
  does not exist." (exit 1).
* ``reset-offsets``: new offsets for ``--topic T[:P,...]`` or ``--all-topics`` (those committed),
  clamped to [log start, log end] as Kafka's tool does, printed as ``GROUP TOPIC PARTITION
  NEW-OFFSET``; ``--execute`` commits them as a member-less consumer, which the coordinator
  allows only while the group has no members, so the command refuses first with Kafka's words.
  Without ``--execute`` it is a dry run (with Kafka's warning unless ``--dry-run`` is given).
* ``delete --group G ...``: deletes groups without members, with their offsets; Kafka's lines.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import click

from cli.common import CliError, bootstrap_option, close_quietly, resolve_bootstrap, run

MISSING = "-"
INACTIVE_STATES = ("Empty", "Dead")
RESET_MODES = ("to_earliest", "to_latest", "to_offset", "shift_by", "to_datetime")
#: Kafka's messages (its Errors' defaults) for the group errors a tool meets.
ERROR_MESSAGES = {
    "NON_EMPTY_GROUP": "The group is not empty.",
    "GROUP_ID_NOT_FOUND": "The group id does not exist.",
    "COORDINATOR_NOT_AVAILABLE": "The coordinator is not available.",
    "NOT_COORDINATOR": "This is not the correct coordinator.",
    "COORDINATOR_LOAD_IN_PROGRESS": "The coordinator is loading and hence can't process requests.",
    "INVALID_GROUP_ID": "The configured groupId is invalid.",
}
DRY_RUN_WARNING = (
    "WARN: No action will be performed as the --execute option is missing. "
    "You should add the --dry-run option explicitly if you are scripting this command."
)


def timeout_option(func: Any) -> Any:
    return click.option(
        "--timeout-ms", type=click.IntRange(min=1), default=30000, show_default=True,
        help="How long to keep retrying a coordinator that is moving or loading.",
    )(func)  # fmt: skip


@click.group()
def groups() -> None:
    """List, describe, reset and delete consumer groups (kafka-consumer-groups.sh)."""


# -- the rows and tables, from descriptions --------------------------------------------------------


@dataclass(frozen=True)
class OffsetRow:
    """One row of Kafka's offsets table; ``topic`` None for a member without partitions."""

    topic: str | None
    partition: int | None
    current_offset: int | None
    log_end_offset: int | None
    member: Any | None  # a MemberDescription

    @property
    def lag(self) -> int | None:
        if self.current_offset is None or self.log_end_offset is None:
            return None
        return self.log_end_offset - self.current_offset


def offset_rows(
    description: Any, committed: Mapping[Any, int], log_ends: Mapping[Any, int]
) -> list[OffsetRow]:
    """Kafka's collectGroupOffsets: the partitions assigned to a member or with a committed
    offset (sorted), then the members without partitions."""
    owner = {tuple(tp): m for m in description.members for tp in m.assignment}
    partitions = sorted(set(owner) | {tuple(tp) for tp in committed})
    committed = {tuple(tp): offset for tp, offset in committed.items()}
    ends = {tuple(tp): offset for tp, offset in log_ends.items()}
    rows = [
        OffsetRow(t, p, committed.get((t, p)), ends.get((t, p)), owner.get((t, p))) for t, p in partitions
    ]
    rows.extend(OffsetRow(None, None, None, None, m) for m in description.members if not m.assignment)
    return rows


def _cell(value: Any) -> str:
    return MISSING if value is None else str(value)


def _table(header: list[str], rows: list[list[Any]], minimums: list[int]) -> list[str]:
    """Left-aligned columns as Kafka pads them (each at least its minimum), last one unpadded;
    Kafka's blank line first."""
    cells = [[_cell(v) for v in row] for row in [header, *rows]]
    widths = [max([minimum, *(len(r[i]) for r in cells)]) for i, minimum in enumerate(minimums)]
    lines = [""]
    for row in cells:
        padded = [c.ljust(w) for c, w in zip(row[:-1], widths, strict=False)]
        lines.append(" ".join([*padded, row[-1]]).rstrip())
    return lines


def offsets_table(group: str, rows: list[OffsetRow]) -> list[str]:
    header = ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"]  # fmt: skip
    body = [
        [group, r.topic, r.partition, r.current_offset, r.log_end_offset, r.lag]
        + ([r.member.member_id, r.member.host, r.member.client_id] if r.member else [None] * 3)
        for r in rows
    ]
    return _table(header, body, [15, 15, 10, 15, 15, 15, 15, 15, 0])


def members_table(description: Any) -> list[str]:
    header = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
    body = [[description.group_id, m.member_id, m.host, m.client_id, len(m.assignment)] for m in description.members]  # fmt: skip
    return _table(header, body, [15, 15, 15, 15, 0])


def state_table(description: Any, coordinator: str) -> list[str]:
    header = ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"]
    d = description
    row = [d.group_id, coordinator, d.protocol, d.state, len(d.members)]
    return _table(header, [row], [15, 25, 20, 15, 0])


def describe_document(description: Any, rows: list[OffsetRow]) -> dict[str, Any]:
    """``describe --json``: the group, its members and its offsets (null for unknown values)."""
    return {
        "group": description.group_id,
        "state": description.state,
        "protocol": description.protocol or None,
        "coordinator": description.coordinator,
        "members": [
            {"member_id": m.member_id, "client_id": m.client_id, "host": m.host,
             "assignment": [{"topic": t, "partition": p} for t, p in m.assignment]}
            for m in description.members
        ],
        "offsets": [
            {"topic": r.topic, "partition": r.partition, "current_offset": r.current_offset,
             "log_end_offset": r.log_end_offset, "lag": r.lag, "member_id": r.member and r.member.member_id}
            for r in rows if r.topic is not None
        ],
    }  # fmt: skip


def state_notice(description: Any) -> str | None:
    """Kafka's line on stderr for a group without members or in a rebalance."""
    if description.state == "Empty":
        return f"Consumer group '{description.group_id}' has no active members."
    if description.state in ("PreparingRebalance", "CompletingRebalance"):
        return f"Warning: Consumer group '{description.group_id}' is rebalancing."
    return None


def error_text(code: int) -> str:
    from client.protocol.errors import error_name

    name = error_name(code)
    return f"{name}: {ERROR_MESSAGES[name]}" if name in ERROR_MESSAGES else name


# -- list ------------------------------------------------------------------------------------------


@groups.command(name="list")
@bootstrap_option
@click.option("--json", "as_json", is_flag=True, help="A JSON array of {group, protocol_type, state}.")
@timeout_option
def list_groups(bootstrap_server: str | None, as_json: bool, timeout_ms: int) -> None:
    """List the consumer groups, one a line."""
    listings = run(
        _with_admin(resolve_bootstrap(bootstrap_server), timeout_ms, lambda a: a.list_consumer_groups())
    )
    if as_json:
        doc = [{"group": g.group_id, "protocol_type": g.protocol_type, "state": g.state} for g in listings]
        click.echo(json.dumps(doc, indent=2))
    else:
        for g in listings:
            click.echo(g.group_id)


async def _with_admin(bootstrap: str, timeout_ms: int, call: Any) -> Any:
    from client.admin import AdminClient

    admin = AdminClient(bootstrap, request_timeout_ms=timeout_ms)
    try:
        await admin.start()
        return await call(admin)
    finally:
        await close_quietly(admin)


# -- describe --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GroupView:
    description: Any
    coordinator: str  # Kafka's "host:port  (id)"
    committed: dict[Any, int]
    log_ends: dict[Any, int]


@groups.command()
@bootstrap_option
@click.option("--group", required=True, help="The group to describe.")
@click.option("--offsets", "offsets_view", is_flag=True, help="The offsets table (the default).")
@click.option("--members", is_flag=True, help="GROUP CONSUMER-ID HOST CLIENT-ID #PARTITIONS.")
@click.option("--state", is_flag=True, help="GROUP COORDINATOR (ID) ASSIGNMENT-STRATEGY STATE #MEMBERS.")
@click.option("--json", "as_json", is_flag=True, help="The group, members and offsets as one JSON document.")
@timeout_option
def describe(
    bootstrap_server: str | None,
    group: str,
    offsets_view: bool,
    members: bool,
    state: bool,
    as_json: bool,
    timeout_ms: int,
) -> None:
    """Describe a group: its offsets and lag, its members, or its state."""
    if offsets_view + members + state > 1:
        raise click.UsageError(
            "Option [describe] takes at most one of these options: --members, --offsets, --state"
        )
    view = run(_describe(resolve_bootstrap(bootstrap_server), group, timeout_ms))
    description = view.description
    if description.state == "Dead":
        raise CliError(f"Consumer group '{group}' does not exist.")
    rows = offset_rows(description, view.committed, view.log_ends)
    if as_json:
        click.echo(json.dumps(describe_document(description, rows), indent=2))
        return
    notice = state_notice(description)
    if notice:
        click.echo(notice, err=True)
    if state:
        lines = state_table(description, view.coordinator)
    elif members:
        lines = members_table(description) if description.members else []
    else:
        lines = offsets_table(group, rows) if rows else []
    for line in lines:
        click.echo(line)


async def _describe(bootstrap: str, group: str, timeout_ms: int) -> GroupView:
    async def call(admin: Any) -> GroupView:
        description = (await admin.describe_consumer_groups([group]))[group]
        broker = admin.cluster.broker(description.coordinator)
        where = f"{broker.host}:{broker.port}" if broker else MISSING
        coordinator = f"{where}  ({description.coordinator})"
        if description.state == "Dead":
            return GroupView(description, coordinator, {}, {})
        committed = {tp: om.offset for tp, om in (await admin.list_consumer_group_offsets(group)).items()}
        wanted = set(committed) | {tp for m in description.members for tp in m.assignment}
        (ends,) = await _log_offsets(admin, bootstrap, wanted, "end")
        return GroupView(description, coordinator, committed, ends)

    return await _with_admin(bootstrap, timeout_ms, call)


async def _log_offsets(admin: Any, bootstrap: str, partitions: Iterable[Any], *queries: Any) -> list[dict]:
    """ListOffsets of the partitions that still exist, through a consumer without a group as
    Kafka's tool does: per query ("beginning", "end", or a timestamp in ms) partition -> offset
    (a partition without a record that late is left out)."""
    from client.consumer import Consumer

    partitions = set(partitions)
    found = await admin.describe_topics({tp[0] for tp in partitions}) if partitions else []
    existing = {(d.name, p.partition) for d in found for p in d.partitions}
    tps = sorted(tp for tp in partitions if tuple(tp) in existing)
    if not tps:
        return [{} for _ in queries]
    consumer = Consumer(bootstrap, client_id="floodmark-consumer-groups")
    out: list[dict] = []
    try:
        await consumer.start()
        for query in queries:
            if query in ("beginning", "end"):
                lookup = consumer.beginning_offsets if query == "beginning" else consumer.end_offsets
                out.append(await lookup(tps))
            else:
                hits = await consumer.offsets_for_times(dict.fromkeys(tps, int(query)))
                out.append({tp: hit[0] for tp, hit in hits.items() if hit is not None})
        return out
    finally:
        await close_quietly(consumer)


# -- reset-offsets ---------------------------------------------------------------------------------


def parse_topic_spec(spec: str) -> tuple[str, list[int] | None]:
    """Kafka's ``--topic`` form: ``t`` (every partition) or ``t:0,1,2``."""
    topic, sep, parts = spec.partition(":")
    if not topic.strip():
        raise click.BadParameter(f"{spec!r}: no topic name", param_hint="--topic")
    if not sep:
        return topic.strip(), None
    try:
        partitions = sorted({int(p) for p in parts.split(",")})
    except ValueError:
        raise click.BadParameter(
            f"{spec!r}: expected TOPIC or TOPIC:P1,P2,...", param_hint="--topic"
        ) from None
    if any(p < 0 for p in partitions):
        raise click.BadParameter(f"{spec!r}: partitions are non-negative", param_hint="--topic")
    return topic.strip(), partitions


def parse_datetime_ms(text: str) -> int:
    """ISO 8601 (``2024-05-01T12:00:00.000``, with an optional offset or Z; local time without
    one, as Kafka's tool) as epoch milliseconds."""
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise click.BadParameter(
            f"{text!r} is not a date-time such as 2024-05-01T12:00:00.000 (ISO 8601)",
            param_hint="--to-datetime",
        ) from None
    return int(moment.timestamp() * 1000)


def reset_mode(modes: Mapping[str, Any]) -> tuple[str, Any]:
    given = [(name, value) for name, value in modes.items() if value is not None and value is not False]
    if len(given) != 1:
        names = ", ".join("--" + m.replace("_", "-") for m in RESET_MODES)
        raise click.UsageError(f"Option [reset-offsets] takes exactly one of {names}")
    return given[0]


def new_offsets(
    mode: str,
    value: Any,
    partitions: Iterable[Any],
    starts: Mapping[Any, int],
    ends: Mapping[Any, int],
    committed: Mapping[Any, int],
    by_time: Mapping[Any, int] | None = None,
) -> dict[Any, int]:
    """Kafka's prepareOffsetsToReset: each partition's new offset, clamped to [log start, log
    end] (checkOffsetsRange); ``--to-datetime`` falls back to the log end where no record is
    that late."""
    out = {}
    for tp in sorted(partitions):
        if mode == "to_earliest":
            out[tp] = starts[tp]
        elif mode == "to_latest":
            out[tp] = ends[tp]
        elif mode == "to_datetime":
            out[tp] = (by_time or {}).get(tp, ends[tp])
        else:
            if mode == "shift_by" and tp not in committed:
                raise CliError(
                    f"Cannot shift offset for partition {tp[0]}-{tp[1]} since there is no current committed offset"
                )
            wanted = committed[tp] + value if mode == "shift_by" else value
            out[tp] = max(starts[tp], min(ends[tp], wanted))
    return out


def reset_table(group: str, offsets: Mapping[Any, int]) -> list[str]:
    rows = [[group, tp[0], tp[1], offset] for tp, offset in sorted(offsets.items())]
    return _table(["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], rows, [30, 30, 10, 0])


@groups.command(name="reset-offsets")
@bootstrap_option
@click.option("--group", required=True, help="The group whose offsets to reset (it must have no members).")
@click.option("--topic", "topic_specs", multiple=True, metavar="TOPIC[:P,...]", help="Topic (repeatable).")
@click.option("--all-topics", is_flag=True, help="Every partition the group has a committed offset for.")
@click.option("--to-earliest", is_flag=True, help="The log start offset.")
@click.option("--to-latest", is_flag=True, help="The log end offset.")
@click.option("--to-offset", type=click.IntRange(min=0), help="This offset.")
@click.option("--shift-by", type=int, help="The committed offset plus N (N may be negative).")
@click.option("--to-datetime", help="The first offset whose timestamp is at or after this ISO 8601 time.")
@click.option("--dry-run", is_flag=True, help="Print the new offsets only (the default).")
@click.option("--execute", is_flag=True, help="Commit the new offsets.")
@timeout_option
def reset_offsets(
    bootstrap_server: str | None,
    group: str,
    topic_specs: tuple[str, ...],
    all_topics: bool,
    dry_run: bool,
    execute: bool,
    timeout_ms: int,
    **modes: Any,
) -> None:
    """Reset a group's committed offsets (kafka-consumer-groups.sh --reset-offsets)."""
    mode, value = reset_mode(modes)
    if dry_run and execute:
        raise click.UsageError("Option [reset-offsets] only accepts one of --execute, --dry-run")
    if bool(topic_specs) == all_topics:
        raise click.UsageError("Option [reset-offsets] takes one of these options: --all-topics, --topic")
    specs = [parse_topic_spec(s) for s in topic_specs]
    if mode == "to_datetime":
        value = parse_datetime_ms(value)
    if not dry_run and not execute:
        click.echo(DRY_RUN_WARNING, err=True)
    bootstrap = resolve_bootstrap(bootstrap_server)
    offsets = run(_reset(bootstrap, group, specs, (mode, value), execute, timeout_ms))
    for line in reset_table(group, offsets):
        click.echo(line)


async def _reset(
    bootstrap: str, group: str, specs: list, plan: tuple[str, Any], execute: bool, timeout_ms: int
) -> dict[Any, int]:
    mode, value = plan

    async def call(admin: Any) -> dict[Any, int]:
        description = (await admin.describe_consumer_groups([group]))[group]
        if description.state not in INACTIVE_STATES:
            raise CliError(
                f"Assignments can only be reset if the group '{group}' is inactive, "
                f"but the current state is {description.state}."
            )
        committed = {tp: om.offset for tp, om in (await admin.list_consumer_group_offsets(group)).items()}
        partitions = sorted(committed) if not specs else await _spec_partitions(admin, specs)
        queries = ["beginning", "end", *([value] if mode == "to_datetime" else [])]
        starts, ends, *by_time = await _log_offsets(admin, bootstrap, partitions, *queries)
        for t, p in sorted(ends.keys() - (by_time[0] if by_time else ends).keys()):
            click.echo(
                f"Warning: Partition {p} from topic {t} is empty. Falling back to latest known offset.",
                err=True,
            )
        offsets = new_offsets(mode, value, ends, starts, ends, committed, by_time[0] if by_time else None)
        if execute:
            await admin.alter_consumer_group_offsets(group, offsets)
        return offsets

    return await _with_admin(bootstrap, timeout_ms, call)


async def _spec_partitions(admin: Any, specs: list[tuple[str, list[int] | None]]) -> list[Any]:
    from client.types import TopicPartition

    found = {d.name: d for d in await admin.describe_topics({t for t, _ in specs})}
    out: set[Any] = set()
    for topic, wanted in specs:
        description = found.get(topic)
        have = [p.partition for p in description.partitions] if description is not None else []
        if not have:
            raise CliError(f"Topic '{topic}' does not exist")
        missing = sorted(set(wanted or ()) - set(have))
        if missing:
            raise CliError(
                f"Topic '{topic}' has no partition {', '.join(map(str, missing))} (it has {len(have)})"
            )
        out.update(TopicPartition(topic, p) for p in (wanted if wanted is not None else have))
    return sorted(out)


# -- delete ----------------------------------------------------------------------------------------


def delete_report(results: Mapping[str, int | None]) -> tuple[list[str], list[str]]:
    """Kafka's deleteGroups lines: (stdout lines, stderr lines); stderr empty when all went."""
    done = [g for g, code in results.items() if code is None]
    failed = {g: code for g, code in results.items() if code is not None}
    names = ", ".join(f"'{g}'" for g in done)
    if not failed:
        return [f"Deletion of requested consumer groups ({names}) was successful."], []
    errors = ["Error: Deletion of some consumer groups failed:"]
    errors += [f"* Group '{g}' could not be deleted due to: {error_text(code)}" for g, code in failed.items()]
    out = [f"These other groups were deleted successfully: {names}"] if done else []
    return out, errors


@groups.command()
@bootstrap_option
@click.option("--group", "group_ids", multiple=True, required=True, help="A group to delete (repeatable).")
@timeout_option
def delete(bootstrap_server: str | None, group_ids: tuple[str, ...], timeout_ms: int) -> None:
    """Delete consumer groups without members, and their committed offsets."""
    results = run(
        _with_admin(
            resolve_bootstrap(bootstrap_server), timeout_ms, lambda a: a.delete_consumer_groups(group_ids)
        )
    )
    out, errors = delete_report(results)
    for line in out:
        click.echo(line)
    for line in errors:
        click.echo(line, err=True)
    if errors:
        raise click.exceptions.Exit(1)
