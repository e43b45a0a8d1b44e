"""Named listeners (KIP-103) on real broker processes and sockets (docs/design.md "Listeners
(KIP-103) and the compose cluster").

Three brokers, each with INTERNAL (advertised as 127.0.0.1, the inter-broker listener) and
EXTERNAL (advertised as ``localhost``) on 127.0.0.1, different ports; brokers 1 and 2 also have
EXTRA, which broker 3 lacks. Checked: /brokers/ids/<id> holds every endpoint (BrokerIdZNode v4);
a Metadata request answers with the endpoints of the listener it arrived on; replication and the
controller's requests use INTERNAL only (acks=all with RF 3 succeeds, the ISR is full, and no
broker holds a connection to another's EXTERNAL or EXTRA port); on EXTRA, broker 3 is left out
and a partition it leads is LEADER_NOT_AVAILABLE. ZooKeeper is the session's real one.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from client.admin import AdminClient, NewTopic
from client.connection import BrokerConnection
from client.protocol.api import ApiKey
from client.protocol.errors import ErrorCode
from client.protocol.records import build_batch
from devcluster.ports import free_port
from devcluster.processes import launch_broker
from devcluster.zookeeper import ZooKeeperProcess
from tests.integration.failover_helpers import eventually
from zk.paths import BROKER_IDS_PATH, broker_id_path

HOST = "127.0.0.1"
BROKERS = (1, 2, 3)
PROTOCOL_MAP = "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT,EXTRA:PLAINTEXT"

pytestmark = pytest.mark.timeout(120)


@dataclass
class Broker:
    id: int
    ports: dict[str, int]  # listener name -> port, all bound on 127.0.0.1
    process: subprocess.Popen | None = None

    def advertised(self) -> dict[str, tuple[str, int]]:
        hosts = {"INTERNAL": HOST, "EXTERNAL": "localhost", "EXTRA": HOST}
        return {name: (hosts[name], port) for name, port in self.ports.items()}


def properties(broker: Broker, zk_connect: str, log_dir: Path) -> str:
    advertised = broker.advertised()
    props = {
        "broker.id": broker.id,
        "listeners": ",".join(f"{name}://{HOST}:{port}" for name, port in broker.ports.items()),
        "advertised.listeners": ",".join(f"{n}://{h}:{p}" for n, (h, p) in advertised.items()),
        "listener.security.protocol.map": PROTOCOL_MAP,
        "inter.broker.listener.name": "INTERNAL",
        "log.dirs": log_dir,
        "zookeeper.connect": zk_connect,
        "zookeeper.session.timeout.ms": 6000,
        "num.network.threads": 2,
        "num.io.threads": 4,
        "controlled.shutdown.enable": "false",
    }
    return "".join(f"{key}={value}\n" for key, value in props.items())


@pytest.fixture(scope="module")
def cluster(zookeeper: ZooKeeperProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    data = tmp_path_factory.mktemp("listeners")
    chroot = "/t_listeners"
    zk = KazooClient(zookeeper.connect_string)
    zk.start(10)
    if zk.exists(chroot):
        zk.delete(chroot, recursive=True)
    zk.ensure_path(chroot)
    zk.stop()
    zk.close()
    zk_connect = zookeeper.connect_string + chroot
    brokers = {
        i: Broker(i, {name: free_port() for name in ("INTERNAL", "EXTERNAL", "EXTRA")[: 3 if i < 3 else 2]})
        for i in BROKERS
    }
    assert len({p for b in brokers.values() for p in b.ports.values()}) == 8, "free_port repeated a port"
    client = KazooClient(zk_connect)
    client.start(10)
    try:
        for broker in brokers.values():
            config = data / f"broker-{broker.id}.properties"
            config.write_text(properties(broker, zk_connect, data / f"broker-{broker.id}" / "data"))
            argv = [sys.executable, "-m", "broker", "--config", str(config)]
            broker.process = launch_broker(argv, data / f"broker-{broker.id}" / "out.log", "test_listeners")
        deadline = time.monotonic() + 30
        while sorted(
            int(c) for c in (client.get_children(BROKER_IDS_PATH) if client.exists(BROKER_IDS_PATH) else [])
        ) != list(BROKERS):
            exited = {b.id: b.process.poll() for b in brokers.values() if b.process.poll() is not None}
            assert not exited and time.monotonic() < deadline, (
                f"brokers not all registered (exited: {exited}):\n"
                + "\n".join((data / f"broker-{b}" / "out.log").read_text()[-2000:] for b in BROKERS)
            )
            time.sleep(0.2)
        yield {"brokers": brokers, "zk": client}
    finally:
        client.stop()
        client.close()
        for broker in brokers.values():
            if broker.process is not None and broker.process.poll() is None:
                broker.process.send_signal(signal.SIGINT)  # a clean stop, no controlled shutdown
        for broker in brokers.values():
            if broker.process is not None:
                try:
                    broker.process.wait(15)
                except subprocess.TimeoutExpired:
                    broker.process.kill()
                    broker.process.wait(5)


async def metadata(broker: Broker, listener: str, topics: list[str] | None = None) -> dict:
    host, port = broker.advertised()[listener]
    conn = await BrokerConnection.open(host, port, "test-listeners")
    try:
        return await conn.request(ApiKey.METADATA, {"topics": topics}, timeout=10)
    finally:
        conn.close()


def test_registration_holds_every_advertised_endpoint(cluster: dict) -> None:
    for broker in cluster["brokers"].values():
        reg = json.loads(cluster["zk"].get(broker_id_path(broker.id))[0])
        assert reg["endpoints"] == [f"{n}://{h}:{p}" for n, (h, p) in broker.advertised().items()]
        assert reg["listener_security_protocol_map"] == {name: "PLAINTEXT" for name in broker.ports}
        assert (reg["host"], reg["port"], reg["version"]) == (None, -1, 4)  # no PLAINTEXT listener


async def test_metadata_answers_with_the_endpoints_of_the_listener_it_arrived_on(cluster: dict) -> None:
    brokers: dict[int, Broker] = cluster["brokers"]
    for listener in ("INTERNAL", "EXTERNAL"):
        for asked in brokers.values():

            async def every_broker_seen(asked: Broker = asked, listener: str = listener) -> dict | None:
                body = await metadata(asked, listener)
                return body if len(body["brokers"]) == len(BROKERS) else None

            body = await eventually(every_broker_seen, f"3 brokers in Metadata on {listener}", timeout=15)
            got = {b["node_id"]: (b["host"], b["port"]) for b in body["brokers"]}
            assert got == {b.id: b.advertised()[listener] for b in brokers.values()}, (listener, asked.id)


def established_remote_ports(pid: int) -> set[int]:
    """Remote ports of the process's established TCP connections (its fds matched to /proc/net/tcp)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "01" and fields[9] in inodes:  # 01: ESTABLISHED
                ports.add(int(fields[2].rsplit(":", 1)[1], 16))
    return ports


async def test_replication_and_the_controller_use_the_inter_broker_listener(cluster: dict) -> None:
    brokers: dict[int, Broker] = cluster["brokers"]
    bootstrap = [f"localhost:{b.ports['EXTERNAL']}" for b in brokers.values()]
    async with AdminClient(bootstrap) as admin:
        await admin.create_topics([NewTopic("replicated", 1, 3, {"min.insync.replicas": "3"})])
        (description,) = await admin.describe_topics(["replicated"])
    partition = description.partitions[0]
    leader = brokers[partition.leader]
    conn = await BrokerConnection.open(*leader.advertised()["EXTERNAL"], "test-listeners")
    try:
        body = {
            "acks": -1,
            "timeout_ms": 15_000,
            "topics": [
                {
                    "topic": "replicated",
                    "partitions": [
                        {"partition": 0, "records": build_batch([(None, b"v", int(time.time() * 1000), [])])}
                    ],
                }
            ],
        }
        response = await conn.request(ApiKey.PRODUCE, body, timeout=25)
    finally:
        conn.close()
    produced = response["topics"][0]["partitions"][0]
    assert produced["error_code"] == ErrorCode.NONE, produced  # all 3 replicas have it: min ISR 3

    async def full_isr() -> list[int] | None:
        body = await metadata(leader, "EXTERNAL", ["replicated"])
        isr = body["topics"][0]["partitions"][0]["isr"]
        return isr if sorted(isr) == list(BROKERS) else None

    await eventually(full_isr, "the ISR of replicated-0 full", timeout=15)
    others = {p for b in brokers.values() for name, p in b.ports.items() if name != "INTERNAL"}
    for broker in brokers.values():
        remote = established_remote_ports(broker.process.pid)
        assert not remote & others, f"broker {broker.id} connected to a non-inter-broker listener"
        if broker is not leader:
            assert leader.ports["INTERNAL"] in remote, f"follower {broker.id} fetches from the leader"


async def test_a_broker_without_the_listener_is_left_out_of_that_listeners_metadata(cluster: dict) -> None:
    brokers: dict[int, Broker] = cluster["brokers"]
    async with AdminClient([f"{HOST}:{brokers[1].ports['INTERNAL']}"]) as admin:
        await admin.create_topics([NewTopic("spread", 3, 1)])

    async def leaders() -> dict[int, int] | None:
        body = await metadata(brokers[1], "INTERNAL", ["spread"])
        parts = {p["partition"]: p["leader"] for p in body["topics"][0]["partitions"]}
        return parts if len(parts) == 3 and all(leader >= 0 for leader in parts.values()) else None

    led = await eventually(leaders, "leaders of spread", timeout=15)
    assert 3 in led.values(), f"broker 3 leads no partition of spread: {led}"
    body = await metadata(brokers[1], "EXTRA", ["spread"])
    assert {b["node_id"]: (b["host"], b["port"]) for b in body["brokers"]} == {
        i: (HOST, brokers[i].ports["EXTRA"]) for i in (1, 2)
    }
    for p in body["topics"][0]["partitions"]:
        if led[p["partition"]] == 3:
            assert (p["error_code"], p["leader"]) == (ErrorCode.LEADER_NOT_AVAILABLE, -1), p
        else:
            assert (p["error_code"], p["leader"]) == (ErrorCode.NONE, led[p["partition"]]), p
