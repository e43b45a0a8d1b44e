"""The broker container's healthcheck: healthy when the broker answers a Metadata request on its
own listener, lists itself among the live brokers (it is registered in ZooKeeper) and knows a
controller. Exit 0 when healthy, 1 with the reason otherwise."""

import asyncio
import os
import sys

from client.admin import AdminClient


async def check() -> str | None:
    broker_id = int(os.environ["FLOODMARK_BROKER_ID"])
    admin = AdminClient([f"127.0.0.1:{os.environ.get('FLOODMARK_PORT', '9092')}"], request_timeout_ms=3000)
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
