"""The verification's verdict (docs/operations.md "Chaos runs and verification"): a check that
did not run is not a clean check. Without log dirs the replica checks (divergent, hw_above_leo,
epoch_cache_inconsistent) are skipped; the run is then INCOMPLETE, not ok, in the result, in
``verification.json`` and in ``summary.md``, and ``floodmark verify`` exits non-zero."""

from __future__ import annotations

import json
from pathlib import Path

from verify.report import CHECKS, Result, summary_markdown, write_report

REPLICA_CHECKS = ("divergent", "hw_above_leo", "epoch_cache_inconsistent")


def result(tmp_path: Path, skipped: tuple[str, ...] = (), **found: int) -> Result:
    counts = {"acknowledged": 10, "committed": 10, "errors": 0} | {
        name: found.get(name, 0) for name in CHECKS
    }
    return Result(
        mode="cluster",
        report_dir=tmp_path,
        counts=counts,
        violations={name: [] for name in CHECKS if name not in skipped},
        skipped={name: "no log dirs given (--log-dirs)" for name in skipped},
    )


def test_a_run_with_skipped_checks_is_incomplete_not_ok(tmp_path: Path) -> None:
    incomplete = result(tmp_path, skipped=REPLICA_CHECKS)
    assert not incomplete.ok and incomplete.exit_code != 0
    assert incomplete.verdict == "INCOMPLETE"
    assert summary_markdown(incomplete).startswith(
        "# Verification INCOMPLETE: 3 check(s) skipped (divergent, hw_above_leo, epoch_cache_inconsistent)\n"
    )
    report = json.loads(write_report(incomplete).read_text())
    assert (report["ok"], report["verdict"]) == (False, "INCOMPLETE")
    assert sorted(report["skipped"]) == sorted(REPLICA_CHECKS)


def test_a_violation_fails_whether_or_not_checks_were_skipped(tmp_path: Path) -> None:
    for skipped in ((), REPLICA_CHECKS):
        failed = result(tmp_path, skipped=skipped, lost=2)
        assert not failed.ok and failed.verdict == "FAILED"
        assert summary_markdown(failed).startswith("# Verification FAILED: 2 violation(s)\n")


def test_only_every_check_run_and_clean_passes(tmp_path: Path) -> None:
    passed = result(tmp_path)
    assert passed.ok and passed.exit_code == 0 and passed.verdict == "PASSED"
    assert summary_markdown(passed).startswith("# Verification PASSED\n")
    report = json.loads(write_report(passed).read_text())
    assert (report["ok"], report["verdict"]) == (True, "PASSED")
