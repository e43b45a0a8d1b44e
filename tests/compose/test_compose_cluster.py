"""The compose cluster on a real engine (issue 12), end to end and slow (some 4 minutes warm,
more cold): `docker/compose.sh up` (the `make compose-up` script: Debian's dockerd started by
hand, the images built without a registry, the cluster up and healthy), the `floodmark` CLI on
the host creating a topic and producing and consuming 10,000 records, a broker's data surviving
`docker-compose stop`/`start` (named volumes), a 60-second chaos run with the docker backend
verified by Spark, and `docker/compose.sh down` leaving no container, network, volume or engine
process behind.

Nothing here is skipped: without root, or when the engine cannot start, the tests fail with the
reason. Select them alone with `pytest -m compose tests/compose`.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STATE = Path(os.environ.get("FLOODMARK_DOCKER_STATE", "/var/lib/floodmark-docker"))
#: The brokers' EXTERNAL listeners, published on the host (docker-compose.yml): no name to resolve.
BOOTSTRAP = "127.0.0.1:29092,127.0.0.1:29093,127.0.0.1:29094"
#: The brokers' KAFKA listeners (Kafka's wire protocol, for kcat and confluent-kafka), published too.
KAFKA_BOOTSTRAP = "127.0.0.1:29192,127.0.0.1:29193,127.0.0.1:29194"
BROKERS = ["floodmark-broker-1", "floodmark-broker-2", "floodmark-broker-3"]
CLI = [str(ROOT / ".venv" / "bin" / "python"), "-m", "cli.main"]
ENV = {**os.environ, "FLOODMARK_BOOTSTRAP": BOOTSTRAP, "COMPOSE_PROJECT_NAME": "floodmark"}

pytestmark = [pytest.mark.compose, pytest.mark.timeout(1800)]


def run(argv, timeout=600, check=True, env=None, **kw) -> subprocess.CompletedProcess:
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env or ENV, **kw
    )
    if check:
        assert done.returncode == 0, (
            f"{argv} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
    return done


def compose(*args, timeout=300) -> subprocess.CompletedProcess:
    env_file = ROOT / ".floodmark" / "compose.env"
    extra = dict(line.split("=", 1) for line in env_file.read_text().split()) if env_file.exists() else {}
    return run(["docker-compose", *args], timeout=timeout, env={**ENV, **extra})


def health(container: str) -> str:
    done = run(["docker", "inspect", "--format", "{{.State.Health.Status}}", container], check=False)
    return done.stdout.strip() or "missing"


def wait_healthy(containers, timeout=120.0) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if all(health(c) == "healthy" for c in containers):
            return time.monotonic() - start
        time.sleep(1)
    raise AssertionError(f"not healthy after {timeout:.0f}s: {[(c, health(c)) for c in containers]}")


def engine_processes() -> list[str]:
    """dockerd, containerd, shims and docker-proxy processes of docker/engine.sh's engine."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if any(word in argv for word in ("dockerd", "containerd", "docker-proxy")) and (
            "floodmark-docker" in argv or "docker-proxy" in argv or argv.startswith("dockerd")
        ):
            found.append(f"{proc.name}: {argv[:120]}")
    return found


def forward_policy() -> str:
    done = subprocess.run(["iptables", "-S", "FORWARD"], capture_output=True, text=True)
    return next((line for line in done.stdout.splitlines() if line.startswith("-P FORWARD")), "")


FORWARD_BEFORE = forward_policy()
HOSTS_BEFORE = Path("/etc/hosts").read_text()


@pytest.fixture(scope="module")
def cluster():
    assert os.geteuid() == 0, "the compose tests start dockerd and build images: run them as root"
    assert shutil.which("apt-get") or shutil.which("dockerd"), "neither dockerd nor apt-get to install it"
    start = time.monotonic()
    up = run(["docker/compose.sh", "up"], timeout=1500, check=False)
    print(up.stdout)
    if up.returncode != 0:
        run(["docker/compose.sh", "down"], timeout=300, check=False)
        pytest.fail(f"docker/compose.sh up failed:\n{up.stdout[-4000:]}\n{up.stderr[-4000:]}")
    assert up.stdout.strip().splitlines()[-1] == f"bootstrap servers: {BOOTSTRAP}"
    print(f"compose up (engine, images, cluster healthy): {time.monotonic() - start:.1f}s")
    yield up
    run(["docker/compose.sh", "down"], timeout=600, check=False)  # again, idempotent, if a test failed


def test_up_is_healthy_and_idempotent(cluster):
    assert all(health(c) == "healthy" for c in [*BROKERS, "floodmark-zookeeper"])
    assert cluster.stdout.strip().splitlines()[-2] == f"kafka bootstrap servers: {KAFKA_BOOTSTRAP}"
    for container, address in zip(BROKERS, KAFKA_BOOTSTRAP.split(","), strict=True):
        host, port = address.split(":")
        socket.create_connection((host, int(port)), timeout=10).close()  # published on the host
        bound = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=10).close()"
        run(["docker", "exec", container, "python", "-c", bound], timeout=60)  # and the broker binds it
    again = run(["docker/compose.sh", "up"], timeout=600)
    assert again.stdout.strip().splitlines()[-1] == f"bootstrap servers: {BOOTSTRAP}"
    assert "an engine already answers" in again.stdout


def consume_events() -> subprocess.CompletedProcess:
    """The CLI on the host reads topic ``events`` from the beginning (10,000 records at most)."""
    return run(
        [
            *CLI,
            "consume",
            "--topic",
            "events",
            "--from-beginning",
            "--max-messages",
            "10000",
            "--timeout-ms",
            "60000",
        ],
        timeout=300,
    )


def test_the_host_cli_produces_and_consumes_10000_records(cluster):
    run(
        [
            *CLI,
            "topics",
            "create",
            "--topic",
            "events",
            "--partitions",
            "6",
            "--replication-factor",
            "3",
            "--config",
            "min.insync.replicas=2",
            "--if-not-exists",
        ],
        timeout=120,
    )
    records = [f"record-{i}" for i in range(10_000)]
    run([*CLI, "produce", "--topic", "events", "--acks", "all"], input="\n".join(records) + "\n", timeout=300)
    done = consume_events()
    consumed = done.stdout.splitlines()
    assert len(consumed) == 10_000 and sorted(consumed) == sorted(records)


def partition_files(container: str) -> dict[str, int]:
    done = run(
        ["docker", "exec", container, "find", "/var/lib/floodmark", "-name", "*.log", "-printf", "%P %s\\n"]
    )
    return {path: int(size) for path, size in (line.split() for line in done.stdout.splitlines())}


def test_a_brokers_data_survives_compose_stop_and_start(cluster):
    before = partition_files("floodmark-broker-2")
    assert sum(before.values()) > 0 and any(p.startswith("events-") for p in before), before
    compose("stop", "broker2")
    state = run(["docker", "inspect", "--format", "{{.State.Status}}", "floodmark-broker-2"]).stdout.strip()
    assert state == "exited"
    compose("start", "broker2")
    wait_healthy(["floodmark-broker-2"])
    after = partition_files("floodmark-broker-2")
    for path, size in before.items():
        assert after.get(path, -1) >= size, (path, size, after.get(path))
    # and the restarted broker serves them: read one partition it leads or follows, from the host
    done = consume_events()
    assert len(done.stdout.splitlines()) == 10_000


def test_a_60_second_chaos_run_with_the_docker_backend_verifies_clean(cluster, tmp_path):
    report = tmp_path / "docker-run"
    done = run(
        [
            *CLI,
            "chaos",
            "run",
            "--backend",
            "docker",
            "--bootstrap-server",
            BOOTSTRAP,
            "--report-dir",
            str(report),
            "--duration",
            "60",
            "--seed",
            "7",
            "--faults",
            "kill,pause,controller,term,partition",
        ],
        timeout=900,
        check=False,
    )
    print(done.stdout[-5000:], done.stderr[-5000:])
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    counts = json.loads((report / "verification.json").read_text())["counts"]
    assert counts["lost"] == counts["duplicate"] == counts["divergent"] == 0, counts
    assert counts["acknowledged"] > 0
    faults = [line for line in (done.stdout + done.stderr).splitlines() if "] fault: " in line]
    assert len(faults) >= 3, faults


def test_down_leaves_no_container_network_volume_or_engine_behind(cluster):
    started_by_us = Path("/run/floodmark-docker/started-by-floodmark").exists()
    network = run(["docker", "network", "inspect", "--format", "{{.Id}}", "floodmark"]).stdout.strip()
    bridge = f"br-{network[:12]}"
    done = run(["docker/compose.sh", "down"], timeout=600)
    print(done.stdout)
    assert subprocess.run(["ip", "link", "show", bridge], capture_output=True).returncode != 0, bridge
    assert subprocess.run(["ip", "link", "show", "docker0"], capture_output=True).returncode != 0
    if started_by_us:
        assert engine_processes() == []
        assert not Path("/var/run/docker.sock").exists()
        volumes = STATE / "docker" / "volumes"
        assert not [v.name for v in volumes.iterdir() if v.name.startswith("floodmark_")]
        assert not list((STATE / "docker" / "containers").iterdir())
    else:  # an engine that was already running stays; the cluster must be gone from it
        assert (
            run(["docker", "ps", "-aq", "--filter", "label=com.docker.compose.project=floodmark"]).stdout
            == ""
        )
        assert "floodmark_" not in run(["docker", "volume", "ls", "-q"]).stdout
    assert Path("/etc/hosts").read_text() == HOSTS_BEFORE  # named listeners: /etc/hosts is never touched
    assert forward_policy() == FORWARD_BEFORE  # dockerd ran with --iptables=false: untouched
