"""The input files of ``floodmark reassign`` (Kafka 3.7's ReassignPartitionsCommand's
parseTopicsData, parseGenerateAssignmentArgs and parsePartitionReassignmentData; docs/operations.md
"Reassigning partitions"): ``--topics-to-move-json-file``, ``--broker-list`` and
``--reassignment-json-file``, each checked as Kafka checks it, in Kafka's words where Kafka has
them; a bad file is one ``Error:`` line naming it and the problem, and nothing is sent.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from cli.common import CliError

#: A partition as (topic, partition); the client's TopicPartition is such a tuple.
Partition = tuple[str, int]
Assignment = dict[Partition, list[int]]


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
    empty = [partition_name(tp) for tp, replicas in listed if not replicas]
    if empty:
        raise CliError(f"{path}: Partition replica list cannot be empty: {','.join(empty)}")
    names = [partition_name(tp) for tp, _ in listed]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise CliError(
            f"{path}: Partition reassignment contains duplicate topic partitions: {','.join(twice)}"
        )
    repeated = [
        f"{partition_name(tp)} contains multiple entries for {','.join(str(r) for r in sorted({r for r in rs if rs.count(r) > 1}))}"
        for tp, rs in listed
        if len(set(rs)) != len(rs)
    ]
    if repeated:
        raise CliError(
            f"{path}: Partition replica lists may not contain duplicate entries: {'. '.join(repeated)}"
        )


# -- output --------------------------------------------------------------------------------------


def partition_name(tp: Partition) -> str:
    """Kafka's TopicPartition text, ``topic-partition``."""
    return f"{tp[0]}-{tp[1]}"
