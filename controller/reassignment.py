"""Partition reassignment (Kafka's KafkaController.onPartitionReassignment, driven by
kafka-reassign-partitions.sh): not built yet. A request in /admin/reassign_partitions is logged and
left in place; this module is where the reassignment procedure goes.
"""

from __future__ import annotations

import logging

from controller.event_manager import PartitionReassignment
from controller.parts import ControllerParts
from zk.paths import REASSIGN_PARTITIONS_PATH

log = logging.getLogger(__name__)


async def handle_partition_reassignment(ctl: ControllerParts, event: PartitionReassignment) -> None:
    if not ctl.is_active:
        return
    if await ctl.zk.exists(REASSIGN_PARTITIONS_PATH, watch=ctl.on_reassign_watch) is not None:
        log.warning(
            "%s: partition reassignment is not yet supported; request left in place",
            REASSIGN_PARTITIONS_PATH,
        )
