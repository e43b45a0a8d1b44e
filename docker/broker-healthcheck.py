"""The broker container's healthcheck: healthy when the broker answers a Metadata request on its
inter-broker listener (INTERNAL in docker-compose.yml: it works inside the container, where the
EXTERNAL listener's advertised host may not), lists itself among the live brokers (it is
registered in ZooKeeper) and knows a controller. Exit 0 when healthy, 1 with the reason otherwise.
The listener is read from the server.properties the entrypoint rendered."""

import asyncio
import os
import sys

from broker.config import BrokerConfig
from client.admin import AdminClient

CONFIG = os.environ.get("FLOODMARK_BROKER_CONFIG", "/tmp/server.properties")


def own_address(config: BrokerConfig) -> str:
    """host:port of the inter-broker listener as bound in this container (a wildcard host: 127.0.0.1)."""
    listener = next(e for e in config.listeners if e.listener_name == config.inter_broker_listener_name)
    host = "127.0.0.1" if listener.host in ("", "0.0.0.0") else listener.host
    return f"{host}:{listener.port}"


async def check() -> str | None:
    config = BrokerConfig.from_file(CONFIG)
    broker_id = config.broker_id
    admin = AdminClient([own_address(config)], request_timeout_ms=3000)
    try:
        await admin.start()
        cluster = await admin.describe_cluster()
    finally:
        await admin.close()
    if broker_id not in {b.node_id for b in cluster.brokers}:
        return f"broker {broker_id} is not among the live brokers {[b.node_id for b in cluster.brokers]}"
    if cluster.controller_id < 0:
        return "no controller"
    return None


def main() -> int:
    try:
        problem = asyncio.run(asyncio.wait_for(check(), 4))
    except Exception as exc:  # noqa: BLE001 - any failure is an unhealthy answer
        problem = f"{type(exc).__name__}: {exc}"
    if problem:
        print(problem)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
