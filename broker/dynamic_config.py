"""Dynamic topic configs: the broker's config change listener (Kafka's DynamicConfigManager with its
ZkNodeChangeNotificationListener on /config/changes, and TopicConfigHandler; docs/design.md
"Topic configs").

AlterConfigs (broker/config_admin.py) writes /config/topics/<t>, then a persistent sequential
/config/changes/config_change_<seq> naming ``topics/<t>``. Every broker watches the children of
/config/changes; for each notification with a sequence number above the last one it processed
(Kafka's lastExecutedChange) it re-reads the named topic's overrides and
:class:`TopicConfigHandler` applies them to every local log of the topic: ``Log.update_config``
(segment.bytes, retention.ms, max.message.bytes ... are read from the log's LogConfig at use
time) and the replica manager's typed overrides (min.insync.replicas, read at each acks=all
append). A later append or retention check sees the new values; no restart.

At start-up the current notifications count as processed, after the current /config/topics state
of every topic with a local log has been applied (which also gives logs loaded from disk their
overrides). Any watch event, a dropped connection's included, and every (re)connection make the
listener list the children again and re-register its watch; a failed pass is retried with a
doubling backoff. Notifications older than :data:`CHANGE_EXPIRATION_MS` are deleted
(Kafka's purgeObsoleteNotifications, changeExpirationMs 15 minutes), by whichever broker sees
them first. ``topics`` entities go to :class:`TopicConfigHandler` (which also marks the topic's
throttled replicas), ``brokers/<id>`` (this broker's) and ``brokers/<default>`` to
:class:`~broker.dynamic_broker_config.BrokerConfigHandler` (the replication throttle rates);
others (``clients``, ``users``) are logged and skipped.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from broker.config import BrokerConfig, ConfigError, validate_topic_configs
from zk.bridge import ZkBridge
from zk.client import (
    delete_config_change,
    get_config_change,
    get_config_change_ctime,
    get_config_change_notifications,
    get_topic_config,
)
from zk.data import decode_config_change
from zk.paths import CONFIG_CHANGE_PREFIX, DEFAULT_BROKER_ENTITY

if TYPE_CHECKING:
    from kazoo.protocol.states import WatchedEvent

    from broker.dynamic_broker_config import BrokerConfigHandler
    from broker.replica.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

#: Kafka's ZkNodeChangeNotificationListener changeExpirationMs.
CHANGE_EXPIRATION_MS = 15 * 60 * 1000
#: A failed pass over /config/changes is retried after this, doubling up to the maximum.
RETRY_BACKOFF_MS = 100
RETRY_MAX_BACKOFF_MS = 5_000


def sequence_number(name: str) -> int:
    """The sequence number of ``config_change_<seq>``; -1 for a name that is not one."""
    suffix = name[len(CONFIG_CHANGE_PREFIX) :] if name.startswith(CONFIG_CHANGE_PREFIX) else ""
    return int(suffix) if suffix.isdigit() else -1


@dataclass
class NotificationSequence:
    """Which notifications are new (Kafka's lastExecutedChange): sequential znodes only grow, so
    one number says what was processed."""

    last_executed: int = -1

    def start_after(self, names: Iterable[str]) -> None:
        """At start-up: everything present counts as processed."""
        self.last_executed = max([self.last_executed, *(sequence_number(n) for n in names)])

    def new(self, names: Iterable[str]) -> list[str]:
        """The notifications not yet processed, in sequence order."""
        return sorted((n for n in names if sequence_number(n) > self.last_executed), key=sequence_number)

    def executed(self, name: str) -> None:
        self.last_executed = max(self.last_executed, sequence_number(name))


def is_expired(ctime_ms: int, now_ms: int, expiration_ms: int = CHANGE_EXPIRATION_MS) -> bool:
    return now_ms - ctime_ms > expiration_ms


class TopicConfigHandler:
    """Kafka's TopicConfigHandler.processConfigChanges: a topic's overrides applied to this
    broker's logs of it and to the replica manager's per-topic settings."""

    def __init__(self, replica_manager: ReplicaManager, config: BrokerConfig) -> None:
        self.rm = replica_manager
        self.config = config

    def hosted_topics(self) -> set[str]:
        """Topics with a local log, or whose overrides the replica manager already holds."""
        return {t for t, _ in self.rm.log_manager.all_logs()} | set(self.rm.topic_overrides)

    def process_config_changes(self, topic: str, overrides: dict[str, str]) -> bool:
        """Apply ``overrides`` (the whole of /config/topics/<t>); False when the topic is not
        hosted here (its first LeaderAndIsr reads them) or they do not validate (kept as they were)."""
        logs = [lg for (t, _), lg in self.rm.log_manager.all_logs().items() if t == topic]
        if not logs and topic not in self.rm.topic_overrides:
            return False
        try:
            typed = validate_topic_configs(overrides)
            log_config = self.config.log_config(overrides)
        except (ConfigError, ValueError) as exc:
            log.error("ignoring the config change of topic %s: %s", topic, exc)
            return False
        self.rm.topic_overrides[topic] = dict(overrides)
        self.rm.topic_configs[topic] = typed
        self.rm.quotas.apply_topic_config(topic, overrides, self.rm.broker_id)
        for lg in logs:
            lg.update_config(log_config)
        log.info(
            "applied the config overrides of topic %s to %d local log(s): %s", topic, len(logs), overrides
        )
        return True


class DynamicConfigManager:
    """Kafka's DynamicConfigManager: the /config/changes listener and its handlers."""

    def __init__(
        self,
        zk: ZkBridge,
        topic_handler: TopicConfigHandler,
        time_ms: Callable[[], int],
        change_expiration_ms: int = CHANGE_EXPIRATION_MS,
        broker_handler: BrokerConfigHandler | None = None,
    ) -> None:
        self.zk = zk
        self.topic_handler = topic_handler
        self.broker_handler = broker_handler
        self.time_ms = time_ms
        self.change_expiration_ms = change_expiration_ms
        self.sequence = NotificationSequence()
        self._wake = asyncio.Event()
        self._ctimes: dict[str, int] = {}  # notification -> creation time, once read
        self.task: asyncio.Task | None = None

    async def startup(self) -> None:
        """Register the watch, take the present notifications as processed, apply the present
        overrides of every hosted topic, then process changes as they come."""
        names = await get_config_change_notifications(self.zk, watch=self._on_watch)
        self.sequence.start_after(names)
        for topic in sorted(self.topic_handler.hosted_topics()):
            await self._apply_topic(topic)
        if self.broker_handler is not None:
            await self.broker_handler.process_config_changes()
        self.zk.add_state_listener(self._on_zk_state)
        self.task = asyncio.get_running_loop().create_task(self._run(), name="config-change-listener")
        if names:
            self._wake.set()  # purge what has expired

    async def process_broker_changes(self) -> None:
        """Apply the dynamic broker configs again (the server calls it once its socket server
        runs: the connection limits have something to apply to from then on)."""
        if self.broker_handler is not None:
            await self.broker_handler.process_config_changes()

    def _on_watch(self, event: WatchedEvent) -> None:
        # a child change, or the watch dropped with the connection: list again, re-registering it
        self._wake.set()

    def _on_zk_state(self, state: str) -> None:
        if state == "CONNECTED":  # after a drop or a new session: changes may have been missed
            self._wake.set()

    async def _run(self) -> None:
        backoff_ms = RETRY_BACKOFF_MS
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self.process_notifications()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - ZooKeeper unreachable: list again later
                log.warning(
                    "processing config change notifications failed (%r); retrying in %d ms", exc, backoff_ms
                )
                await asyncio.sleep(backoff_ms / 1000)
                backoff_ms = min(2 * backoff_ms, RETRY_MAX_BACKOFF_MS)
                self._wake.set()
            else:
                backoff_ms = RETRY_BACKOFF_MS

    async def process_notifications(self) -> None:
        """One pass (Kafka's processNotifications): list with the watch, process the new
        notifications in order, purge the expired ones. A failed read raises before the
        notification counts as processed, so the retry processes it again."""
        names = await get_config_change_notifications(self.zk, watch=self._on_watch)
        for name in self.sequence.new(names):
            got = await get_config_change(self.zk, name)
            if got is not None:
                data, ctime = got
                self._ctimes[name] = ctime
                await self._process(name, data)
            self.sequence.executed(name)
        await self._purge(names)

    async def _process(self, name: str, data: bytes) -> None:
        try:
            entity_type, entity_name = decode_config_change(data)
        except ValueError:
            log.error("skipping the unreadable config change notification %s: %r", name, data)
            return
        if entity_type == "brokers" and self.broker_handler is not None:
            if entity_name in (str(self.broker_handler.config.broker_id), DEFAULT_BROKER_ENTITY):
                await self.broker_handler.process_config_changes()
            return
        if entity_type != "topics":
            log.info(
                "config change %s for %s/%s: no handler for %s here",
                name,
                entity_type,
                entity_name,
                entity_type,
            )
            return
        await self._apply_topic(entity_name)

    async def _apply_topic(self, topic: str) -> None:
        overrides = await get_topic_config(self.zk, topic)
        self.topic_handler.process_config_changes(topic, overrides)

    async def _purge(self, names: list[str]) -> None:
        """Delete the notifications older than the expiration (Kafka's purgeObsoleteNotifications)."""
        present = set(names)
        for name in list(self._ctimes):
            if name not in present:
                del self._ctimes[name]
        now = self.time_ms()
        for name in names:
            ctime = self._ctimes.get(name)
            if ctime is None:
                ctime = await get_config_change_ctime(self.zk, name)
                if ctime is None:
                    continue
                self._ctimes[name] = ctime
            if is_expired(ctime, now, self.change_expiration_ms):
                await delete_config_change(self.zk, name)
                self._ctimes.pop(name, None)

    async def shutdown(self) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
