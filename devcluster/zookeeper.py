"""The local cluster's ZooKeeper: a real ``ZooKeeperServerMain`` process from the Debian
``zookeeper`` package's jars, and the runner's read-only views of it (``/brokers/ids``,
``/controller``, ``/controller_epoch``: the znodes Kafka's ``KafkaZkClient`` reads for the same
questions; docs/architecture.md).

Used by the local cluster runner and by the test fixtures alike; never a fake.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devcluster.errors import ClusterError
from devcluster.ports import HOST
from zk.data import (
    decode_controller,
    decode_controller_epoch,
    decode_partition_state,
    decode_topic_assignment,
)
from zk.paths import (
    BROKER_IDS_PATH,
    BROKER_TOPICS_PATH,
    CONTROLLER_EPOCH_PATH,
    CONTROLLER_PATH,
    partition_state_path,
    topic_path,
)

JAR_DIR = Path("/usr/share/java")
JARS = (
    "zookeeper.jar",
    "zookeeper-jute.jar",
    "slf4j-api.jar",
    "slf4j-simple.jar",
    "netty-handler.jar",
    "netty-transport.jar",
    "netty-common.jar",
    "netty-buffer.jar",
    "netty-codec.jar",
    "netty-resolver.jar",
    "netty-transport-native-epoll.jar",
    "netty-transport-native-unix-common.jar",
)
INSTALL_HINT = (
    "ZooKeeper's jars are missing from /usr/share/java: run `apt-get install -y zookeeper` (Debian package)"
)


class ZooKeeperUnavailable(RuntimeError):
    pass


def classpath() -> str:
    missing = [jar for jar in JARS if not (JAR_DIR / jar).exists()]
    if missing:
        raise ZooKeeperUnavailable(f"{INSTALL_HINT}; missing {', '.join(missing)}")
    return ":".join(str(JAR_DIR / jar) for jar in JARS)


#: ZooKeeper's tick (its command line's third argument; 3,000 ms when not given). A session
#: expires at the first tick after its timeout, so a dead broker's session ended 6 to 9 s after
#: its death with a 6 s timeout and the default tick, and 6 to 7 s with this one. Sessions may
#: last 2 to 20 ticks: 2 s to 20 s, which holds Kafka's default zookeeper.session.timeout.ms (18 s).
TICK_TIME_MS = 1000


def command(port: int, data_dir: Path) -> list[str]:
    return [
        "java",
        "-Xmx256m",
        "-XX:+UseSerialGC",
        "-Dzookeeper.admin.enableServer=false",
        "-Dzookeeper.4lw.commands.whitelist=*",
        "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
        "-cp",
        classpath(),
        "org.apache.zookeeper.server.ZooKeeperServerMain",
        str(port),
        str(data_dir),
        str(TICK_TIME_MS),
    ]


def ruok(host: str, port: int, timeout: float = 1.0) -> bool:
    """True when the server is serving sessions. ZooKeeper's ``ruok`` answers ``imok`` as soon as
    its port is open, before its database is loaded, and a session opened then is refused ("ZooKeeperServer
    not running") and retried with kazoo's growing backoff; ``srvr`` answers "This ZooKeeper
    instance is not currently serving requests" until the server really serves."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(b"srvr")
            answer = b""
            while chunk := sock.recv(4096):
                answer += chunk
            return answer.startswith(b"Zookeeper version")
    except OSError:
        return False


@dataclass
class ZooKeeperProcess:
    port: int
    data_dir: Path
    process: subprocess.Popen | None = None

    @property
    def connect_string(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0, log_file: Path | None = None) -> ZooKeeperProcess:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        out = open(log_file or self.data_dir / "zookeeper.out", "ab")  # noqa: SIM115 - owned by the child
        # The command line sets ZooKeeper's JVM options; a JAVA_TOOL_OPTIONS meant for another JVM
        # (Spark's, say) would be picked up too and can stop it from starting.
        env = {k: v for k, v in os.environ.items() if k != "JAVA_TOOL_OPTIONS"}
        self.process = subprocess.Popen(
            command(self.port, self.data_dir),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
        )
        out.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ZooKeeperUnavailable(
                    f"ZooKeeper exited with {self.process.returncode}; see {self.data_dir}"
                )
            if ruok("127.0.0.1", self.port):
                return self
            time.sleep(0.1)
        self.stop()
        raise ZooKeeperUnavailable(f"ZooKeeper did not answer ruok on port {self.port} within {timeout}s")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# ---------------------------------------------------------------------------------------------
# What the runner reads from ZooKeeper
# ---------------------------------------------------------------------------------------------


@contextmanager
def zk_session(port: int, timeout: float = 30.0) -> Iterator[Any]:
    from kazoo.client import KazooClient
    from kazoo.retry import KazooRetry

    # connection attempts at most a second apart (kazoo's default backoff grows to an hour)
    retry = KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=1.0)
    client = KazooClient(hosts=f"{HOST}:{port}", timeout=timeout, connection_retry=retry)
    try:
        client.start(timeout)
    except Exception as exc:  # kazoo raises its own timeout class
        client.close()
        raise ClusterError(f"cannot open a ZooKeeper session on {HOST}:{port}: {exc}") from None
    try:
        yield client
    finally:
        client.stop()
        client.close()


def registered_ids(client: Any) -> set[int]:
    from kazoo.exceptions import NoNodeError

    try:
        return {int(child) for child in client.get_children(BROKER_IDS_PATH) if child.isdigit()}
    except NoNodeError:
        return set()


def registration_owners(client: Any) -> dict[int, int]:
    """Each registered broker id -> the session that owns its ephemeral ``/brokers/ids/<id>``: a
    broker SIGKILLed a moment ago is still "registered" under its dead session until that expires."""
    from kazoo.exceptions import NoNodeError

    owners: dict[int, int] = {}
    for broker_id in registered_ids(client):
        with suppress(NoNodeError):
            owners[broker_id] = client.exists(f"{BROKER_IDS_PATH}/{broker_id}").ephemeralOwner
    return owners


def controller_of(client: Any) -> tuple[int | None, int | None]:
    """(controller broker id, controller epoch) as ZooKeeper holds them; None where missing."""
    from kazoo.exceptions import NoNodeError

    controller_id = epoch = None
    with suppress(NoNodeError, ValueError, KeyError, TypeError):
        controller_id = decode_controller(client.get(CONTROLLER_PATH)[0])
    with suppress(NoNodeError, ValueError):
        epoch = decode_controller_epoch(client.get(CONTROLLER_EPOCH_PATH)[0])
    return controller_id, epoch


def out_of_sync(client: Any, broker_id: int) -> list[str]:
    """The partitions (``topic-p``) that list ``broker_id`` as a replica but not in their ISR,
    as ZooKeeper holds them (``/brokers/topics/<t>`` and each partition's state znode); a
    partition without a state yet counts as out of sync."""
    from kazoo.exceptions import NoNodeError

    missing: list[str] = []
    try:
        topics = sorted(client.get_children(BROKER_TOPICS_PATH))
    except NoNodeError:
        return missing
    for topic in topics:
        try:
            assignment = decode_topic_assignment(client.get(topic_path(topic))[0])
        except (NoNodeError, ValueError, KeyError, TypeError):
            continue  # being deleted, or being written
        for partition, replicas in sorted(assignment.items()):
            if broker_id not in replicas:
                continue
            try:
                data, stat = client.get(partition_state_path(topic, partition))
                isr = decode_partition_state(data, stat.version).leader_and_isr.isr
            except (NoNodeError, ValueError, KeyError, TypeError):
                isr = ()
            if broker_id not in isr:
                missing.append(f"{topic}-{partition}")
    return missing
