"""The per-broker state-change.log (Kafka's state-change.log, which Kafka's
StateChangeLogMerger tool merges across brokers; docs/operations.md "Logs").

One JSON object per line for every LeaderAndIsr / UpdateMetadata / StopReplica received and
every controller decision, each stamped with the broker id and wall-clock milliseconds so the
CLI can merge the files of all brokers by time, topic and partition.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import IO

log = logging.getLogger(__name__)


class StateChangeLog:
    def __init__(self, path: Path, broker_id: int, time_ms: Callable[[], int]) -> None:
        self.path = path
        self.broker_id = broker_id
        self.time_ms = time_ms
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[str] | None = open(path, "a", buffering=1)  # noqa: SIM115 - line-buffered, lives with the broker
        self._write_failed = False

    def __call__(self, entry: dict) -> None:
        if self._file is None:
            return
        record = {"time_ms": self.time_ms(), "broker": self.broker_id, **entry}
        try:
            self._file.write(json.dumps(record, separators=(",", ":"), default=str) + "\n")
        except OSError as e:  # a full or failing disk must not stop the broker's real work
            if not self._write_failed:
                log.warning(
                    "cannot write %s (%s); state changes go unrecorded until it works again", self.path, e
                )
            self._write_failed = True
        else:
            self._write_failed = False

    def close(self) -> None:
        if self._file is not None:
            try:
                self._file.close()
            except OSError as e:
                log.warning("cannot close %s: %s", self.path, e)
            self._file = None
