"""What ``floodmark chaos run`` writes of its own into the report dir (docs/operations.md "Chaos
runs and verification"): ``R/run.json`` (the settings, the bootstrap, the log dirs, the disk plan,
the fault schedule and, once the run ends, its outcome) and, when a heal failed or the run was
verified offline, a section of its facts under the verification's ``R/summary.md``. The partition
assignment it records beside them, ``R/assignment.json``, is chaos/assignment.py's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Protocol


class ChaosResult(Protocol):
    """What of chaos.run's ChaosResult the summary reads (a protocol: chaos.run imports this)."""

    heal_failures: list
    unhealed: list
    verified_offline: bool


SUMMARY_FILE = "summary.md"  # the verification's report (docs/operations.md); the run adds its own facts


def write_run_json(report_dir: Path, doc: dict) -> None:
    (report_dir / "run.json").write_text(json.dumps(doc, indent=2) + "\n")


def append_summary(path: Path, result: ChaosResult) -> None:
    """The run's own facts under the verification's summary (written here when it did not run)."""
    lines = ["", "## The chaos run", ""]
    if result.heal_failures:
        lines += [
            f"**{len(result.heal_failures)} heal(s) failed**; still faulted at the end: "
            f"{', '.join(result.unhealed) or 'nothing (a later heal succeeded)'}.",
            "",
            "| what | fault | error |",
            "|---|---|---|",
        ]
        for f in result.heal_failures:
            whom = f"broker {f['broker']}" if "broker" in f else str(f.get("target", "?"))
            lines.append(f"| {whom} | {f['kind']} | {str(f['error']).replace('|', '/')} |")
        lines.append("")
    if result.verified_offline:
        lines.append(
            "Verified **offline** from the log dirs (the cluster could not serve every partition): "
            "the committed log is what lies below the highest checkpointed high watermark."
        )
    with path.open("a", encoding="utf-8") as out:
        out.write("\n".join(lines) + "\n")
