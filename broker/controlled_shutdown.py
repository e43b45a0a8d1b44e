"""Controlled shutdown, the broker's side (Kafka's KafkaServer.controlledShutdown;
docs/design.md "Controller and shutdown").

A broker told to stop (SIGTERM) first asks the controller to move its leaderships away, so
that clients see a planned leader change instead of a crash: find the controller in
``/controller``, send it ControlledShutdown with our broker id, and repeat (after
``controlled.shutdown.retry.backoff.ms``) while partitions remain led here, up to
``controlled.shutdown.max.retries`` times. Whatever happens, the broker then shuts down:
an unanswered controlled shutdown only means the controller will treat the exit as a crash.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from client.connection import BrokerConnection, ConnectionFactory
from client.protocol.api import ApiKey
from client.protocol.errors import ErrorCode, KafkaError
from zk.bridge import ZkBridge
from zk.client import get_broker, get_controller_id

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ControlledShutdownSettings:
    max_retries: int
    retry_backoff_ms: int
    request_timeout_ms: int
    #: The controller is reached on this broker's inter-broker listener (KIP-103).
    inter_broker_listener_name: str = "PLAINTEXT"


async def controlled_shutdown(
    broker_id: int,
    broker_epoch: int,
    zk: ZkBridge,
    settings: ControlledShutdownSettings,
    connect: ConnectionFactory | None = None,
) -> bool:
    """Ask the controller to move this broker's leaderships away. True when it reports none left.
    ``broker_epoch`` (KIP-380) lets the controller refuse the request of an older incarnation;
    ``connect`` opens the connection to it (None: BrokerConnection.open; the simulator passes its
    network's)."""
    for attempt in range(1, settings.max_retries + 1):
        try:
            remaining = await _ask_controller(
                broker_id,
                broker_epoch,
                zk,
                settings.request_timeout_ms / 1000,
                settings.inter_broker_listener_name,
                connect or BrokerConnection.open,
            )
        except (KafkaError, OSError, TimeoutError) as exc:
            log.warning(
                "[KafkaServer id=%d] controlled shutdown attempt %d/%d failed: %s",
                broker_id,
                attempt,
                settings.max_retries,
                exc,
            )
        else:
            if not remaining:
                log.info("[KafkaServer id=%d] controlled shutdown succeeded", broker_id)
                return True
            log.info(
                "[KafkaServer id=%d] controlled shutdown attempt %d/%d: %d partition(s) still led here: %s",
                broker_id,
                attempt,
                settings.max_retries,
                len(remaining),
                remaining[:10],
            )
        if attempt < settings.max_retries:
            await asyncio.sleep(settings.retry_backoff_ms / 1000)
    log.warning(
        "[KafkaServer id=%d] controlled shutdown did not complete; proceeding to an unclean exit", broker_id
    )
    return False


async def _ask_controller(
    broker_id: int,
    broker_epoch: int,
    zk: ZkBridge,
    timeout_s: float,
    listener_name: str,
    connect: ConnectionFactory,
) -> list[tuple[str, int]]:
    controller_id = await get_controller_id(zk)
    if controller_id < 0:
        raise KafkaError(ErrorCode.NOT_CONTROLLER, "no controller is elected")
    controller = await get_broker(zk, controller_id)
    if controller is None:
        raise KafkaError(ErrorCode.NOT_CONTROLLER, f"controller {controller_id} is not registered")
    endpoint = controller.endpoint_for(listener_name)
    if endpoint is None:
        raise KafkaError(
            ErrorCode.NOT_CONTROLLER,
            f"controller {controller_id} has no endpoint on listener {listener_name}",
        )
    connection = await connect(
        endpoint.host,
        endpoint.port,
        client_id=f"broker-{broker_id}-controlled-shutdown",
        timeout=timeout_s,
    )
    try:
        response = await connection.request(
            ApiKey.CONTROLLED_SHUTDOWN,
            {"broker_id": broker_id, "broker_epoch": broker_epoch},
            timeout=timeout_s,
        )
    finally:
        connection.close()
    if response["error_code"] != ErrorCode.NONE:
        raise KafkaError(
            response["error_code"], f"controller {controller_id} refused the controlled shutdown"
        )
    return [(p["topic"], p["partition"]) for p in response["remaining_partitions"]]
