"""Offset checkpoint files, in Kafka's text format (Kafka's
OffsetCheckpointFile; docs/operations.md "Local cluster layout").

Each log dir holds three of them: ``replication-offset-checkpoint`` (the high watermarks),
``recovery-point-offset-checkpoint`` and ``log-start-offset-checkpoint``::

    0                   <- format version
    <count>
    <topic> <partition> <offset>     (one line per partition)

A checkpoint is replaced atomically: written to ``<name>.tmp``, fsynced, renamed over the old
file, and the directory fsynced so the rename itself survives a power cut. The same helpers
serve the leader-epoch checkpoint (:mod:`broker.log.leader_epoch`), which differs only in its
entry lines.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)

CHECKPOINT_VERSION = 0
TMP_SUFFIX = ".tmp"
_EXHAUSTION_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE})

#: Gives descriptors back when a write meets EMFILE or ENFILE (the segment file cache's
#: ``close_idle``); returns how many it closed.
Relieve = Callable[[], int]


class CorruptCheckpoint(Exception):
    """A checkpoint file that does not follow the format; the message names the file and line."""


def fsync_dir(path: Path) -> None:
    """fsync a directory so that entries created, renamed or removed in it are durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_file(path: Path) -> bool:
    """fsync the file at ``path``; False when it does not exist (it was deleted meanwhile)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return True


def atomic_write_text(path: Path, text: str, relieve: Relieve | None = None) -> None:
    """Replace ``path`` with ``text`` so that a crash leaves either the old or the new file, whole.

    A write that meets EMFILE or ENFILE calls ``relieve`` and, if it closed any descriptor, is
    tried once more (docs/design.md "Open files at scale (issue 25)": the open-file limit lowered
    at run time); otherwise the error is the caller's, a resource error."""
    try:
        _atomic_write_text(path, text)
    except OSError as e:
        if relieve is None or e.errno not in _EXHAUSTION_ERRNOS:
            raise
        closed = relieve()
        if closed == 0:
            raise
        log.warning("writing %s met %s; closed %d idle segment files and tried again", path, e, closed)
        _atomic_write_text(path, text)


def _atomic_write_text(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + TMP_SUFFIX)
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    fsync_dir(path.parent)


def format_checkpoint(entries: list[tuple[object, ...]]) -> str:
    """Kafka's checkpoint text: version, count, then one space-separated line per entry."""
    lines = [str(CHECKPOINT_VERSION), str(len(entries))]
    lines.extend(" ".join(str(field) for field in entry) for entry in entries)
    return "\n".join(lines) + "\n"


def read_checkpoint_entries(path: Path, fields: int) -> list[list[str]] | None:
    """The entry lines of a checkpoint file, each split into exactly ``fields`` tokens, or None
    when the file does not exist. Raises :class:`CorruptCheckpoint` naming the file and line."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except UnicodeDecodeError as e:
        raise CorruptCheckpoint(f"{path}: not UTF-8 text ({e})") from None
    lines = text.splitlines()
    if not lines:
        raise CorruptCheckpoint(f"{path}: line 1: empty file, expected the version")
    if lines[0].strip() != str(CHECKPOINT_VERSION):
        raise CorruptCheckpoint(
            f"{path}: line 1: unsupported version {lines[0]!r}, expected {CHECKPOINT_VERSION}"
        )
    if len(lines) < 2:
        raise CorruptCheckpoint(f"{path}: line 2: missing the entry count")
    try:
        count = int(lines[1].strip())
    except ValueError:
        raise CorruptCheckpoint(f"{path}: line 2: entry count {lines[1]!r} is not an integer") from None
    if count < 0:
        raise CorruptCheckpoint(f"{path}: line 2: negative entry count {count}")
    body = lines[2:]
    while body and not body[-1].strip():
        body.pop()
    if len(body) != count:
        raise CorruptCheckpoint(f"{path}: line 2: says {count} entries but the file has {len(body)}")
    entries: list[list[str]] = []
    for number, line in enumerate(body, start=3):
        tokens = line.split()
        if len(tokens) != fields:
            raise CorruptCheckpoint(f"{path}: line {number}: expected {fields} fields, got {line!r}")
        entries.append(tokens)
    return entries


def parse_int(path: Path, line: int, token: str) -> int:
    try:
        return int(token)
    except ValueError:
        raise CorruptCheckpoint(f"{path}: line {line}: {token!r} is not an integer") from None


class OffsetCheckpointFile:
    """One ``<topic> <partition> <offset>`` checkpoint file."""

    def __init__(self, path: Path, relieve: Relieve | None = None) -> None:
        self.path = Path(path)
        self.relieve = relieve  # see atomic_write_text

    def write(self, offsets: dict[tuple[str, int], int]) -> None:
        entries = [(topic, partition, offset) for (topic, partition), offset in sorted(offsets.items())]
        for topic, partition, offset in entries:
            if not topic or any(c.isspace() for c in topic):
                raise ValueError(f"topic name {topic!r} cannot be written to a checkpoint")
            if partition < 0:
                raise ValueError(f"negative partition {partition} for topic {topic!r}")
            if offset < 0:
                raise ValueError(f"negative offset {offset} for {topic}-{partition}")
        atomic_write_text(self.path, format_checkpoint(entries), self.relieve)

    def read(self) -> dict[tuple[str, int], int]:
        entries = read_checkpoint_entries(self.path, fields=3)
        if entries is None:
            return {}
        offsets: dict[tuple[str, int], int] = {}
        for number, (topic, partition, offset) in enumerate(entries, start=3):
            key = (topic, parse_int(self.path, number, partition))
            if key in offsets:
                raise CorruptCheckpoint(f"{self.path}: line {number}: duplicate entry for {topic}-{key[1]}")
            value = parse_int(self.path, number, offset)
            if key[1] < 0 or value < 0:
                raise CorruptCheckpoint(f"{self.path}: line {number}: negative partition or offset")
            offsets[key] = value
        return offsets
