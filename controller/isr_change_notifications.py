"""ISR change notifications (Kafka's IsrChangeNotificationHandler and
processIsrChangeNotification): a leader that changed an ISR writes
/isr_change_notification/isr_change_<seq>; the controller re-reads the named partitions' states
and sends them in UpdateMetadata, deleting a notification only once it was propagated
(docs/guarantees.md "The controller under ZooKeeper blips").
"""

from __future__ import annotations

import asyncio
import logging

from client.types import TopicPartition
from controller.event_manager import IsrChangeNotification
from controller.parts import ControllerParts
from zk.batch import get_partition_states
from zk.data import decode_isr_change_notification
from zk.paths import (
    ISR_CHANGE_NOTIFICATION_PATH,
    ISR_CHANGE_PREFIX,
)

log = logging.getLogger(__name__)


async def handle_isr_change_notification(ctl: ControllerParts, event: IsrChangeNotification) -> None:
    """Refresh the named partitions' states and send them in UpdateMetadata. A notification is
    deleted only once it was read and every partition it names was re-read and propagated;
    after a failed read of a notification or a state the rest stay and the event raises; a failed
    listing raises too. Either way the controller's event retry runs it again, before anything
    queued after it (docs/design.md "The controller under ZooKeeper blips")."""
    if not ctl.is_active:
        return
    # a failed read raises: the controller's event retry reads again and re-sets the watch
    children = await ctl.zk.get_children(ISR_CHANGE_NOTIFICATION_PATH, watch=ctl.on_isr_change_watch)
    notifications = sorted(c for c in children or [] if c.startswith(ISR_CHANGE_PREFIX))
    if not notifications:
        return
    data = await asyncio.gather(
        *(ctl.zk.get(f"{ISR_CHANGE_NOTIFICATION_PATH}/{n}") for n in notifications),
        return_exceptions=True,
    )
    named: dict[str, set[TopicPartition]] = {}  # read (or unreadable, or gone): may be deleted
    for notification, got in zip(notifications, data, strict=True):
        if isinstance(got, Exception):
            log.warning("cannot read ISR change notification %s: %s; retrying", notification, got)
            continue
        named[notification] = set()
        if got is None:
            continue
        try:
            named[notification].update(decode_isr_change_notification(got[0]))
        except (ValueError, KeyError, TypeError):
            log.error("unreadable ISR change notification %s: %r", notification, got[0])
    partitions = sorted(
        {tp for tps in named.values() for tp in tps if tp in ctl.context.partition_leadership}
    )
    states = await get_partition_states(ctl.zk, partitions, return_exceptions=True)
    refreshed: set[TopicPartition] = set()
    for tp, state in zip(partitions, states, strict=True):
        if isinstance(state, Exception):
            log.warning("cannot read the state of %s after an ISR change: %s; retrying", tp, state)
            continue
        refreshed.add(tp)
        if state is not None:
            ctl.context.partition_leadership[tp] = state
    if refreshed:
        ctl.batch.add_update_metadata(ctl.context.live_or_shutting_down_broker_ids, refreshed)
        ctl.record("isr_change_propagated", partitions=[str(tp) for tp in sorted(refreshed)])
    done = [
        n
        for n, tps in named.items()
        if all(tp in refreshed or tp not in ctl.context.partition_leadership for tp in tps)
    ]
    await delete_isr_change_notifications(ctl, done)
    if len(done) < len(notifications):
        # the controller's event retry runs it again before anything queued after it
        raise IsrNotificationsPending(
            f"{len(notifications) - len(done)} ISR change notification(s) not yet propagated"
        )


class IsrNotificationsPending(Exception):
    """Some notifications, or the states they name, could not be read: the event is retried."""


async def delete_isr_change_notifications(ctl: ControllerParts, notifications: list[str]) -> None:
    await ctl.delete_quietly([f"{ISR_CHANGE_NOTIFICATION_PATH}/{n}" for n in notifications])
