"""``floodmark verify`` (SPEC 7, 8): exit codes, progress on stderr, the local cluster's log dirs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from cli import verify as verify_cmd
from cli.common import BOOTSTRAP_ENV
from cli.main import build_cli
from ledger.format import LEDGER_FILE
from tests.verify import scenario as sc


def cli() -> click.Group:
    """The floodmark group with ``verify`` added, as main.py will have it."""
    group = build_cli()
    if "verify" not in group.commands:
        group.add_command(verify_cmd.verify)
    return group


@pytest.fixture(autouse=True)
def no_ambient_cluster(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(BOOTSTRAP_ENV, raising=False)
    monkeypatch.chdir(tmp_path)


def test_violations_exit_3_with_progress_on_stderr(tmp_path: Path, spark: Any) -> None:
    s = sc.build(
        tmp_path / "run", lambda s: s.ledger.ack(sc.TOPIC, 0, 2, b"never written"), ledger_format="jsonl"
    )
    with open(s.report_dir / LEDGER_FILE, "a") as f:
        f.write('{"type": "ack", "topic": "t", "partition": 0, "off')  # the workload died mid-line
    # No --bootstrap-server and no cluster: the command says so and verifies offline.
    result = CliRunner().invoke(
        cli(), ["verify", "--report-dir", str(s.report_dir), "--log-dirs", s.log_dirs]
    )
    assert result.exit_code == verify_cmd.VIOLATIONS_EXIT, (result.output, result.stderr)
    assert "no bootstrap servers found: verifying offline" in result.stderr
    assert "checking lost" in result.stderr and "verification FAILED" in result.stderr
    assert "verification FAILED (1 violation(s))" in result.stdout and "  lost: 1" in result.stdout
    report = json.loads((s.report_dir / "verification.json").read_text())
    assert report["counts"]["lost"] == 1 and report["counts"]["malformed_ledger_lines"] == 1
    assert report["violations"]["lost"][0]["offset"] == 2


def test_clean_run_exits_0_using_the_local_cluster_state_file(tmp_path: Path, spark: Any) -> None:
    s = sc.build(tmp_path / "run")
    state = tmp_path / ".floodmark" / "cluster.json"
    state.parent.mkdir()
    brokers = {str(b): {"port": 1, "log_dir": str(s.disk.log_dir(b))} for b in s.disk.brokers}
    state.write_text(json.dumps({"bootstrap": "127.0.0.1:1", "brokers": brokers}))
    result = CliRunner().invoke(
        cli(),
        [
            "verify",
            "--report-dir",
            str(s.report_dir),
            "--offline",
            "--topic",
            sc.TOPIC,
            "--master",
            "local[1]",
        ],
    )
    assert result.exit_code == 0, (result.output, result.stderr)
    assert result.stdout.startswith("verification PASSED")
    assert "found 6 replica(s) of 1 topic(s) in 3 log dir(s)" in result.stderr


def test_nothing_to_verify_against_is_one_error_line(tmp_path: Path) -> None:
    (tmp_path / "r").mkdir()
    result = CliRunner().invoke(cli(), ["verify", "--report-dir", str(tmp_path / "r")])
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: no bootstrap servers") and len(result.stderr.splitlines()) == 1
    result = CliRunner().invoke(cli(), ["verify", "--report-dir", str(tmp_path / "r"), "--offline"])
    assert result.exit_code == 1 and result.stderr.startswith("Error: --offline needs --log-dirs")
