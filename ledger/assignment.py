"""The partition assignment a chaos run recorded (docs/operations.md "Chaos runs and
verification"): ``R/assignment.json``, which replicas each partition of the run's topic has, as
the run read it from ZooKeeper's ``/brokers/topics/<topic>`` (or, where it could not, from the
metadata) at its start and again after its final heal. The chaos run writes it; the offline
verification job reads the last one recorded, so it never has to infer the replication factor
from the replicas that survived on disk.

The shape is Kafka's reassignment JSON (``kafka-reassign-partitions.sh``'s
``--reassignment-json-file``), with two fields of its own::

    {"version": 1,
     "partitions": [{"topic": "t", "partition": 0, "replicas": [1, 2, 3]}, ...],
     "source": "zookeeper" | "metadata",
     "recorded": "start" | "after_heal"}

A leaf like the rest of ledger/: chaos and verify share the format without importing each other.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

ASSIGNMENT_FILE = "assignment.json"
VERSION = 1
Key = tuple[str, int]


class AssignmentFileError(ValueError):
    """An ``assignment.json`` that does not follow the shape above."""


@dataclass(frozen=True)
class RecordedAssignment:
    replicas: dict[Key, list[int]]
    source: str  # where the run read it: zookeeper or metadata
    recorded: str  # when: start or after_heal


def write_assignment(
    report_dir: Path, replicas: Mapping[Key, Sequence[int]], *, source: str, recorded: str
) -> Path:
    """Write (replace, atomically) ``report_dir/assignment.json``; returns its path."""
    doc = {
        "version": VERSION,
        "partitions": [
            {"topic": topic, "partition": partition, "replicas": [int(b) for b in brokers]}
            for (topic, partition), brokers in sorted(replicas.items())
        ],
        "source": source,
        "recorded": recorded,
    }
    path = Path(report_dir) / ASSIGNMENT_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


def read_assignment(report_dir: Path) -> RecordedAssignment | None:
    """The recorded assignment (None: the run recorded none); AssignmentFileError if malformed."""
    path = Path(report_dir) / ASSIGNMENT_FILE
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise AssignmentFileError(f"{path}: unreadable ({e})") from None
    try:
        if doc["version"] != VERSION:
            raise AssignmentFileError(f"{path}: version {doc['version']!r}, expected {VERSION}")
        replicas = {
            (str(p["topic"]), int(p["partition"])): [int(b) for b in p["replicas"]] for p in doc["partitions"]
        }
        return RecordedAssignment(replicas, str(doc.get("source", "?")), str(doc.get("recorded", "?")))
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        if isinstance(e, AssignmentFileError):
            raise
        raise AssignmentFileError(f"{path}: not a reassignment JSON ({type(e).__name__}: {e})") from None
