"""A throwaway stand-in for the broker process, for testing the local cluster runner (SPEC 8) alone.

It is NOT a broker: it takes the broker's command line (``--config FILE [--override k=v]``),
reads the Kafka properties the runner wrote, listens on each of its ``listeners`` (PLAINTEXT and
KAFKA: accepting and dropping connections), registers ``/brokers/ids/<id>`` as an ephemeral
znode, and runs a naive controller election (ephemeral ``/controller``, then
``/controller_epoch`` + 1; not fenced). It re-registers
after its session expires (SIGSTOP longer than the session timeout), and on SIGTERM or SIGINT closes its
session (ephemerals go at once) and exits 0. Used only by
tests/integration/test_local_cluster.py::test_runner_with_stand_in_broker and its neighbours.
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import threading
import time

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError


def read_properties(path: str, overrides: list[str]) -> dict[str, str]:
    props: dict[str, str] = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#") and "=" in line:
                key, _, value = line.partition("=")
                props[key.strip()] = value.strip()
    for item in overrides:
        key, _, value = item.partition("=")
        props[key] = value
    return props


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", required=True)
    parser.add_argument("--override", action="append", default=[])
    args = parser.parse_args()
    props = read_properties(args.config, args.override)
    broker_id = int(props["broker.id"])
    endpoints = [item.strip() for item in props["listeners"].split(",") if item.strip()]
    for endpoint in endpoints:
        listen(endpoint)
    plaintext = next(e for e in endpoints if e.startswith("PLAINTEXT://"))
    host, port = plaintext.removeprefix("PLAINTEXT://").rsplit(":", 1)

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):  # TERM: `cluster kill --signal TERM`; INT: `cluster down`
        signal.signal(sig, lambda *_: stop.set())
    timeout_s = int(props.get("zookeeper.session.timeout.ms", "6000")) / 1000
    zk = KazooClient(hosts=props["zookeeper.connect"], timeout=timeout_s)
    zk.start(30)
    registration = json.dumps(
        {
            "version": 1,
            "host": host,
            "port": int(port),
            "timestamp": str(int(time.time() * 1000)),
            "endpoints": endpoints,
            "jmx_port": -1,
        }
    ).encode()
    print(f"stand-in broker {broker_id} listening on {host}:{port}", flush=True)

    while not stop.is_set():
        try:
            if not zk.exists(f"/brokers/ids/{broker_id}"):
                zk.ensure_path("/brokers/ids")
                zk.create(f"/brokers/ids/{broker_id}", registration, ephemeral=True)
                print(f"registered /brokers/ids/{broker_id}", flush=True)
            if not zk.exists("/controller"):
                elect(zk, broker_id)
        except (KazooException, NodeExistsError):
            pass  # session trouble or a lost race: look again next round
        stop.wait(0.2)
    zk.stop()
    zk.close()
    print(f"stand-in broker {broker_id} stopped", flush=True)


def listen(endpoint: str) -> None:
    """Bind ``NAME://host:port`` and accept and drop its connections, on a daemon thread."""
    host, port = endpoint.split("://", 1)[1].rsplit(":", 1)
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((host, int(port)))
    listener.listen()
    threading.Thread(target=lambda: [listener.accept()[0].close() for _ in iter(int, 1)], daemon=True).start()


def elect(zk: KazooClient, broker_id: int) -> None:
    doc = {"version": 1, "brokerid": broker_id, "timestamp": str(int(time.time() * 1000))}
    zk.create("/controller", json.dumps(doc).encode(), ephemeral=True)
    try:
        epoch = int(zk.get("/controller_epoch")[0]) + 1
        zk.set("/controller_epoch", str(epoch).encode())
    except NoNodeError:
        epoch = 1
        zk.create("/controller_epoch", b"1")
    print(f"elected controller, epoch {epoch}", flush=True)


if __name__ == "__main__":
    main()
