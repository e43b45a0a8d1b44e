"""``floodmark elect-leaders``: Kafka's ``kafka-leader-election.sh`` (LeaderElectionCommand, KIP-460)
with its flags and output lines, through the ElectLeaders API at the controller
(docs/design.md "Leader elections on request").

A preferred election moves each named partition's leadership back to its first replica when that
replica is alive and in the ISR; an unclean one elects any live replica of a partition without a
live leader (records only the old ISR had may be lost). The output, as Kafka prints it::

    Successfully completed leader election (PREFERRED) for partitions t-0, t-1
    Valid replica already elected for partitions t-2
    Error completing leader election (PREFERRED) for partition: t-3: PREFERRED_LEADER_NOT_AVAILABLE: ...

then ``Error: 1 replica(s) could not be elected`` and exit 1 when any failed. With
``--all-topic-partitions`` the partitions that needed no election are not listed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from cli.common import CliError, bootstrap_option, close_quietly, resolve_bootstrap, run


@click.command(name="elect-leaders")
@bootstrap_option
@click.option(
    "--election-type",
    type=click.Choice(["preferred", "unclean"], case_sensitive=False),
    required=True,
    help="PREFERRED: back to each partition's first replica; UNCLEAN: any live replica of a partition without a leader.",
)
@click.option("--topic", default=None, help="The topic of --partition.")
@click.option("--partition", type=click.IntRange(min=0), default=None, help="One partition of --topic.")
@click.option("--all-topic-partitions", is_flag=True, help="Every partition of every topic.")
@click.option(
    "--path-to-json-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help='Partitions as {"partitions": [{"topic": "t", "partition": 0}, ...]}.',
)
@click.option("--timeout-ms", type=click.IntRange(min=1), default=60000, show_default=True)
def elect_leaders(
    bootstrap_server: str | None,
    election_type: str,
    topic: str | None,
    partition: int | None,
    all_topic_partitions: bool,
    path_to_json_file: Path | None,
    timeout_ms: int,
) -> None:
    """Elect partition leaders (kafka-leader-election.sh)."""
    partitions = _partitions(topic, partition, all_topic_partitions, path_to_json_file)
    kind = election_type.upper()
    bootstrap = resolve_bootstrap(bootstrap_server)
    results = run(_elect(bootstrap, election_type.lower(), partitions, timeout_ms))
    for line in outcome_lines(kind, results, list_not_needed=partitions is not None):
        click.echo(line)
    failed = [
        tp for tp, error in results.items() if error is not None and error.name != "ELECTION_NOT_NEEDED"
    ]
    if failed:
        raise CliError(f"{len(failed)} replica(s) could not be elected")


def _partitions(
    topic: str | None, partition: int | None, everything: bool, json_file: Path | None
) -> list[Any] | None:
    """The partitions asked for (None: every partition), from exactly one of the three forms."""
    from client.types import TopicPartition

    given = [everything, json_file is not None, topic is not None or partition is not None]
    if sum(given) != 1:
        raise click.UsageError(
            "give exactly one of --all-topic-partitions, --path-to-json-file, or --topic with --partition"
        )
    if everything:
        return None
    if json_file is not None:
        return _from_json(json_file)
    if topic is None or partition is None:
        raise click.UsageError("--topic and --partition go together")
    return [TopicPartition(topic, partition)]


def _from_json(path: Path) -> list[Any]:
    from client.types import TopicPartition

    try:
        data = json.loads(path.read_text())
        entries = data["partitions"]
        partitions = [TopicPartition(str(e["topic"]), int(e["partition"])) for e in entries]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise click.BadParameter(
            f'{path}: not {{"partitions": [{{"topic": ..., "partition": ...}}, ...]}} ({exc.__class__.__name__}: {exc})',
            param_hint="--path-to-json-file",
        ) from None
    duplicates = sorted({str(tp) for tp in partitions if partitions.count(tp) > 1})
    if duplicates:
        raise click.BadParameter(
            f"{path}: duplicate partitions {', '.join(duplicates)}", param_hint="--path-to-json-file"
        )
    if not partitions:
        raise click.BadParameter(f"{path}: no partitions listed", param_hint="--path-to-json-file")
    return partitions


async def _elect(bootstrap: str, election_type: str, partitions: list[Any] | None, timeout_ms: int) -> dict:
    from client.admin import AdminClient

    admin = AdminClient(bootstrap)
    try:
        await admin.start()
        return await admin.elect_leaders(election_type, partitions, timeout_ms)
    finally:
        await close_quietly(admin)


def _name(tp: Any) -> str:
    return f"{tp.topic}-{tp.partition}"


def outcome_lines(kind: str, results: dict, list_not_needed: bool) -> list[str]:
    """Kafka's LeaderElectionCommand lines for ``results`` (partition -> None or KafkaError)."""
    ordered = sorted(results.items(), key=lambda item: (item[0].topic, item[0].partition))
    done = [_name(tp) for tp, error in ordered if error is None]
    not_needed = [
        _name(tp) for tp, error in ordered if error is not None and error.name == "ELECTION_NOT_NEEDED"
    ]
    lines = []
    if done:
        lines.append(f"Successfully completed leader election ({kind}) for partitions {', '.join(done)}")
    if not_needed and list_not_needed:
        lines.append(f"Valid replica already elected for partitions {', '.join(not_needed)}")
    for tp, error in ordered:
        if error is not None and error.name != "ELECTION_NOT_NEEDED":
            lines.append(
                f"Error completing leader election ({kind}) for partition: {_name(tp)}: {error.name}: {error.message}"
            )
    return lines
