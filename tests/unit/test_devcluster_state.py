"""The local runner's KAFKA listeners without processes (devcluster/state.py, devcluster/ports.py,
devcluster/launch.py, cli/cluster.py): every broker gets a second named listener (KIP-103),
``KAFKA``, on a port of its own block, recorded in cluster.json and written into its
server.properties; ``cluster up`` and ``cluster status`` print the ``kafka bootstrap servers``; a
state file written before the runner added them still loads, without the line; the port-in-use
check covers them. Starting real processes with them: tests/integration/test_local_cluster.py.
"""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.cluster import format_status
from cli.main import build_cli
from devcluster.cluster import LocalCluster
from devcluster.errors import ClusterError
from devcluster.launch import Launcher
from devcluster.ports import PortInUse, bindable, free_block
from devcluster.processes import Processes
from devcluster.state import ClusterState, new_state, read_state, render_properties, write_state

COMMAND = [sys.executable, "-c", "pass"]  # never started here


def props(path: str) -> dict[str, str]:
    lines = Path(path).read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line and not line.startswith("#"))


def three_brokers(data_dir: Path, **kwargs: int) -> ClusterState:
    base = free_block(4) + 1
    return new_state(data_dir, 3, base - 1, base, {}, COMMAND, **kwargs)


def test_each_broker_gets_a_kafka_port_from_a_block_of_its_own(tmp_path: Path) -> None:
    state = three_brokers(tmp_path)
    kafka = [state.brokers[i].kafka_port for i in (1, 2, 3)]
    assert kafka == list(range(kafka[0], kafka[0] + 3))
    others = {state.zookeeper.port, *(b.port for b in state.brokers.values())}
    others |= {b.metrics_port for b in state.brokers.values()}
    assert not set(kafka) & others and None not in others
    assert state.kafka_bootstrap == ",".join(f"127.0.0.1:{port}" for port in kafka)
    for broker in state.brokers.values():
        listeners = f"PLAINTEXT://127.0.0.1:{broker.port},KAFKA://127.0.0.1:{broker.kafka_port}"
        assert props(broker.config)["listeners"] == listeners
        assert "advertised.listeners" not in props(broker.config)  # = listeners, both of them

    write_state(tmp_path / "cluster.json", state)
    doc = json.loads((tmp_path / "cluster.json").read_text())
    assert doc["kafka_bootstrap"] == state.kafka_bootstrap
    assert [doc["brokers"][str(i)]["kafka_port"] for i in (1, 2, 3)] == kafka
    again = read_state(tmp_path / "cluster.json")
    assert again is not None and again.kafka_bootstrap == state.kafka_bootstrap
    assert LocalCluster(tmp_path).kafka_bootstrap_servers == state.kafka_bootstrap


def test_the_kafka_listeners_default_block_is_a_hundred_above_the_brokers(tmp_path: Path) -> None:
    """A fixed default (the README's tour says kcat -b 127.0.0.1:9192): 9192.. beside 9092.., and a
    free block elsewhere, not a failed start, when one of those ports is busy."""
    base = 0
    for _ in range(50):
        base = free_block(4) + 1
        if all(map(bindable, range(base + 100, base + 103))):
            break
    state = new_state(tmp_path / "a", 3, base - 1, base, {}, COMMAND)
    assert [b.kafka_port for b in state.brokers.values()] == [base + 100, base + 101, base + 102]
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", base + 101))
        moved = new_state(tmp_path / "b", 3, base - 1, base, {}, COMMAND)
    kafka = [b.kafka_port for b in moved.brokers.values()]
    assert base + 101 not in kafka and kafka == list(range(kafka[0], kafka[0] + 3))


def test_kafka_base_port_is_the_users_and_must_not_collide(tmp_path: Path) -> None:
    base = free_block(10) + 1
    state = new_state(tmp_path / "a", 3, base - 1, base, {}, COMMAND, kafka_base_port=base + 6)
    assert [b.kafka_port for b in state.brokers.values()] == [base + 6, base + 7, base + 8]
    assert not {b.metrics_port for b in state.brokers.values()} & {base + 6, base + 7, base + 8}

    with pytest.raises(ClusterError, match=r"KAFKA listener ports .* collide with the ZooKeeper, broker"):
        new_state(tmp_path / "b", 3, base - 1, base, {}, COMMAND, kafka_base_port=base + 2)
    with pytest.raises(ClusterError, match=r"metrics ports .* collide with the ZooKeeper, broker or KAFKA"):
        new_state(
            tmp_path / "c",
            3,
            base - 1,
            base,
            {},
            COMMAND,
            metrics_base_port=base + 3,
            kafka_base_port=base + 5,
        )
    with pytest.raises(ClusterError, match=r"KAFKA listener ports 65534-65536 run past 65535"):
        new_state(tmp_path / "d", 3, base - 1, base, {}, COMMAND, kafka_base_port=65534)
    # a fixed metrics.port of the user's (one broker: allowed on loopback) is avoided too
    fixed = new_state(tmp_path / "e", 1, base - 1, base, {"metrics.port": str(base + 1)}, COMMAND)
    assert fixed.brokers[1].kafka_port not in (base - 1, base, base + 1)


def test_server_properties_with_the_kafka_listener(tmp_path: Path) -> None:
    text = render_properties(2, 9093, tmp_path, 2181, {}, host="10.1.2.2", kafka_port=9193)
    assert "listeners=PLAINTEXT://10.1.2.2:9093,KAFKA://10.1.2.2:9193" in text.splitlines()
    assert (
        "listeners=PLAINTEXT://127.0.0.1:9093" in render_properties(2, 9093, tmp_path, 2181, {}).splitlines()
    )


def older_state(data_dir: Path) -> ClusterState:
    """A stopped cluster as the runner wrote it before KAFKA listeners: no kafka_port, no
    kafka_bootstrap in cluster.json, one listener in each server.properties."""
    state = three_brokers(data_dir)
    doc = state.to_json()
    del doc["kafka_bootstrap"]
    for broker in doc["brokers"].values():
        del broker["kafka_port"]
    (data_dir / "cluster.json").write_text(json.dumps(doc))
    for broker in state.brokers.values():
        text = Path(broker.config).read_text().replace(f",KAFKA://127.0.0.1:{broker.kafka_port}", "")
        Path(broker.config).write_text(text)
    return state


def test_a_state_file_without_kafka_ports_still_loads_and_prints_no_kafka_line(tmp_path: Path) -> None:
    state = older_state(tmp_path)
    loaded = read_state(tmp_path / "cluster.json")
    assert loaded is not None and loaded.bootstrap == state.bootstrap
    assert loaded.kafka_bootstrap is None and all(b.kafka_port is None for b in loaded.brokers.values())
    with pytest.raises(ClusterError, match="was set up without KAFKA listeners"):
        LocalCluster(tmp_path).kafka_bootstrap_servers  # noqa: B018

    result = CliRunner().invoke(build_cli(), ["cluster", "status", "--data-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert f"bootstrap   {state.bootstrap}" in result.stdout.splitlines()
    assert "kafka bootstrap servers" not in result.stdout
    report = json.loads(
        CliRunner().invoke(build_cli(), ["cluster", "status", "--data-dir", str(tmp_path), "--json"]).stdout
    )
    assert report["kafka_bootstrap"] is None and {b["kafka_port"] for b in report["brokers"]} == {None}

    write_state(tmp_path / "cluster.json", loaded)  # saved again by a newer runner: still none
    assert json.loads((tmp_path / "cluster.json").read_text())["kafka_bootstrap"] is None


def test_status_prints_the_kafka_bootstrap_servers_after_the_bootstrap_line(tmp_path: Path) -> None:
    state = three_brokers(tmp_path)
    write_state(tmp_path / "cluster.json", state)
    report = LocalCluster.load(tmp_path).status()
    assert report["kafka_bootstrap"] == state.kafka_bootstrap
    assert [b["kafka_port"] for b in report["brokers"]] == [state.brokers[i].kafka_port for i in (1, 2, 3)]
    lines = format_status(report)
    at = lines.index(f"bootstrap   {state.bootstrap}")
    assert lines[at + 1] == f"kafka bootstrap servers: {state.kafka_bootstrap}"


def test_the_port_check_covers_the_kafka_listener(tmp_path: Path) -> None:
    state = three_brokers(tmp_path)
    broker = state.brokers[2]
    launcher = Launcher(Processes(), lambda _: None)
    launcher.check_ports(state, state.brokers.values(), zookeeper=True)
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", broker.kafka_port))
        squatter.listen()
        with pytest.raises(PortInUse, match=rf"port {broker.kafka_port} .*broker 2's KAFKA listener"):
            launcher.check_ports(state, [broker], zookeeper=False)


def test_a_port_still_held_for_a_moment_is_waited_for_and_one_held_longer_is_in_use() -> None:
    """A restart waits (bounded) for its old process's listener to go; a fresh start does not."""
    import threading

    from devcluster.ports import check_port_free

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    with pytest.raises(PortInUse):
        check_port_free(port, "broker 2")  # no wait: at once
    threading.Timer(0.3, listener.close).start()
    check_port_free(port, "broker 2", wait_s=5.0)  # freed after 0.3 s: no error
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen()
    try:
        with pytest.raises(PortInUse, match="already in use"):
            check_port_free(held.getsockname()[1], "broker 2", wait_s=0.2)
    finally:
        held.close()
