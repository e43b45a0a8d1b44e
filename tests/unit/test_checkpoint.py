"""Offset checkpoint files (SPEC 5.3): Kafka's text format, atomic replacement, corruption named."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.log.checkpoint import CorruptCheckpoint, OffsetCheckpointFile


def test_round_trip(tmp_path: Path):
    offsets = {("orders", 0): 17, ("orders", 1): 0, ("a.b-c", 12): 2**40}
    checkpoint = OffsetCheckpointFile(tmp_path / "replication-offset-checkpoint")
    checkpoint.write(offsets)
    assert OffsetCheckpointFile(tmp_path / "replication-offset-checkpoint").read() == offsets


def test_exact_format_text(tmp_path: Path):
    path = tmp_path / "recovery-point-offset-checkpoint"
    OffsetCheckpointFile(path).write({("t", 1): 5, ("t", 0): 42})
    assert path.read_text() == "0\n2\nt 0 42\nt 1 5\n"
    OffsetCheckpointFile(path).write({})
    assert path.read_text() == "0\n0\n"
    assert OffsetCheckpointFile(path).read() == {}


def test_missing_file_reads_empty(tmp_path: Path):
    assert OffsetCheckpointFile(tmp_path / "absent").read() == {}


def test_write_replaces_atomically_and_leaves_no_tmp(tmp_path: Path):
    path = tmp_path / "log-start-offset-checkpoint"
    OffsetCheckpointFile(path).write({("t", 0): 1})
    OffsetCheckpointFile(path).write({("t", 0): 2, ("u", 3): 4})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log-start-offset-checkpoint"]
    assert OffsetCheckpointFile(path).read() == {("t", 0): 2, ("u", 3): 4}


def test_failed_write_keeps_the_old_file_and_cleans_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    path = tmp_path / "cp"
    OffsetCheckpointFile(path).write({("t", 0): 1})

    def crash(*_args):
        raise OSError("disk on fire")

    monkeypatch.setattr("broker.log.checkpoint.os.replace", crash)
    with pytest.raises(OSError, match="disk on fire"):
        OffsetCheckpointFile(path).write({("t", 0): 2})
    assert OffsetCheckpointFile(path).read() == {("t", 0): 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cp"]


def test_unwritable_entries_are_refused(tmp_path: Path):
    with pytest.raises(ValueError):
        OffsetCheckpointFile(tmp_path / "cp").write({("bad topic", 0): 1})
    with pytest.raises(ValueError):
        OffsetCheckpointFile(tmp_path / "cp").write({("t", 0): -1})
    assert not (tmp_path / "cp").exists()


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("", "line 1"),
        ("1\n0\n", "line 1"),
        ("0\n", "line 2"),
        ("0\nx\n", "line 2"),
        ("0\n2\nt 0 1\n", "line 2"),
        ("0\n1\nt 0\n", "line 3"),
        ("0\n2\nt 0 1\nt 1 nope\n", "line 4"),
        ("0\n2\nt 0 1\nt 0 2\n", "line 4"),
    ],
)
def test_corrupt_file_raises_naming_file_and_line(tmp_path: Path, text: str, line: str):
    path = tmp_path / "replication-offset-checkpoint"
    path.write_text(text)
    with pytest.raises(CorruptCheckpoint) as info:
        OffsetCheckpointFile(path).read()
    assert str(path) in str(info.value)
    assert line in str(info.value)
