"""Where a follower fetches from (KIP-103: Kafka's follower connects to
``leader.brokerEndPoint(interBrokerListenerName)``): a LeaderAndIsr's live leader on this
broker's inter-broker listener.
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


def inter_broker_endpoint(leader: dict, listener_name: str) -> dict:
    """A live_leaders entry with ``host``/``port`` on this broker's inter-broker listener (KIP-103:
    Kafka's follower connects to ``leader.brokerEndPoint(interBrokerListenerName)``). The entry's
    own host/port are on the controller's inter-broker listener: kept when the leader advertises no
    ``endpoints`` (an older controller) or lacks the listener (then logged)."""
    endpoints = leader.get("endpoints")
    if not endpoints:
        return leader
    for endpoint in endpoints:
        if endpoint["listener_name"] == listener_name:
            return {**leader, "host": endpoint["host"], "port": endpoint["port"]}
    log.error(
        "leader %d has no endpoint on the inter-broker listener %s; fetching from %s:%s",
        leader["id"],
        listener_name,
        leader["host"],
        leader["port"],
    )
    return leader
