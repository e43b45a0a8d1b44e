"""The README's five-minute tour runs as written (docs/operations.md; issue: the tour and its
docs went stale). The commands are read out of README.md's tour block, not copied here: the
first part (cluster up .. cluster down) runs line by line against a real cluster, with only
the data dir moved under the test's tmp dir and the ports moved to a free block (the README's
9092.., 9192.. and 2181 become the block's, in every line); every line must exit 0 (pipefail).
The lines after it (a chaos run, faultable disks as root) are parsed by the CLI without running,
so an option that no longer exists fails here too."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import click
import pytest

from cli.main import build_cli
from devcluster.ports import free_block
from devcluster.state import KAFKA_PORT_OFFSET

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
BIN = Path(sys.executable).parent


def tour_lines() -> list[str]:
    text = README.read_text()
    block = text.split("## Five-minute tour", 1)[1].split("```", 2)[1]
    return [line for line in block.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def first_part(lines: list[str]) -> tuple[list[str], list[str]]:
    end = next(i for i, line in enumerate(lines) if line.startswith("floodmark cluster down"))
    return lines[: end + 1], lines[end + 1 :]


def test_the_readme_names_the_runners_default_ports():
    text = README.read_text()
    assert "**9092..**" in text and f"**{9092 + KAFKA_PORT_OFFSET}..**" in text
    assert "kcat -b 127.0.0.1:9192 -L" in text


def test_the_readme_tour_runs_as_written(tmp_path: Path):
    run, rest = first_part(tour_lines())
    base = free_block(12) + 1  # ZooKeeper base-1, brokers base.., KAFKA listeners base+6..
    ports = {2181: base - 1, **{9092 + i: base + i for i in range(3)}}
    ports |= {9092 + KAFKA_PORT_OFFSET + i: base + 6 + i for i in range(3)}
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    env.pop("FLOODMARK_BOOTSTRAP", None)
    outputs: dict[str, str] = {}
    try:
        for line in run:
            if line.startswith("make setup"):
                continue  # this test runs in the set-up venv
            command = line.split("  #", 1)[0].replace("/tmp/", f"{tmp_path}/")  # the comment off
            command = re.sub(r"\b(2181|909[2-4]|919[2-4])\b", lambda m: str(ports[int(m.group(1))]), command)
            if command.startswith("floodmark cluster up"):
                command += f" --zookeeper-port {base - 1} --base-port {base} --kafka-base-port {base + 6}"
            if command.startswith("export "):
                key, value = command.split(None, 1)[1].split("=", 1)
                env[key] = value.strip()
                continue
            done = subprocess.run(
                ["bash", "-o", "pipefail", "-c", command],
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=240,
            )
            assert done.returncode == 0, (
                f"README line failed: {line}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
            )
            outputs[line] = done.stdout
    finally:
        subprocess.run(
            [str(BIN / "floodmark"), "cluster", "down", "--data-dir", str(tmp_path / "fm")],
            capture_output=True,
            timeout=120,
        )
    kcat = next(out for line, out in outputs.items() if line.startswith("kcat "))
    assert " 3 brokers:" in kcat, kcat
    described = next(out for line, out in outputs.items() if "groups describe --group readers" in line)
    assert "readers" in described and "LAG" in described


def command_line(words: list[str]) -> str:
    return " ".join(words)


def test_the_rest_of_the_tour_parses():
    """The chaos and disk lines are not run here (they need minutes and root): each is parsed by
    the CLI, options and values, as it would be run."""
    _, rest = first_part(tour_lines())
    joined = re.sub(r"\\\n\s*", " ", "\n".join(rest))  # continuation lines
    commands = [c.strip() for line in joined.splitlines() for c in line.split("&&")]
    cli = build_cli()
    parsed = 0
    for command in commands:
        words = shlex.split(command, comments=True)
        if not words or words[0] != "floodmark":
            continue
        command, args, ctx = cli, words[1:], click.Context(cli, info_name="floodmark")
        while isinstance(command, click.Group):
            sub = command.get_command(ctx, args[0])
            assert sub is not None, f"README: no command {args[0]!r} in: {command_line(words)}"
            ctx = click.Context(sub, info_name=args[0], parent=ctx)
            command, args = sub, args[1:]
        command.make_context(ctx.info_name, args, parent=ctx.parent)  # raises on a bad option or value
        parsed += 1
    assert parsed >= 6
