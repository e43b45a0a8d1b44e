"""Waiting until new partitions are led in every broker's metadata (docs/design.md "A created topic
is in every broker's metadata when the create returns").

In ZooKeeper-era Kafka, the controller answers CreateTopics (and CreatePartitions) once it has
written the assignment and elected the leaders; each broker learns them from the controller's
UpdateMetadata a moment later. A Metadata request to another broker right after the create may
not know the topic yet (UNKNOWN_TOPIC_OR_PARTITION), and a describe or a produce that goes there
fails. The admin client closes that window for its caller: ``await_leaders`` asks every live
broker (concurrently) and returns when each one that answers shows every partition of the topics
with a leader, or at the deadline with a warning. A broker that does not answer (within
``BROKER_ANSWER_TIMEOUT_S``) is not waited for: it learns the topic when it comes back, and
clients refresh metadata on an error.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping

from client.metadata import Cluster, parse_brokers
from client.protocol.api import ApiKey
from client.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

#: How long one round waits for a broker's answer: a broker that is stopped (SIGSTOP, a long GC
#: pause) is then counted as not answering, and the create returns without it.
BROKER_ANSWER_TIMEOUT_S = 5.0


def led(topic: dict, counts: Mapping[str, int]) -> bool:
    """Whether a Metadata response's topic entry has a leader for each of its partitions and at
    least ``counts[name]`` partitions."""
    parts = topic["partitions"]
    return (
        topic["error_code"] == ErrorCode.NONE
        and bool(parts)
        and len(parts) >= counts.get(topic["topic"], 0)
        and all(p["leader"] >= 0 for p in parts)
    )


async def led_on(
    cluster: Cluster, node: int, names: Iterable[str], counts: Mapping[str, int], timeout: float
) -> set[str]:
    """The topics of ``names`` that broker ``node`` shows led; all of them when the broker does
    not answer (it cannot be waited for). Its answer does not update the client's cache: a
    lagging broker's view must not replace a fresher one."""
    wanted = sorted(names)
    try:
        conn = await cluster.connection(node)
        body = await conn.request(
            ApiKey.METADATA, {"topics": wanted, "allow_auto_topic_creation": False}, timeout=timeout
        )
    except KafkaError as exc:
        log.debug("broker %d did not answer while waiting for new leaders: %s", node, exc)
        return set(wanted)
    return {t["topic"] for t in body["topics"] if led(t, counts)}


async def await_leaders(
    cluster: Cluster,
    names: Iterable[str],
    deadline: float,
    counts: Mapping[str, int] | None = None,
    retry_backoff_ms: int = 100,
) -> None:
    """Until every live broker shows every topic of ``names`` led (each partition a leader, at
    least ``counts[name]`` partitions), or the loop time ``deadline``."""
    loop = asyncio.get_running_loop()
    counts = counts or {}
    waiting = set(names)
    while waiting:
        try:
            body = await cluster.request_metadata(sorted(waiting))
        except KafkaError as exc:
            log.debug("waiting for new topics' leaders: %s", exc)
        else:
            timeout = min(BROKER_ANSWER_TIMEOUT_S, max(0.1, deadline - loop.time()))
            nodes = sorted(parse_brokers(body))
            shown = await asyncio.gather(*(led_on(cluster, n, waiting, counts, timeout) for n in nodes))
            everywhere = set.intersection(*shown) if shown else set()
            waiting -= everywhere & {t["topic"] for t in body["topics"] if led(t, counts)}
        if not waiting:
            return
        if loop.time() + retry_backoff_ms / 1000 > deadline:
            log.warning(
                "created topic(s) %s but no leader is visible yet on every broker", ", ".join(sorted(waiting))
            )
            return
        await asyncio.sleep(retry_backoff_ms / 1000)
