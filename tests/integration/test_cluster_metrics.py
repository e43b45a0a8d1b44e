"""Issue 22 item 7: the local runner turns every broker's Prometheus ``/metrics`` on by default.

``floodmark cluster up`` gives broker i a /metrics port from a second block of free loopback
ports (or ``--metrics-base-port + i - 1``), records it in cluster.json and prints each address;
``cluster status`` prints the same addresses, after a restart too. A ``metrics.port`` the user
passes with ``--config`` is theirs: -1 turns /metrics off, 0 lets the broker pick.

The first test runs the real brokers and scrapes them; the others need no broker process.
"""

from __future__ import annotations

import json
import re
import socket
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from cli.main import build_cli
from devcluster.cluster import LocalCluster
from devcluster.errors import ClusterError
from devcluster.ports import PortInUse, free_port_block
from tests.integration.cluster_fixtures import scrape_metrics

pytestmark = pytest.mark.integration

STAND_IN = [sys.executable, str(Path(__file__).with_name("stand_in_broker.py"))]
ACTIVE_CONTROLLER = "kafka_controller_kafkacontroller_activecontrollercount"
ADDRESS = re.compile(r"(http://\S+/metrics)")


def invoke(*args: str) -> Any:
    result = CliRunner().invoke(build_cli(), list(args))
    assert result.exit_code == 0, f"floodmark {' '.join(args)} failed: {result.output}\n{result.stderr}"
    return result


def printed_addresses(text: str) -> dict[int, str]:
    """Broker id -> /metrics address, from `cluster up`'s "broker N metrics: URL" lines."""
    return {int(i): url for i, url in re.findall(r"^broker (\d+) metrics: (http://\S+/metrics)$", text, re.M)}


def status_addresses(data_dir: Path) -> tuple[dict[int, str], dict[int, str | None]]:
    """Broker id -> the address in `cluster status`'s table row, and in `cluster status --json`."""
    text = invoke("cluster", "status", "--data-dir", str(data_dir)).stdout
    rows = {}
    for line in text.splitlines():
        first, *_ = line.split() or [""]
        if first.isdigit() and (found := ADDRESS.search(line)):
            rows[int(first)] = found.group(1)
    report = json.loads(invoke("cluster", "status", "--data-dir", str(data_dir), "--json").stdout)
    return rows, {b["id"]: b["metrics"] for b in report["brokers"]}


@pytest.mark.timeout(240)
def test_cluster_up_and_status_print_every_brokers_metrics_address(cluster_dir: Path) -> None:
    base = free_port_block(3)
    up = invoke(
        "cluster", "up", "--brokers", "3", "--data-dir", str(cluster_dir),
        "--zookeeper-port", str(base - 1), "--base-port", str(base), "--timeout", "90",
    )  # fmt: skip
    addresses = printed_addresses(up.stdout)
    assert sorted(addresses) == [1, 2, 3], up.stdout
    ports = {int(url.rsplit(":", 1)[1].split("/")[0]) for url in addresses.values()}
    assert len(ports) == 3 and not ports & {base - 1, base, base + 1, base + 2}

    scraped = {i: scrape_metrics(url) for i, url in addresses.items()}
    assert all(ACTIVE_CONTROLLER in metrics for metrics in scraped.values())
    assert sum(metrics[ACTIVE_CONTROLLER] for metrics in scraped.values()) == 1
    assert all("kafka_server_replicamanager_partitioncount" in metrics for metrics in scraped.values())

    assert status_addresses(cluster_dir) == (addresses, addresses)

    # recorded in cluster.json: status prints them while stopped, and up serves them again
    invoke("cluster", "down", "--data-dir", str(cluster_dir))
    assert status_addresses(cluster_dir) == (addresses, addresses)
    again = invoke("cluster", "up", "--brokers", "3", "--data-dir", str(cluster_dir), "--timeout", "90")
    assert printed_addresses(again.stdout) == addresses
    assert sum(scrape_metrics(url)[ACTIVE_CONTROLLER] for url in addresses.values()) == 1


@pytest.mark.timeout(120)
def test_metrics_base_port_and_the_users_metrics_port_are_respected(tmp_path: Path) -> None:
    base = free_port_block(6)
    ports = {"zookeeper_port": base - 1, "base_port": base}

    # --metrics-base-port: broker i on base + i - 1, in server.properties and the state file
    chosen = LocalCluster(tmp_path / "chosen", broker_command=STAND_IN)
    chosen.state = chosen._new_state(3, base - 1, base, {}, metrics_base_port=base + 3)
    assert chosen.metrics_addresses() == {i: f"http://127.0.0.1:{base + 2 + i}/metrics" for i in (1, 2, 3)}
    for i in (1, 2, 3):
        assert f"metrics.port={base + 2 + i}" in Path(chosen.state.brokers[i].config).read_text().splitlines()
    with pytest.raises(
        ClusterError, match="metrics ports .* collide with the ZooKeeper, broker or KAFKA listener ports"
    ):
        LocalCluster(tmp_path / "clash").up(3, **ports, metrics_base_port=base + 1)

    # the user's metrics.port: -1 is off, 0 is the broker's pick; one fixed port for three brokers is refused
    off = LocalCluster(tmp_path / "off", broker_command=STAND_IN)
    off.state = off._new_state(3, base - 1, base, {"metrics.port": "-1"})
    off._save()
    assert off.metrics_addresses() == {1: None, 2: None, 3: None}
    assert "metrics.port=-1" in Path(off.state.brokers[1].config).read_text().splitlines()
    status = invoke("cluster", "status", "--data-dir", str(tmp_path / "off")).stdout
    assert "metrics" in status and "http://" not in status
    assert [line.split()[-2] for line in status.splitlines()[-3:]] == ["off"] * 3  # then the disk

    picked = LocalCluster(tmp_path / "picked", broker_command=STAND_IN)
    picked.state = picked._new_state(1, base - 1, base, {"metrics.port": "0"})
    props = Path(picked.state.brokers[1].config).read_text().splitlines()
    assert props.count("metrics.port=0") == 1 and picked.metrics_addresses() == {1: None}
    with pytest.raises(ClusterError, match=r"metrics.port=9999 gives all 3 brokers the same loopback port"):
        LocalCluster(tmp_path / "same").up(3, **ports, overrides={"metrics.port": "9999"})
    with pytest.raises(ClusterError, match="--config metrics.port and --metrics-base-port are both set"):
        LocalCluster(tmp_path / "both").up(
            1, **ports, overrides={"metrics.port": "0"}, metrics_base_port=base + 3
        )


@pytest.mark.timeout(60)
def test_up_refuses_a_metrics_port_in_use(tmp_path: Path) -> None:
    base = free_port_block(4)
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", base + 3))
        squatter.listen()
        runner = LocalCluster(tmp_path / "cluster", broker_command=STAND_IN)
        with pytest.raises(PortInUse, match=rf"port {base + 3} .*broker 2's /metrics.* already in use"):
            runner.up(2, zookeeper_port=base - 1, base_port=base, metrics_base_port=base + 2)
    assert runner.state is not None and runner.state.zookeeper.pid is None
