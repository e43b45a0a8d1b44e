"""The docker-compose cluster (SPEC 10): the file passes `docker-compose config`, and the broker
settings it passes are valid broker configuration once the image's entrypoint renders them.

There is no Docker engine on these machines, so the containers never run here; what can be
checked without one is checked for real: the compose tool's own validation, and the real
entrypoint script rendering a server.properties that the real BrokerConfig accepts.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
import yaml

from broker.config import BrokerConfig

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
ENTRYPOINT = ROOT / "docker" / "broker-entrypoint.sh"
COMPOSE_SH = ROOT / "docker" / "compose.sh"


def compose_config() -> dict:
    tool = shutil.which("docker-compose")
    assert tool, "docker-compose is missing: `make setup` installs Debian's docker-compose"
    done = subprocess.run(
        [tool, "-f", str(COMPOSE), "config"], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    return yaml.safe_load(done.stdout)


def brokers(config: dict) -> dict[str, dict]:
    return {name: svc for name, svc in config["services"].items() if name.startswith("broker")}


def test_compose_validates_and_has_zookeeper_three_brokers_and_a_client_profile():
    config = compose_config()
    services = config["services"]
    assert services["zookeeper"]["image"].startswith("zookeeper:3.8")
    assert sorted(brokers(config)) == ["broker1", "broker2", "broker3"]
    for name, svc in brokers(config).items():
        assert svc["depends_on"]["zookeeper"]["condition"] == "service_healthy"
        assert "healthcheck" in svc
        assert any(v["target"] == "/var/lib/floodmark" for v in _volumes(svc)), name
        assert svc["container_name"] == f"floodmark-broker-{name[-1]}"  # chaos/faults.py DockerBackend
    assert "client" in services["client"]["profiles"]
    assert config["networks"]["floodmark"]["name"] == "floodmark"
    assert {f"broker{i}-data" for i in (1, 2, 3)} <= set(config["volumes"])


def _ports(svc: dict) -> list[dict]:
    """docker-compose config's long port syntax, or "published:target" strings."""
    out = []
    for port in svc.get("ports", []):
        if isinstance(port, dict):
            out.append(port)
        else:
            published, _, target = str(port).rpartition(":")
            out.append({"published": published, "target": target})
    return out


def test_the_client_profile_bootstraps_from_the_internal_listeners():
    env = compose_config()["services"]["client"]["environment"]
    assert env["FLOODMARK_BOOTSTRAP"] == "broker1:19092,broker2:19092,broker3:19092"


def _volumes(svc: dict) -> list[dict]:
    return [v if isinstance(v, dict) else {"target": v.split(":")[1]} for v in svc.get("volumes", [])]


def render(svc: dict, tmp_path: Path) -> Path:
    """The server.properties the real entrypoint renders from a service's environment, kept by a
    stand-in for floodmark-broker instead of starting a broker."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    keep = tmp_path / "server.properties"
    stub = bin_dir / "floodmark-broker"
    stub.write_text(f'#!/bin/sh\ncp "$2" {keep}\n')
    stub.chmod(stub.stat().st_mode | stat.S_IEXEC)
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", **{k: str(v) for k, v in svc["environment"].items()}}
    done = subprocess.run(["sh", str(ENTRYPOINT)], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return keep


@pytest.mark.parametrize("service", ["broker1", "broker2", "broker3"])
def test_the_entrypoint_renders_valid_broker_config_from_the_compose_environment(service, tmp_path):
    svc = compose_config()["services"][service]
    keep = render(svc, tmp_path)
    config = BrokerConfig.from_file(keep)  # raises naming any unknown key or bad value
    assert config.broker_id == int(svc["environment"]["FLOODMARK_BROKER_ID"])
    assert config["zookeeper.connect"] == "zookeeper:2181"
    assert config["min.insync.replicas"] == 2 and config["default.replication.factor"] == 3
    assert config["unclean.leader.election.enable"] is False
    # KIP-103: INTERNAL on the compose network (advertised as the service name, used between
    # brokers), EXTERNAL and KAFKA for the host (advertised as 127.0.0.1 by default, ports published)
    bound = {e.listener_name: e for e in config.listeners}
    advertised = {e.listener_name: e for e in config.advertised_listeners}
    assert sorted(bound) == sorted(advertised) == ["EXTERNAL", "INTERNAL", "KAFKA"]
    assert (bound["INTERNAL"].host, bound["INTERNAL"].port) == ("0.0.0.0", 19092)
    assert (advertised["INTERNAL"].host, advertised["INTERNAL"].port) == (service, 19092)
    external_port = 29091 + int(service[-1])
    assert (bound["EXTERNAL"].host, bound["EXTERNAL"].port) == ("0.0.0.0", external_port)
    assert (advertised["EXTERNAL"].host, advertised["EXTERNAL"].port) == ("127.0.0.1", external_port)
    assert config.inter_broker_listener_name == "INTERNAL"
    published = {(int(p["published"]), int(p["target"])) for p in _ports(svc)}
    assert (external_port, external_port) in published
    kafka_port = 29191 + int(service[-1])
    assert (bound["KAFKA"].host, bound["KAFKA"].port) == ("0.0.0.0", kafka_port)
    assert (advertised["KAFKA"].host, advertised["KAFKA"].port) == ("127.0.0.1", kafka_port)
    assert (kafka_port, kafka_port) in published
    assert 19092 not in {target for _, target in published}, "INTERNAL stays on the compose network"
    assert (config["metrics.port"], config["metrics.port"]) in published
    rendered = {line.split("=", 1)[0] for line in keep.read_text().splitlines() if "=" in line}
    passed = {
        k.removeprefix("FLOODMARK_CONF_").lower().replace("_", ".")
        for k in svc["environment"]
        if k.startswith("FLOODMARK_CONF_")
    }
    assert passed <= rendered


def test_every_broker_serves_metrics_on_its_own_published_port(tmp_path):
    """Issue 22 item 7: /metrics is on for every broker (metrics.port is off, -1, by default), each
    on its own port, published as the same port on the host (http://127.0.0.1:2910N/metrics), and
    bound on every interface (the broker binds its first listener's host), so the host reaches it."""
    services = brokers(compose_config())
    metrics_ports = {}
    for name, svc in services.items():
        config = BrokerConfig.from_file(render(svc, tmp_path / name))
        port = config["metrics.port"]
        assert port == 29100 + int(name[-1]), name
        assert (port, port) in {(int(p["published"]), int(p["target"])) for p in _ports(svc)}, name
        assert config.listeners[0].host == "0.0.0.0", name
        metrics_ports[name] = port
    assert len(set(metrics_ports.values())) == len(services) == 3
    header = COMPOSE.read_text().split("version:", 1)[0]
    assert all(f"127.0.0.1:{port}/metrics" in header for port in metrics_ports.values())


def test_every_broker_publishes_its_kafka_listener_and_compose_up_prints_them(tmp_path):
    """Each broker's KAFKA listener (Kafka's wire protocol, for kcat and confluent-kafka) has its own
    port, 2919N, published as the same port on the host and advertised as 127.0.0.1 (or
    FLOODMARK_EXTERNAL_HOST), so a client on the host bootstraps from 127.0.0.1:29192..29194; no port
    is published twice; `docker/compose.sh up` prints those as "kafka bootstrap servers: ...", and
    still ends with the CLI's "bootstrap servers: ..." line."""
    services = brokers(compose_config())
    kafka = {}
    for name, svc in services.items():
        config = BrokerConfig.from_file(render(svc, tmp_path / name))
        (endpoint,) = [e for e in config.advertised_listeners if e.listener_name == "KAFKA"]
        assert (endpoint.host, endpoint.port) == ("127.0.0.1", 29191 + int(name[-1])), name
        # the broker's default listener.wire.protocol.map: the listener named KAFKA speaks Kafka's protocol
        wires = {"INTERNAL": "FLOODMARK", "EXTERNAL": "FLOODMARK", "KAFKA": "KAFKA"}
        assert config.listener_wire_protocols == wires, name
        kafka[name] = endpoint.port
    published = [int(p["published"]) for svc in services.values() for p in _ports(svc)]
    assert len(published) == len(set(published)) == 9
    bootstrap = ",".join(f"127.0.0.1:{kafka[name]}" for name in sorted(kafka))
    assert bootstrap == "127.0.0.1:29192,127.0.0.1:29193,127.0.0.1:29194"
    assert bootstrap in COMPOSE.read_text().split("version:", 1)[0]
    script = COMPOSE_SH.read_text()
    kafka_line = 'echo "kafka bootstrap servers: $KAFKA_BOOTSTRAP"'
    assert "KAFKA_BOOTSTRAP=$EXTERNAL_HOST:29192,$EXTERNAL_HOST:29193,$EXTERNAL_HOST:29194" in script
    assert script.index(kafka_line) < script.index('echo "bootstrap servers: $BOOTSTRAP"')


def test_compose_publishes_no_port_of_the_local_runners_defaults():
    """The compose cluster and `floodmark cluster up` can run on one host: compose's published
    ports (2909N, 2919N, 2910N) are clear of the local runner's defaults (ZooKeeper 2181, brokers
    9092.., their KAFKA listeners 9192..: base-port + 100)."""
    from devcluster.state import KAFKA_PORT_OFFSET

    published = {int(p["published"]) for svc in compose_config()["services"].values() for p in _ports(svc)}
    runner_defaults = {
        2181,
        *range(9092, 9092 + 8),
        *range(9092 + KAFKA_PORT_OFFSET, 9092 + KAFKA_PORT_OFFSET + 8),
    }
    assert published and not published & runner_defaults, sorted(published & runner_defaults)
