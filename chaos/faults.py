"""The fault vocabulary on two backends (the local runner and docker-compose;
docs/operations.md "Chaos runs and verification", docs/docker.md "Chaos with the docker backend").

Both backends speak the same verbs, so a schedule (``chaos.schedule``) runs on either:

* ``crash`` / ``restart``: SIGKILL a broker, start it again with its data;
* ``pause`` / ``resume``: SIGSTOP / SIGCONT (a GC pause longer than the session timeout);
* ``terminate``: SIGTERM, a controlled shutdown (leaderships move away first), then exit;
* ``isolate`` / ``heal``: cut a broker off the network and reconnect it;
* ``fill_disk`` / ``unfill_disk``: fill a broker's disk (ENOSPC) and free it again;
* ``break_disk`` / ``fix_disk``: make every write to a broker's disk fail with EIO, and stop;
* ``pause_zookeeper`` / ``resume_zookeeper``: SIGSTOP / SIGCONT the ZooKeeper server (local
  backend only: the docker backend refuses it with FaultUnsupported);
* ``limit_open_files`` / ``restore_open_files``: lower a broker's soft RLIMIT_NOFILE to what it
  holds plus a margin, and put it back (chaos/fd_pressure.py). The local backend finds the broker
  by its recorded pid; the docker backend by its container's host pid (``docker inspect``), the
  broker being that process or its child under docker-init, and refuses the fault with
  FaultUnsupported when the engine's processes are not visible from here (a VM, rootless docker).

Disk faults exist on the local backend only, on a cluster started with disk faults
(``devcluster.disk``: a tmpfs and a fault-injecting FUSE filesystem under each broker's log dir);
the docker backend refuses them with FaultUnsupported.

The local backend drives ``devcluster.cluster.LocalCluster`` (processes on this machine; a
network partition needs the brokers in network namespaces: see ``devcluster.netns``); the docker
backend drives the compose cluster's containers with the docker CLI (``docker kill``,
``docker pause``, ``docker stop``, ``docker network disconnect``).
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from chaos.fd_pressure import PROC, FdPressure, child_with
from devcluster.cluster import LocalCluster
from devcluster.processes import broker_marker


class FaultBackend(Protocol):
    name: str

    def broker_ids(self) -> list[int]: ...
    def crash(self, broker_id: int) -> None: ...
    def restart(self, broker_id: int) -> None: ...
    def pause(self, broker_id: int) -> None: ...
    def resume(self, broker_id: int) -> None: ...
    def terminate(self, broker_id: int) -> None: ...
    def isolate(self, broker_id: int) -> None: ...
    def heal(self, broker_id: int) -> None: ...
    def can_partition(self) -> bool: ...
    def fill_disk(self, broker_id: int) -> None: ...
    def unfill_disk(self, broker_id: int) -> None: ...
    def break_disk(self, broker_id: int) -> None: ...
    def fix_disk(self, broker_id: int) -> None: ...
    def can_fault_disks(self) -> bool: ...
    def pause_zookeeper(self) -> None: ...
    def resume_zookeeper(self) -> None: ...
    def limit_open_files(self, broker_id: int) -> dict: ...
    def restore_open_files(self, broker_id: int) -> dict: ...


class FaultUnsupported(RuntimeError):
    pass


class LocalBackend:
    """Faults on a local cluster's broker processes."""

    name = "local"

    def __init__(self, cluster: LocalCluster, isolate: Callable[[int, bool], None] | None = None) -> None:
        self.cluster = cluster
        self._isolate = isolate  # set when the brokers run in network namespaces
        self.fd_pressure = FdPressure(self._broker_pid)

    def broker_ids(self) -> list[int]:
        return sorted(self.cluster._require_state().brokers)

    def crash(self, broker_id: int) -> None:
        self.cluster.kill(broker_id, "KILL")

    def restart(self, broker_id: int) -> None:
        self.cluster.start(broker_id, timeout=90)

    def pause(self, broker_id: int) -> None:
        self.cluster.kill(broker_id, "STOP")

    def resume(self, broker_id: int) -> None:
        self.cluster.kill(broker_id, "CONT")

    def terminate(self, broker_id: int) -> None:
        self.cluster.stop(broker_id, timeout=60)

    def can_partition(self) -> bool:
        return self._isolate is not None

    def isolate(self, broker_id: int) -> None:
        if self._isolate is None:
            raise FaultUnsupported("network partitions need the brokers in network namespaces (run as root)")
        self._isolate(broker_id, True)

    def heal(self, broker_id: int) -> None:
        if self._isolate is not None:
            self._isolate(broker_id, False)

    def can_fault_disks(self) -> bool:
        state = self.cluster.state
        return state is not None and state.disks is not None

    def fill_disk(self, broker_id: int) -> None:
        self._disk(broker_id, "fill")

    def unfill_disk(self, broker_id: int) -> None:
        self._disk(broker_id, "unfill")

    def break_disk(self, broker_id: int) -> None:
        self._disk(broker_id, "break")

    def fix_disk(self, broker_id: int) -> None:
        self._disk(broker_id, "fix")

    def pause_zookeeper(self) -> None:
        self.cluster.pause_zookeeper()

    def resume_zookeeper(self) -> None:
        self.cluster.resume_zookeeper()

    def limit_open_files(self, broker_id: int) -> dict:
        return self.fd_pressure.lower(broker_id)

    def restore_open_files(self, broker_id: int) -> dict:
        return self.fd_pressure.restore(broker_id)

    def _broker_pid(self, broker_id: int) -> int:
        """The broker's recorded pid, when that process is the broker (its command line names
        the broker's config, as devcluster's liveness check asks)."""
        broker = self.cluster._require_state().brokers[broker_id]
        if broker.pid is None or child_with(broker.pid, broker_marker(broker)) != broker.pid:
            raise FaultUnsupported(f"broker {broker_id} is not running")
        return broker.pid

    def _disk(self, broker_id: int, action: str) -> None:
        if not self.can_fault_disks():
            raise FaultUnsupported(
                "disk faults need a cluster started with disk faults (`floodmark cluster up --disk-faults`, root)"
            )
        self.cluster.disk(broker_id, action, restart_hint=False)  # the injector restarts it


Runner = Callable[[Sequence[str]], None]
#: Runs a command and returns its standard output (raises when it fails).
Reader = Callable[[Sequence[str]], str]


def run_checked(argv: Sequence[str]) -> None:
    subprocess.run(list(argv), check=True, capture_output=True, text=True, timeout=120)


def read_checked(argv: Sequence[str]) -> str:
    return subprocess.run(list(argv), check=True, capture_output=True, text=True, timeout=60).stdout


class DockerBackend:
    """Faults on the docker-compose cluster (docker-compose.yml: containers
    ``floodmark-broker-<id>`` on the network ``floodmark``)."""

    name = "docker"

    def __init__(
        self,
        brokers: int = 3,
        network: str = "floodmark",
        run: Runner = run_checked,
        service: str = "broker{}",
        read: Reader = read_checked,
        proc: Path = PROC,
    ) -> None:
        self.brokers = brokers
        self.network = network
        self._run = run
        self._read = read
        self._proc = proc
        self.fd_pressure = FdPressure(self._broker_pid, proc=proc)
        # the compose service name of broker N (`service.format(N)`, as in docker-compose.yml),
        # put back as a network alias when a partition heals
        self.service = service

    @staticmethod
    def container(broker_id: int) -> str:
        return f"floodmark-broker-{broker_id}"

    def broker_ids(self) -> list[int]:
        return list(range(1, self.brokers + 1))

    def crash(self, broker_id: int) -> None:
        self._run(["docker", "kill", "--signal", "KILL", self.container(broker_id)])

    def restart(self, broker_id: int) -> None:
        self._run(["docker", "start", self.container(broker_id)])

    def pause(self, broker_id: int) -> None:
        self._run(["docker", "pause", self.container(broker_id)])

    def resume(self, broker_id: int) -> None:
        self._run(["docker", "unpause", self.container(broker_id)])

    def terminate(self, broker_id: int) -> None:
        self._run(["docker", "stop", "--time", "60", self.container(broker_id)])

    def can_partition(self) -> bool:
        return True

    def isolate(self, broker_id: int) -> None:
        self._run(["docker", "network", "disconnect", self.network, self.container(broker_id)])

    def heal(self, broker_id: int) -> None:
        # `network connect` alone drops the compose service name (brokerN, the host the broker
        # advertises on its INTERNAL listener, which the other brokers use) from the network's
        # embedded DNS; the alias puts it back
        alias = self.service.format(broker_id)
        self._run(["docker", "network", "connect", "--alias", alias, self.network, self.container(broker_id)])

    def log_dirs(self, target: str = "/var/lib/floodmark") -> list[str]:
        """Each broker's log dir as seen from the host: the mountpoint of the named volume mounted
        at ``target`` in its container (the engine's data root; readable as root)."""
        dirs = []
        for broker_id in self.broker_ids():
            done = subprocess.run(
                [
                    "docker",
                    "inspect",
                    "--format",
                    '{{range .Mounts}}{{if eq .Destination "' + target + '"}}{{.Source}}{{end}}{{end}}',
                    self.container(broker_id),
                ],
                capture_output=True,
                text=True,
                timeout=60,
            )
            source = done.stdout.strip()
            if done.returncode != 0 or not source:
                raise RuntimeError(
                    f"no volume at {target} in {self.container(broker_id)}: {done.stderr.strip()}"
                )
            dirs.append(source)
        return dirs

    def can_fault_disks(self) -> bool:
        return False

    def fill_disk(self, broker_id: int) -> None:
        self._no_disk_faults()

    def unfill_disk(self, broker_id: int) -> None:
        self._no_disk_faults()

    def break_disk(self, broker_id: int) -> None:
        self._no_disk_faults()

    def fix_disk(self, broker_id: int) -> None:
        self._no_disk_faults()

    def pause_zookeeper(self) -> None:
        self._no_zookeeper_faults()

    def resume_zookeeper(self) -> None:
        self._no_zookeeper_faults()

    def limit_open_files(self, broker_id: int) -> dict:
        return self.fd_pressure.lower(broker_id)

    def restore_open_files(self, broker_id: int) -> dict:
        return self.fd_pressure.restore(broker_id)

    def _broker_pid(self, broker_id: int) -> int:
        """The host pid of the container's broker: the container's main process (docker-init
        under compose's ``init: true``) or its child whose command line runs floodmark-broker."""
        container = self.container(broker_id)
        pid = int(self._read(["docker", "inspect", "--format", "{{.State.Pid}}", container]).strip() or 0)
        if pid <= 0:
            raise FaultUnsupported(f"{container} is not running")
        if not (self._proc / str(pid)).exists():
            raise FaultUnsupported(
                f"fd-pressure: {container}'s process (host pid {pid}) is not visible from here: the "
                "docker engine runs in another pid namespace (a VM, rootless docker); use --backend local"
            )
        broker = child_with(pid, "floodmark-broker", self._proc)
        if broker is None:
            raise FaultUnsupported(
                f"fd-pressure: no floodmark-broker process in {container} (host pid {pid})"
            )
        return broker

    @staticmethod
    def _no_zookeeper_faults() -> None:
        raise FaultUnsupported(
            "zk-pause signals the ZooKeeper server process, which only the local runner starts; "
            "the docker backend has no ZooKeeper fault (use --backend local)"
        )

    @staticmethod
    def _no_disk_faults() -> None:
        raise FaultUnsupported(
            "disk faults (disk-full, disk-error) need the local runner's per-broker tmpfs and FUSE "
            "filesystem (`floodmark cluster up --disk-faults`); the docker backend has none"
        )
