"""What the chaos run recorded of itself, as the verification job reads it: ``R/run.json``
(chaos/run_report.py writes it; docs/operations.md "Chaos runs and verification"), the run's
``settings`` as ``floodmark chaos run`` was given them. A report dir without one (``floodmark
verify`` on a run of one's own) reads as :data:`NO_RECORD`: nothing is expected of it.

Two facts are read:

* ``consumers`` - how many members the run's consumer group had (``settings.consumers``): a run
  with consumers must have left a consumer ledger (``R/consumed/``), else the consumer checks
  did not run and the verdict is INCOMPLETE (:func:`verify.consumer_checks.check_consumers`);
* the brokers' retention overrides (``settings.overrides``: Kafka's ``log.retention.ms``,
  ``log.retention.minutes``, ``log.retention.hours``, the first set winning as in
  ``KafkaConfig.logRetentionTimeMillis``, and ``log.retention.bytes``): the proof assumes
  retention deletes nothing within a verified run (Kafka's default is 7 days, and
  ``log.retention.bytes`` -1), so a log start above the committed log's is lost data, not
  retention's (:func:`verify.replica_checks.replica_incomplete`); a retention short enough to
  have run is named in a note.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

RUN_FILE = "run.json"
#: Kafka's log.retention.hours default (168) in ms.
DEFAULT_RETENTION_MS = 7 * 24 * 3600 * 1000
#: What a verified run adds to its ``duration_s``: the heal, the drain and the verification.
RUN_SLACK_MS = 3600 * 1000
_RETENTION_TIME = (
    ("log.retention.ms", 1),
    ("log.retention.minutes", 60_000),
    ("log.retention.hours", 3_600_000),
)


@dataclass(frozen=True)
class RunRecord:
    """``R/run.json``'s facts; ``present`` False when the report dir has none."""

    present: bool
    consumers: int | None = None  # settings.consumers (None: not recorded)
    duration_s: float | None = None
    overrides: dict[str, str] = field(default_factory=dict)
    problem: str | None = None  # why run.json could not be read

    def retention_notes(self) -> list[str]:
        """A note per retention override short enough to have deleted records within the run."""
        notes = []
        for name, scale in _RETENTION_TIME:
            if name in self.overrides:
                ms = _int(self.overrides[name])
                run_ms = (self.duration_s or 0) * 1000 + RUN_SLACK_MS
                if ms is not None and 0 <= ms * scale <= run_ms:
                    notes.append(
                        f"{RUN_FILE}: the brokers ran with {name}={self.overrides[name]}, short enough to "
                        "have deleted records within the run: the records retention deleted count as lost and replicas whose "
                        "log start it moved as replica_incomplete (a run with retention on is not verifiable)"
                    )
                break  # the first one set is the one Kafka uses
        size = _int(self.overrides.get("log.retention.bytes", "-1"))
        if size is not None and size >= 0:
            notes.append(
                f"{RUN_FILE}: the brokers ran with log.retention.bytes={size}: the records retention deleted "
                "count as lost and replicas whose log start it moved as replica_incomplete (a run with "
                "retention on is not verifiable)"
            )
        return notes


NO_RECORD = RunRecord(present=False)


def _int(value: Any) -> int | None:
    try:
        return int(str(value).strip())
    except ValueError:
        return None


def read_run_record(report_dir: Path) -> RunRecord:
    """``report_dir/run.json``'s facts (:data:`NO_RECORD` without one; ``problem`` set when it
    cannot be read)."""
    path = Path(report_dir) / RUN_FILE
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return NO_RECORD
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        return RunRecord(present=True, problem=f"{path}: unreadable ({e})")
    settings = doc.get("settings") if isinstance(doc, dict) else None
    if not isinstance(settings, dict):
        return RunRecord(present=True, problem=f"{path}: no settings object")
    consumers = settings.get("consumers")
    duration = settings.get("duration_s")
    overrides = settings.get("overrides")
    return RunRecord(
        present=True,
        consumers=consumers if isinstance(consumers, int) and not isinstance(consumers, bool) else None,
        duration_s=float(duration) if isinstance(duration, int | float) else None,
        overrides={str(k): str(v) for k, v in overrides.items()} if isinstance(overrides, dict) else {},
    )
