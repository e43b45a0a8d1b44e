"""The local cluster runner (SPEC 8, first bullet) and the ``floodmark cluster`` commands (SPEC 7).

Two kinds of test, both with the real ZooKeeper that LocalCluster starts itself:

- ``test_cluster_up_three_brokers``: the real thing, ``floodmark cluster up --brokers 3`` with the
  real broker processes (``python -m broker``). It fails until the broker package can register
  in ZooKeeper and elect a controller. Each broker binds and registers its second listener,
  ``KAFKA`` (Kafka's wire protocol), on the port the runner recorded, again after a restart, where
  kcat finds every broker.
- ``test_runner_with_stand_in_broker`` and its neighbours: the runner alone, with
  tests/integration/stand_in_broker.py in place of the broker (it registers itself via kazoo and
  runs a naive controller election). They check the runner's own job: processes, state file,
  signals, waits, error messages.

Every wait is bounded.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from cli.main import build_cli
from devcluster.cluster import LocalCluster
from devcluster.errors import ClusterError
from devcluster.ports import PortInUse, free_block, free_port
from devcluster.state import render_properties
from devcluster.zookeeper import zk_session

pytestmark = pytest.mark.integration

STAND_IN = [sys.executable, str(Path(__file__).with_name("stand_in_broker.py"))]
SESSION_TIMEOUT_S = 6  # the runner's default zookeeper.session.timeout.ms


# -- helpers -------------------------------------------------------------------------------------


def free_port_range(count: int) -> int:
    """A base port such that base .. base+count-1 are all free on 127.0.0.1."""
    return free_block(count)


def wait_for(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def process_gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def invoke(*args: str) -> Any:
    result = CliRunner().invoke(build_cli(), list(args))
    assert result.exit_code == 0, f"floodmark {' '.join(args)} failed: {result.output}\n{result.stderr}"
    return result


def cli_status(data_dir: Path) -> dict[str, Any]:
    return json.loads(invoke("cluster", "status", "--data-dir", str(data_dir), "--json").stdout)


def broker(status: dict[str, Any], broker_id: int) -> dict[str, Any]:
    return next(b for b in status["brokers"] if b["id"] == broker_id)


def kafka_bootstrap_of(status: dict[str, Any]) -> str:
    return ",".join(f"127.0.0.1:{b['kafka_port']}" for b in status["brokers"])


def accepts(port: int) -> bool:
    """True when something accepts a TCP connection on 127.0.0.1:port."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    except OSError:
        return False
    return True


def registered_endpoints(zk_port: int, broker_id: int) -> list[str]:
    """``endpoints`` of /brokers/ids/<id> (BrokerIdZNode v4: every advertised listener)."""
    with zk_session(zk_port) as client:
        return json.loads(client.get(f"/brokers/ids/{broker_id}")[0])["endpoints"]


# -- the real brokers ----------------------------------------------------------------------------


@pytest.mark.timeout(240)
def test_cluster_up_three_brokers(cluster_dir: Path) -> None:
    """cluster up --brokers 3 with the real broker: registered, controller, status, kill -9, start, down."""
    zk_port, base = free_port(), free_port_range(3)
    up = invoke(
        "cluster", "up", "--brokers", "3", "--data-dir", str(cluster_dir),
        "--zookeeper-port", str(zk_port), "--base-port", str(base), "--timeout", "90",
    )  # fmt: skip
    bootstrap = f"127.0.0.1:{base},127.0.0.1:{base + 1},127.0.0.1:{base + 2}"
    assert f"bootstrap servers: {bootstrap}" in up.stdout.splitlines()

    status = cli_status(cluster_dir)
    assert status["status"] == "running" and status["bootstrap"] == bootstrap
    # the KAFKA listeners: printed, bound, and registered in ZooKeeper beside PLAINTEXT
    kafka = kafka_bootstrap_of(status)
    lines = up.stdout.splitlines()
    assert lines[lines.index(f"bootstrap servers: {bootstrap}") + 1] == f"kafka bootstrap servers: {kafka}"
    assert status["kafka_bootstrap"] == kafka
    kafka_ports = {b["id"]: b["kafka_port"] for b in status["brokers"]}
    assert len(set(kafka_ports.values())) == 3 and not set(kafka_ports.values()) & {
        zk_port,
        base,
        base + 1,
        base + 2,
    }
    for i, port in kafka_ports.items():
        assert accepts(port), f"broker {i}'s KAFKA listener on {port}"
        endpoints = registered_endpoints(zk_port, i)
        assert endpoints == [f"PLAINTEXT://127.0.0.1:{base + i - 1}", f"KAFKA://127.0.0.1:{port}"]
    text = invoke("cluster", "status", "--data-dir", str(cluster_dir)).stdout
    assert f"kafka bootstrap servers: {kafka}" in text.splitlines()
    assert status["zookeeper"]["ok"] and status["zookeeper"]["port"] == zk_port
    assert [(b["id"], b["port"], b["alive"], b["registered"]) for b in status["brokers"]] == [
        (1, base, True, True),
        (2, base + 1, True, True),
        (3, base + 2, True, True),
    ]
    controller = status["controller"]["id"]
    assert controller in (1, 2, 3) and status["controller"]["epoch"] >= 1
    assert [b["controller"] for b in status["brokers"]] == [b["id"] == controller for b in status["brokers"]]

    # kill -9 a broker that is not the controller: dead at once, unregistered after the session timeout
    victim = next(i for i in (1, 2, 3) if i != controller)
    old_pid = broker(status, victim)["pid"]
    invoke("cluster", "kill", str(victim), "--data-dir", str(cluster_dir))
    assert process_gone(old_pid)
    assert broker(cli_status(cluster_dir), victim)["alive"] is False
    wait_for(
        lambda: not broker(cli_status(cluster_dir), victim)["registered"],
        SESSION_TIMEOUT_S * 5,
        f"broker {victim}'s ephemeral registration to expire",
    )

    # start: back with the same config and data (the same KAFKA port, bound again), a new pid
    assert not accepts(kafka_ports[victim])
    invoke("cluster", "start", str(victim), "--data-dir", str(cluster_dir), "--timeout", "60")
    back = broker(cli_status(cluster_dir), victim)
    assert back["alive"] and back["registered"] and back["pid"] != old_pid
    assert back["kafka_port"] == kafka_ports[victim] and accepts(kafka_ports[victim])
    assert f"KAFKA://127.0.0.1:{kafka_ports[victim]}" in registered_endpoints(zk_port, victim)
    assert cli_status(cluster_dir)["kafka_bootstrap"] == kafka
    # kcat on the KAFKA listeners is told every broker's KAFKA address (the listener it came in on)
    listing = subprocess.run(
        ["kcat", "-b", kafka, "-L", "-J", "-m", "30"], capture_output=True, text=True, timeout=60, check=True
    )
    assert sorted(b["name"] for b in json.loads(listing.stdout)["brokers"]) == kafka.split(",")

    # kill -9 and start at once: the dead process's registration lingers for a session timeout,
    # and start returns only when the new process has registered (it once took the old one's)
    with zk_session(zk_port) as client:
        old_owner = client.exists(f"/brokers/ids/{victim}").ephemeralOwner
    invoke("cluster", "kill", str(victim), "--data-dir", str(cluster_dir))
    invoke("cluster", "start", str(victim), "--data-dir", str(cluster_dir), "--timeout", "60")
    with zk_session(zk_port) as client:
        stat = client.exists(f"/brokers/ids/{victim}")
    assert stat is not None and stat.ephemeralOwner != old_owner, (
        "start returned on the dead process's registration"
    )

    # down: every process gone, data kept, state says stopped
    pids = [b["pid"] for b in cli_status(cluster_dir)["brokers"]] + [status["zookeeper"]["pid"]]
    invoke("cluster", "down", "--data-dir", str(cluster_dir))
    assert all(process_gone(pid) for pid in pids)
    final = cli_status(cluster_dir)
    assert final["status"] == "stopped" and not final["zookeeper"]["ok"]
    assert not any(b["alive"] for b in final["brokers"])
    assert all((cluster_dir / f"broker-{i}" / "data").is_dir() for i in (1, 2, 3))


# -- the runner alone, with the stand-in broker --------------------------------------------------


@pytest.mark.timeout(180)
def test_runner_with_stand_in_broker(cluster_dir: Path) -> None:
    """The runner's whole life cycle with tests/integration/stand_in_broker.py as the broker."""
    zk_port, base = free_port(), free_port_range(3)
    progress: list[str] = []
    runner = LocalCluster(cluster_dir, broker_command=STAND_IN, progress=progress.append)
    state = runner.up(
        3, zookeeper_port=zk_port, base_port=base, overrides={"num.partitions": "3"}, timeout=60
    )

    # state file and configs
    bootstrap = f"127.0.0.1:{base},127.0.0.1:{base + 1},127.0.0.1:{base + 2}"
    assert state.bootstrap == runner.bootstrap_servers == bootstrap
    doc = json.loads((cluster_dir / "cluster.json").read_text())
    assert doc["status"] == "running" and doc["bootstrap"] == bootstrap
    kafka_ports = {i: doc["brokers"][str(i)]["kafka_port"] for i in (1, 2, 3)}
    kafka = ",".join(f"127.0.0.1:{kafka_ports[i]}" for i in (1, 2, 3))
    assert doc["kafka_bootstrap"] == state.kafka_bootstrap == runner.kafka_bootstrap_servers == kafka
    assert doc["zookeeper"]["port"] == zk_port and doc["zookeeper"]["data_dir"] == str(
        cluster_dir / "zookeeper"
    )
    assert sorted(doc["brokers"]) == ["1", "2", "3"]
    for i in (1, 2, 3):
        entry = doc["brokers"][str(i)]
        assert entry["port"] == base + i - 1 and entry["pid"] > 0
        assert entry["config"] == str(cluster_dir / f"broker-{i}" / "server.properties")
        assert entry["log_dir"] == str(cluster_dir / f"broker-{i}" / "data")
        props = Path(entry["config"]).read_text().splitlines()
        assert f"broker.id={i}" in props
        assert f"log.dirs={entry['log_dir']}" in props and f"zookeeper.connect=127.0.0.1:{zk_port}" in props
        assert "num.partitions=3" in props
        # /metrics on by default: a port of a second block, recorded and written (issue 22 item 7)
        assert entry["metrics_port"] not in (None, zk_port, *range(base, base + 3))
        assert f"metrics.port={entry['metrics_port']}" in props
        # the KAFKA listener (KIP-103): a port of a third block, recorded, written, bound
        assert entry["kafka_port"] not in (zk_port, entry["metrics_port"], *range(base, base + 3))
        listeners = f"listeners=PLAINTEXT://127.0.0.1:{base + i - 1},KAFKA://127.0.0.1:{entry['kafka_port']}"
        assert listeners in props and accepts(entry["kafka_port"])
        assert any(f"KAFKA listener on 127.0.0.1:{entry['kafka_port']}" in line for line in progress)
        assert "registered" in (cluster_dir / f"broker-{i}" / "broker.out").read_text()
    assert any("controller: broker" in line for line in progress)

    # status, through the CLI (a separate LocalCluster loaded from the state file)
    status = cli_status(cluster_dir)
    assert status["zookeeper"]["ok"] and status["zookeeper"]["alive"]
    assert all(b["alive"] and b["registered"] and not b["paused"] for b in status["brokers"])
    controller = status["controller"]["id"]
    assert sum(b["controller"] for b in status["brokers"]) == 1 and status["controller"]["epoch"] == 1
    text = invoke("cluster", "status", "--data-dir", str(cluster_dir)).stdout
    assert f"broker {controller} (epoch 1)" in text
    lines = text.splitlines()
    assert lines[lines.index(f"bootstrap   {bootstrap}") + 1] == f"kafka bootstrap servers: {kafka}"
    assert status["kafka_bootstrap"] == kafka
    assert {b["id"]: b["kafka_port"] for b in status["brokers"]} == kafka_ports
    metrics = {i: f"http://127.0.0.1:{doc['brokers'][str(i)]['metrics_port']}/metrics" for i in (1, 2, 3)}
    assert {b["id"]: b["metrics"] for b in status["brokers"]} == metrics
    assert all(url in text for url in metrics.values())

    # up again: idempotent, nothing restarted
    again = LocalCluster(cluster_dir).up(3, zookeeper_port=zk_port, base_port=base)
    assert {i: b.pid for i, b in again.brokers.items()} == {i: b.pid for i, b in state.brokers.items()}

    # kill -9 the controller: dead at once, unregistered after the session timeout, a new controller
    old_pid = broker(status, controller)["pid"]
    kill = invoke("cluster", "kill", str(controller), "--data-dir", str(cluster_dir), "--signal", "KILL")
    assert f"sent SIGKILL to broker {controller} (pid {old_pid})" in kill.stdout
    assert process_gone(old_pid)
    assert broker(cli_status(cluster_dir), controller)["alive"] is False

    def unregistered() -> dict[str, Any] | None:
        status = cli_status(cluster_dir)
        return None if broker(status, controller)["registered"] else status

    after = wait_for(unregistered, SESSION_TIMEOUT_S * 5, "the killed broker's registration to expire")
    wait_for(
        lambda: cli_status(cluster_dir)["controller"]["id"] not in (None, controller), 30, "a new controller"
    )
    assert after["brokers"][controller - 1]["pid"] == old_pid  # the recorded pid stays until a restart

    # killing a dead broker is a clear error
    dead = CliRunner().invoke(
        build_cli(), ["cluster", "kill", str(controller), "--data-dir", str(cluster_dir)]
    )
    assert dead.exit_code == 1 and dead.stderr == f"Error: broker {controller} is not running\n"

    # start: same config (the same ports, the KAFKA one bound again), new pid, registered again
    assert not accepts(kafka_ports[controller])
    invoke("cluster", "start", str(controller), "--data-dir", str(cluster_dir))
    back = broker(cli_status(cluster_dir), controller)
    assert back["alive"] and back["registered"] and back["pid"] != old_pid
    assert back["kafka_port"] == kafka_ports[controller] and accepts(kafka_ports[controller])
    assert (
        json.loads((cluster_dir / "cluster.json").read_text())["brokers"][str(controller)]["pid"]
        == back["pid"]
    )

    # SIGSTOP / SIGCONT
    other = next(i for i in (1, 2, 3) if i != controller)
    runner = LocalCluster.load(cluster_dir)
    runner.kill(other, "STOP")
    assert broker(runner.status(), other)["paused"]
    runner.kill(other, "CONT")
    assert not broker(runner.status(), other)["paused"]

    # down: everything gone, data kept, state stopped; status still answers
    pids = [b["pid"] for b in runner.status()["brokers"]] + [runner.status()["zookeeper"]["pid"]]
    invoke("cluster", "down", "--data-dir", str(cluster_dir))
    assert all(process_gone(pid) for pid in pids)
    final = cli_status(cluster_dir)
    assert final["status"] == "stopped" and not final["zookeeper"]["ok"] and final["controller"]["id"] is None
    assert not any(b["alive"] or b["registered"] for b in final["brokers"])
    assert (cluster_dir / "zookeeper").is_dir() and (cluster_dir / "broker-1" / "data").is_dir()

    # up on the stopped directory: same ports and configs, running again, printing the same lines
    again_up = invoke("cluster", "up", "--brokers", "3", "--data-dir", str(cluster_dir), "--timeout", "60")
    assert {f"bootstrap servers: {bootstrap}", f"kafka bootstrap servers: {kafka}"} <= set(
        again_up.stdout.splitlines()
    )
    restarted = LocalCluster.load(cluster_dir).state
    assert restarted is not None
    assert restarted.bootstrap == bootstrap and restarted.zookeeper.port == zk_port
    assert restarted.kafka_bootstrap == kafka and all(accepts(port) for port in kafka_ports.values())
    assert {i: restarted.metrics_address(i) for i in (1, 2, 3)} == metrics
    assert all(b["alive"] and b["registered"] for b in cli_status(cluster_dir)["brokers"])


@pytest.mark.timeout(60)
def test_up_refuses_a_port_in_use(cluster_dir: Path) -> None:
    zk_port, base = free_port(), free_port_range(2)
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", base + 1))
        squatter.listen()
        with pytest.raises(PortInUse, match=rf"port {base + 1} .*broker 2.* already in use"):
            LocalCluster(cluster_dir, broker_command=STAND_IN).up(2, zookeeper_port=zk_port, base_port=base)
        result = CliRunner().invoke(
            build_cli(),
            ["cluster", "up", "--brokers", "2", "--data-dir", str(cluster_dir / "other"),
             "--zookeeper-port", str(base + 1), "--base-port", str(base + 10)],
        )  # fmt: skip
    assert result.exit_code == 1
    assert result.stderr == f"Error: port {base + 1} on 127.0.0.1 (wanted for ZooKeeper) is already in use\n"
    assert "Traceback" not in result.output


@pytest.mark.timeout(60)
def test_up_refuses_a_kafka_port_in_use(cluster_dir: Path) -> None:
    """Broker 2's KAFKA listener port taken: `cluster up` names it and starts nothing; once it is
    free, the same ports are used."""
    zk_port, base = free_port(), free_port_range(6)
    args = ["--zookeeper-port", str(zk_port), "--base-port", str(base), "--kafka-base-port", str(base + 4)]
    up_args = ["cluster", "up", "--brokers", "2", "--data-dir", str(cluster_dir), *args]
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", base + 5))
        squatter.listen()
        runner = LocalCluster(cluster_dir, broker_command=STAND_IN)
        with pytest.raises(PortInUse, match=rf"port {base + 5} .*broker 2's KAFKA listener.* already in use"):
            runner.up(2, zookeeper_port=zk_port, base_port=base, kafka_base_port=base + 4)
        assert runner.state is not None and runner.state.zookeeper.pid is None
        refused = CliRunner().invoke(build_cli(), up_args)
    assert refused.exit_code == 1
    assert refused.stderr == (
        f"Error: port {base + 5} on 127.0.0.1 (wanted for broker 2's KAFKA listener) is already in use\n"
    )
    state = LocalCluster(cluster_dir, broker_command=STAND_IN).up(
        2, zookeeper_port=zk_port, base_port=base, kafka_base_port=base + 4, timeout=30
    )
    assert state.kafka_bootstrap == f"127.0.0.1:{base + 4},127.0.0.1:{base + 5}"
    assert accepts(base + 4) and accepts(base + 5)


@pytest.mark.timeout(120)
def test_a_cluster_set_up_before_the_kafka_listeners_still_runs_without_them(cluster_dir: Path) -> None:
    """A state file without kafka ports (and configs with one listener), as the runner wrote them
    before: up, status, kill and start work; no KAFKA listener, no "kafka bootstrap servers" line."""
    zk_port, base = free_port(), free_port_range(2)
    runner = LocalCluster(cluster_dir, broker_command=STAND_IN)
    state = runner._new_state(2, zk_port, base, {})  # written, not started
    doc = state.to_json()
    del doc["kafka_bootstrap"]
    for i, entry in doc["brokers"].items():
        del entry["kafka_port"]
        config = Path(entry["config"])
        config.write_text(
            config.read_text().replace(f",KAFKA://127.0.0.1:{state.brokers[int(i)].kafka_port}", "")
        )
    (cluster_dir / "cluster.json").write_text(json.dumps(doc))

    up = invoke("cluster", "up", "--brokers", "2", "--data-dir", str(cluster_dir), "--timeout", "60")
    assert up.stdout.splitlines()[-3] == f"bootstrap servers: 127.0.0.1:{base},127.0.0.1:{base + 1}"
    assert "kafka bootstrap servers" not in up.stdout and "KAFKA listener" not in up.stdout
    assert "kafka bootstrap servers" not in invoke("cluster", "status", "--data-dir", str(cluster_dir)).stdout
    status = cli_status(cluster_dir)
    assert status["kafka_bootstrap"] is None and all(
        b["alive"] and b["registered"] for b in status["brokers"]
    )
    assert {b["kafka_port"] for b in status["brokers"]} == {None}
    with pytest.raises(ClusterError, match="was set up without KAFKA listeners"):
        LocalCluster.load(cluster_dir).kafka_bootstrap_servers  # noqa: B018

    invoke("cluster", "kill", "1", "--data-dir", str(cluster_dir))
    invoke("cluster", "start", "1", "--data-dir", str(cluster_dir))
    assert broker(cli_status(cluster_dir), 1)["registered"]
    props = Path(doc["brokers"]["1"]["config"]).read_text().splitlines()
    assert f"listeners=PLAINTEXT://127.0.0.1:{base}" in props
    assert json.loads((cluster_dir / "cluster.json").read_text())["kafka_bootstrap"] is None


@pytest.mark.timeout(60)
def test_up_reports_a_broker_that_dies(cluster_dir: Path) -> None:
    dying = [sys.executable, "-c", "import sys; print('bad property: log.dirs'); sys.exit(3)"]
    runner = LocalCluster(cluster_dir, broker_command=dying)
    with pytest.raises(ClusterError) as caught:
        runner.up(1, zookeeper_port=free_port(), base_port=free_port_range(1), timeout=20)
    message = str(caught.value)
    assert message.startswith("broker 1 exited with code 3 before registering in ZooKeeper")
    assert "bad property: log.dirs" in message and str(cluster_dir / "broker-1" / "broker.out") in message
    # what this run started is stopped again
    doc = json.loads((cluster_dir / "cluster.json").read_text())
    assert doc["status"] == "stopped" and doc["zookeeper"]["pid"] is None


@pytest.mark.timeout(60)
def test_up_times_out_naming_the_broker(cluster_dir: Path) -> None:
    silent = [sys.executable, "-c", "import time; print('starting forever'); time.sleep(60)"]
    runner = LocalCluster(cluster_dir, broker_command=silent)
    with pytest.raises(ClusterError, match=r"broker 1 did not register in ZooKeeper within 2s") as caught:
        runner.up(1, zookeeper_port=free_port(), base_port=free_port_range(1), timeout=2)
    assert "starting forever" in str(caught.value)
    pid = json.loads((cluster_dir / "cluster.json").read_text())["brokers"]["1"]["pid"]
    assert pid is None


# -- pieces that need no processes ---------------------------------------------------------------


def test_server_properties_use_kafka_names_and_user_overrides(tmp_path: Path) -> None:
    text = render_properties(2, 9093, tmp_path / "data", 2181, {"min.insync.replicas": "2"}, kafka_port=9193)
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    assert lines == [
        "broker.id=2",
        "listeners=PLAINTEXT://127.0.0.1:9093,KAFKA://127.0.0.1:9193",
        f"log.dirs={tmp_path / 'data'}",
        "zookeeper.connect=127.0.0.1:2181",
        "zookeeper.session.timeout.ms=6000",
        "min.insync.replicas=2",
    ]
    overridden = render_properties(1, 9092, tmp_path, 2181, {"zookeeper.session.timeout.ms": "10000"})
    assert "zookeeper.session.timeout.ms=10000" in overridden.splitlines()
    assert "zookeeper.session.timeout.ms=6000" not in overridden.splitlines()


@pytest.mark.parametrize("key", ["broker.id", "listeners", "log.dirs", "zookeeper.connect"])
def test_runner_owned_keys_cannot_be_overridden(tmp_path: Path, key: str) -> None:
    with pytest.raises(ClusterError, match=rf"--config {key} is set by the cluster runner"):
        LocalCluster(tmp_path).up(1, zookeeper_port=free_port(), base_port=free_port(), overrides={key: "x"})
    assert not (tmp_path / "cluster.json").exists()


def test_commands_on_a_directory_without_a_cluster(tmp_path: Path) -> None:
    for args in (["status"], ["down"], ["kill", "1"], ["start", "1"]):
        result = CliRunner().invoke(build_cli(), ["cluster", *args, "--data-dir", str(tmp_path)])
        assert result.exit_code == 1
        assert (
            result.stderr
            == f"Error: no cluster in {tmp_path} (no cluster.json): run `floodmark cluster up`\n"
        )


def test_unknown_broker_id_is_named(tmp_path: Path) -> None:
    zk_port, base = free_port(), free_port_range(2)
    runner = LocalCluster(tmp_path, broker_command=STAND_IN)
    runner.state = runner._new_state(2, zk_port, base, {})  # state without processes
    runner._save()
    result = CliRunner().invoke(build_cli(), ["cluster", "kill", "7", "--data-dir", str(tmp_path)])
    assert result.exit_code == 1
    assert result.stderr == f"Error: no broker 7 in the cluster at {tmp_path} (brokers: 1,2)\n"
    assert os.path.exists(tmp_path / "broker-2" / "server.properties")


def test_an_exiting_broker_is_reported_with_its_exit_code_not_as_not_running() -> None:
    """The race behind a flaky "is not running before registering": a process whose command line
    is already gone but which is not reaped yet. Asked with a wait, the runner gets its code."""
    from devcluster.processes import Processes

    procs = Processes()
    pid = procs.track(
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3); raise SystemExit(3)"])
    )
    assert procs.exit_code(pid) is None  # still running: no code without waiting
    assert procs.exit_code(pid, wait_s=10.0) == 3
