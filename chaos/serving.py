"""Waiting until the cluster serves the chaos run's topic (docs/operations.md "Chaos runs and
verification"): every partition with a leader and, when asked, a full ISR (Kafka's
``UnderReplicatedPartitions`` at 0), read with the AdminClient's DescribeTopics (Metadata). The run
waits for it after creating the topic and after the final heal (chaos/run.py), and its answer
decides how the run is verified: through the cluster, or offline from the log dirs.
"""

from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import Callable

from client.admin import AdminClient

Say = Callable[[str], None]


class Served(enum.Enum):
    FULL = "every partition has a leader and a full ISR"
    LEADERS = "every partition has a leader"
    NONE = "some partition has no leader, or no broker answers"


async def wait_served(
    bootstrap: str, topic: str, timeout_s: float, say: Say, full_isr: bool = True
) -> Served:
    """Wait (bounded) until every partition has a leader and, with ``full_isr``, an ISR equal to
    its replicas; what the cluster serves at the end."""
    deadline = time.monotonic() + timeout_s
    last, served = "no answer", Served.NONE
    while True:
        try:
            async with asyncio.timeout(max(1.0, deadline - time.monotonic())):
                async with AdminClient(bootstrap, request_timeout_ms=5000) as admin:
                    (d,) = await admin.describe_topics([topic])
        except Exception as exc:  # noqa: BLE001 - any failure to answer is "not served"
            last, served = str(exc) or type(exc).__name__, Served.NONE
        else:
            leaderless = [p for p in d.partitions if p.leader < 0]
            lagging = [p for p in d.partitions if sorted(p.isr) != sorted(p.replicas)]
            served = Served.NONE if leaderless else Served.LEADERS if lagging else Served.FULL
            if served is Served.FULL or (served is Served.LEADERS and not full_isr):
                return served
            last = ", ".join(f"{p.partition}: leader {p.leader} isr {p.isr}" for p in leaderless or lagging)
        if time.monotonic() >= deadline:
            break
        await asyncio.sleep(1)
    say(f"after {timeout_s:.0f}s: {served.value} ({last})")
    return served


async def wait_fully_replicated(bootstrap: str, topic: str, timeout_s: float, say: Say) -> bool:
    """Every partition has a leader and an ISR equal to its replicas (bounded)."""
    return await wait_served(bootstrap, topic, timeout_s, say) is Served.FULL
