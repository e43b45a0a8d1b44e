"""A stand-in for the broker that writes to its log dir, for testing the disk faults of the local
runner (tests/chaos/test_disk_faults.py) without depending on the broker's own log code.

It is NOT a broker. It reads the Kafka properties the runner wrote (``--config FILE``), listens
on its port, registers ``/brokers/ids/<id>`` (ephemeral) and runs a naive controller election,
like tests/integration/stand_in_broker.py. Meanwhile it appends a small record to
``<log.dirs>/stand-in-0/00000000000000000000.log`` and fsyncs it every 50 ms (4 KiB, so each
write needs a new page: on a full disk the very next one fails). On the first
I/O error it does what KIP-112 prescribes for a broker whose only log dir failed: it logs
Kafka's line and halts with status 1. SIGTERM or SIGINT stop it with status 0.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import threading
import time

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NodeExistsError


def read_properties(path: str) -> dict[str, str]:
    props: dict[str, str] = {}
    with open(path) as f:
        for line in f:
            key, sep, value = line.strip().partition("=")
            if sep and not key.startswith("#"):
                props[key.strip()] = value.strip()
    return props


def write_forever(log_dir: str, stop: threading.Event) -> None:
    partition = os.path.join(log_dir, "stand-in-0")
    try:
        os.makedirs(partition, exist_ok=True)
        fd = os.open(
            os.path.join(partition, "00000000000000000000.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND
        )
        n = 0
        while not stop.wait(0.05):
            os.write(fd, f"record {n}\n".encode().ljust(4096, b"."))
            os.fsync(fd)
            n += 1
    except OSError as exc:
        print(f"Error while writing to {log_dir}: {exc}", flush=True)
        print(f"Shutdown broker because all log dirs in {log_dir} have failed", flush=True)
        os._exit(1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", required=True)
    props = read_properties(parser.parse_args().config)
    broker_id = int(props["broker.id"])
    plaintext = next(e for e in props["listeners"].split(",") if e.strip().startswith("PLAINTEXT://"))
    host, port = plaintext.strip().removeprefix("PLAINTEXT://").rsplit(":", 1)
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((host, int(port)))
    listener.listen()

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    threading.Thread(target=write_forever, args=(props["log.dirs"], stop), daemon=True).start()
    zk = KazooClient(hosts=props["zookeeper.connect"], timeout=6)
    zk.start(30)
    registration = json.dumps(
        {"version": 1, "host": host, "port": int(port), "endpoints": [props["listeners"]]}
    )
    while not stop.is_set():
        try:
            if not zk.exists(f"/brokers/ids/{broker_id}"):
                zk.ensure_path("/brokers/ids")
                zk.create(f"/brokers/ids/{broker_id}", registration.encode(), ephemeral=True)
                print(f"registered /brokers/ids/{broker_id}", flush=True)
            if not zk.exists("/controller"):
                doc = {"version": 1, "brokerid": broker_id, "timestamp": str(int(time.time() * 1000))}
                zk.create("/controller", json.dumps(doc).encode(), ephemeral=True)
                zk.ensure_path("/controller_epoch")
                zk.set("/controller_epoch", b"1")
        except (KazooException, NodeExistsError):
            pass
        stop.wait(0.2)
    zk.stop()
    zk.close()


if __name__ == "__main__":
    main()
