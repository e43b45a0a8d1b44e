"""The broker process: wires logs, ZooKeeper, the controller, the replica manager and the
Reactor pipeline together, in the order of Kafka's KafkaServer.startup.

Start-up: load and recover the logs; connect to ZooKeeper; start the request pipeline;
register ``/brokers/ids/<id>`` (which fires the controller's broker-change watch); become a
controller candidate. Shutdown runs the other way and leaves a clean-shutdown marker so the
next start skips recovery.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import random
import socket
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import replace
from functools import partial
from pathlib import Path

from broker.apis import KafkaApis
from broker.config import BrokerConfig
from broker.controlled_shutdown import controlled_shutdown
from broker.coordinator import group_offsets
from broker.dynamic_broker_config import BrokerConfigHandler
from broker.dynamic_config import DynamicConfigManager, TopicConfigHandler
from broker.file_budget import current_budget, log_budget
from broker.group_apis import build_group_apis
from broker.kafka_protocol.codec import wire_codecs
from broker.log import LogManager
from broker.log.disk_space import REFRESH_INTERVAL_MS
from broker.log.log_dir_failure import LogDirFailureChannel
from broker.loop_stall import LoopStallMonitor
from broker.metadata_cache import MetadataCache
from broker.metrics import BrokerMetrics, BrokerState
from broker.metrics_snapshot import broker_state
from broker.network import Request, SocketServer
from broker.replica.fetcher_manager import ReplicaFetcherManager
from broker.replica.isr_manager import ISR_CHANGE_PROPAGATION_INTERVAL_MS, ZkIsrStore
from broker.replica.replica_manager import ReplicaManager
from broker.server_runtime import ServerRuntime, wall_clock_ms
from broker.state_change_log import StateChangeLog
from client.connection import BrokerConnection
from controller.controller import KafkaController
from zk.bridge import ZkBridge
from zk.client import get_or_create_cluster_id, get_topic_config, propagate_log_dir_event, register_broker
from zk.data import EndPoint, FileBudget

log = logging.getLogger(__name__)

#: Re-registration after a session loss: first retry delay, and the cap of its doubling.
REGISTRATION_BACKOFF_MS = 100
REGISTRATION_MAX_BACKOFF_MS = 5_000
#: A shutdown step this slow is logged with its time (operators wait on a controlled shutdown).
SLOW_SHUTDOWN_STEP_S = 1.0


class BrokerServer:
    def __init__(
        self,
        config: BrokerConfig,
        time_ms: Callable[[], int] = wall_clock_ms,
        rng: random.Random | None = None,
        halt: Callable[[int], None] = os._exit,
        runtime: ServerRuntime | None = None,
    ) -> None:
        self.config = config
        self.runtime = runtime or ServerRuntime()
        #: Kafka's Exit.halt: how the broker stops when every log dir has failed (KIP-112).
        self.halt = halt
        self.broker_id = config.broker_id
        self.time_ms = time_ms
        self.rng = rng or random.Random()
        self.cluster_id: str | None = None
        self._tasks: list[asyncio.Task] = []
        self._session_lost = False
        self._stopping = False  # set by shutdown: a session event then re-registers nothing
        self._registered = asyncio.Event()  # set once registered: requests wait for it
        self._reregistration: asyncio.Task | None = None
        self.port: int | None = None  # the first listener's bound port
        #: Listener name -> bound port, once the socket server is up (Kafka's boundPort).
        self.bound_ports: dict[str, int] = {}
        #: published in /brokers/ids/<id> (broker/file_budget.py); taken at start-up
        self.file_budget: FileBudget | None = None
        self.socket_server: SocketServer | None = None  # the Reactor pipeline, once started

    # -- start-up ----------------------------------------------------------------------------------
    async def startup(self) -> None:
        """Kafka's KafkaServer.startup, in its order: the logs, ZooKeeper, the replica manager,
        controller and API layer, the config change listener, the request pipeline,
        registration, the controller candidate, the periodic jobs."""
        cfg = self.config
        state_change_path = Path(cfg["state.change.log.file"] or cfg.log_dirs[0].parent / "state-change.log")
        self.state_change_log = StateChangeLog(state_change_path, self.broker_id, self.time_ms)
        # how late the loop runs, from the start (broker/loop_stall.py); None when turned off
        self.loop_stall = LoopStallMonitor.start(cfg, self.runtime.monotonic, self._tasks)
        if not await self._load_logs():
            return
        self.zk = ZkBridge(
            cfg["zookeeper.connect"],
            session_timeout_ms=cfg["zookeeper.session.timeout.ms"],
            client_factory=self.runtime.zk_client_factory,
        )
        await self.zk.start(timeout=cfg["zookeeper.connection.timeout.ms"] / 1000)
        self.zk.add_state_listener(self._on_zk_state)
        self.cluster_id = await self._get_or_create_cluster_id()
        self._build_request_layers()
        # Kafka's KafkaServer.startup: the config change listener before the request pipeline
        self.dynamic_config = DynamicConfigManager(
            self.zk,
            TopicConfigHandler(self.replica_manager, cfg),
            self.time_ms,
            broker_handler=BrokerConfigHandler(
                self.zk,
                cfg,
                self.replica_manager.quotas,
                self.replica_manager.disk_space,
                lambda: self.socket_server.quotas if self.socket_server is not None else None,
            ),
        )
        await self.dynamic_config.startup()
        await self._start_socket_server()
        await self.dynamic_config.process_broker_changes()  # the connection limits, now it runs
        await self._register()
        await self.controller.startup()
        self._start_periodic_tasks()
        log.info(
            "[KafkaServer id=%d] started, listeners %s",
            self.broker_id,
            ", ".join(
                f"{e.listener_name}://{e.host}:{self.bound_ports[e.listener_name]}" for e in cfg.listeners
            ),
        )

    async def _load_logs(self) -> bool:
        """Load and recover every log (KIP-112's failure channel first, the file budget taken).
        False when no log dir is online: the broker has halted."""
        cfg = self.config
        loop = asyncio.get_running_loop()
        self.log_dir_failures = LogDirFailureChannel()
        self.log_dir_failures.add_listener(
            lambda d, _msg: loop.call_soon_threadsafe(self._on_log_dir_failure, d)
        )
        self.file_budget = current_budget(
            self.runtime.resource, cfg["log.segment.open.files.max"], cfg["max.broker.partitions"]
        )
        self.log_manager = LogManager(
            cfg.log_dirs,
            cfg.log_config(),
            self.time_ms,
            self.log_dir_failures,
            schedule_once=self.runtime.schedule_once,
            segment_files_max=self.file_budget.segment_files,
            recovery_threads=cfg["num.recovery.threads.per.data.dir"],
            executor_factory=self.runtime.executor_factory,
            rng=self.rng,
        )
        await loop.run_in_executor(None, self.log_manager.load_logs)
        if self.log_dir_failures.resource_errors:  # EMFILE loading the logs: not a disk failure
            raise RuntimeError(
                f"cannot load the logs within the open-file limit {self.file_budget.open_files_limit}"
                f" ({self.log_dir_failures.resource_errors}): raise the limit (ulimit -n) and restart"
            )
        if not self.log_manager.online_log_dirs:
            self._halt_all_log_dirs_failed()
            return False
        log_budget(
            self.file_budget,
            self.broker_id,
            len(self.log_manager.all_logs()),
            self.log_manager.segment_file_stats.open,
        )
        return True

    def _build_request_layers(self) -> None:
        """The replica manager, the controller candidate and the API layer over them."""
        cfg = self.config
        self.metadata_cache = MetadataCache(self.broker_id)
        self.replica_manager = ReplicaManager(
            cfg,
            self.log_manager,
            self.metadata_cache,
            self.time_ms,
            self.state_change_log,
            self._topic_config,
            isr_store=ZkIsrStore(self.zk),
            fetcher_manager=self._fetcher_manager_factory(),
            statvfs=self.runtime.statvfs,
        )
        self.controller = KafkaController(
            self.broker_id,
            self.zk,
            cfg.controller_config(),
            self.time_ms,
            self.rng,
            self.state_change_log,
            self.runtime.connect,
        )
        self.group_apis = build_group_apis(
            cfg, self.replica_manager, self.metadata_cache, self.zk, self.time_ms, self.rng
        )
        self.apis = KafkaApis(
            cfg, self.replica_manager, self.metadata_cache, self.controller, self.zk,
            lambda: self.cluster_id, self.rng, group_apis=self.group_apis,
        )  # fmt: skip

    async def _start_socket_server(self) -> None:
        """The Reactor pipeline on every listener, and the metrics endpoint."""
        cfg = self.config
        stall = self.loop_stall.snapshot if self.loop_stall else None
        self.metrics = BrokerMetrics(self.broker_id, self._metrics_snapshot, loop_stall=stall)
        self.socket_server = SocketServer(
            cfg.network_config(),
            self._handle,
            self.metrics,
            self.runtime.acceptor_factory,
            self.runtime.monotonic,
            wire_codecs(cfg.listener_wire_protocols),
        )
        await self.socket_server.start()
        if cfg["metrics.port"] >= 0:
            self.metrics.serve(cfg.listeners[0].host or "0.0.0.0", cfg["metrics.port"])
        self.port = self.socket_server.port
        self.bound_ports = dict(self.socket_server.bound_ports)

    def _fetcher_manager_factory(self) -> Callable[[ReplicaManager], ReplicaFetcherManager]:
        connect = self.runtime.connect
        if connect is None:
            return ReplicaFetcherManager

        async def open_connection(host: str, port: int, client_id: str) -> BrokerConnection:
            return await connect(host, port, client_id=client_id)

        return partial(ReplicaFetcherManager, connect=open_connection)

    def _metrics_snapshot(self) -> BrokerState:
        return broker_state(
            self.replica_manager,
            self.controller,
            self.log_dir_failures,
            self.log_manager,
            self.file_budget,
            self.time_ms(),
        )

    async def _handle(self, request: Request) -> None:
        # Kafka starts its processors only once the broker is registered: until then there is
        # no broker epoch to check a controller request's against (KIP-380).
        if not self._registered.is_set():
            await self._registered.wait()
        await self.apis.handle(request)

    def advertised_endpoints(self) -> list[EndPoint]:
        """``advertised.listeners`` as registered (Kafka's KafkaServer.startup): port 0 becomes the
        port bound for that listener, an empty host this machine's fully qualified name."""
        bound = self.bound_ports
        return [
            replace(
                e,
                host=e.host or socket.getfqdn(),
                port=e.port or bound.get(e.listener_name, e.port),
            )
            for e in self.config.advertised_listeners
        ]

    async def _register(self) -> None:
        epoch = await register_broker(
            self.zk, self.broker_id, self.advertised_endpoints(), self.time_ms(), file_budget=self.file_budget
        )
        self.replica_manager.broker_epoch = epoch
        self._registered.set()
        log.info("[KafkaServer id=%d] registered with broker epoch %d", self.broker_id, epoch)

    async def _get_or_create_cluster_id(self) -> str:
        return await get_or_create_cluster_id(self.zk, uuid.UUID(int=self.rng.getrandbits(128)).hex[:22])

    async def _topic_config(self, topic: str) -> dict[str, str]:
        return await get_topic_config(self.zk, topic)

    # -- KIP-112: a log dir failed (docs/design.md "Log dir failure") --------------------------------
    def _on_log_dir_failure(self, log_dir: Path) -> None:
        """On the loop, once per failed dir (the channel calls us from whatever thread hit the error)."""
        if getattr(self, "replica_manager", None) is None:
            return  # still loading: start-up checks the online dirs once loading is over
        self._tasks.append(asyncio.get_running_loop().create_task(self._handle_log_dir_failure(log_dir)))

    async def _handle_log_dir_failure(self, log_dir: Path) -> None:
        """Kafka's ReplicaManager.handleLogDirFailure: stop serving the dir's partitions, halt if
        no dir is left, else tell the controller, which moves their leadership and ISR membership."""
        await self.replica_manager.handle_log_dir_failure(log_dir)  # serialised with LeaderAndIsr
        if not self.log_manager.online_log_dirs:
            await self._close_zk_before_halt()
            self._halt_all_log_dirs_failed()
            return
        # Written until it lands (or shutdown cancels this task): nothing else would make the
        # controller send the LeaderAndIsr whose answers take these replicas out of the ISRs. A
        # write that landed with its reply lost leaves two notifications; the controller reads both.
        backoff_ms = REGISTRATION_BACKOFF_MS
        while True:
            try:
                await propagate_log_dir_event(self.zk, self.broker_id)
                return
            except Exception as exc:  # noqa: BLE001 - any failure: the controller was not told
                delay_ms = backoff_ms * (0.5 + self.rng.random())
                log.warning(
                    "[KafkaServer id=%d] cannot notify the controller of the failed log dir %s (%r); "
                    "retrying in %d ms",
                    self.broker_id,
                    log_dir,
                    exc,
                    delay_ms,
                )
                await asyncio.sleep(delay_ms / 1000)
                backoff_ms = min(2 * backoff_ms, REGISTRATION_MAX_BACKOFF_MS)

    async def _close_zk_before_halt(self) -> None:
        """Close the ZooKeeper session first, bounded: /brokers/ids/<id> goes at once, so the
        controller moves leadership now instead of after the session timeout."""
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.zk.close(), 3.0)

    def _halt_all_log_dirs_failed(self) -> None:
        log.critical(
            "[KafkaServer id=%d] Shutdown broker because all log dirs in %s have failed",
            self.broker_id,
            ", ".join(str(d) for d in self.log_manager.log_dirs),
        )
        for handler in logging.getLogger().handlers:
            with contextlib.suppress(Exception):
                handler.flush()
        self.halt(1)

    # -- ZooKeeper session (re-register after the session expires, as Kafka's KafkaHealthcheck did) ---
    def _on_zk_state(self, state: str) -> None:
        if self._stopping:
            return
        if state == "LOST":
            self._session_lost = True
            log.warning("[KafkaServer id=%d] ZooKeeper session lost; will re-register", self.broker_id)
        elif state == "CONNECTED" and self._session_lost and self._registered.is_set():
            # only a broker that registered once re-registers here: one still starting registers
            # at its own step (a re-registration then would announce a broker that serves nothing)
            self._session_lost = False
            if self._reregistration is None or self._reregistration.done():
                self._reregistration = asyncio.get_running_loop().create_task(
                    self._register_until_registered(), name=f"broker-{self.broker_id}-reregistration"
                )
                self._tasks.append(self._reregistration)

    async def _register_until_registered(self) -> None:
        """Kafka's re-registration in its session-expiry handler, kept up until it succeeds (or the
        broker shuts down and cancels it): a lost request or reply is retried, our own session's
        znode counts as registered and the previous session's is waited out (register_broker, as
        Kafka's checkedEphemeralCreate). Backoff doubles from REGISTRATION_BACKOFF_MS, with jitter."""
        backoff_ms = REGISTRATION_BACKOFF_MS
        while True:
            try:
                await self._register()
            except Exception as exc:  # noqa: BLE001 - any failure: absent from /brokers/ids, try again
                delay_ms = backoff_ms * (0.5 + self.rng.random())
                log.warning(
                    "[KafkaServer id=%d] re-registration in ZooKeeper failed (%r); retrying in %d ms",
                    self.broker_id,
                    exc,
                    delay_ms,
                )
                await asyncio.sleep(delay_ms / 1000)
                backoff_ms = min(2 * backoff_ms, REGISTRATION_MAX_BACKOFF_MS)
                continue
            log.info("[KafkaServer id=%d] re-registered in ZooKeeper", self.broker_id)
            return

    # -- periodic duties ----------------------------------------------------------------------------
    def _start_periodic_tasks(self) -> None:
        cfg = self.config
        schedule = [
            (
                "highwatermark-checkpoint",
                cfg["replica.high.watermark.checkpoint.interval.ms"],
                self.log_manager.checkpoint_high_watermarks,
            ),
            (
                "recovery-point-checkpoint",
                cfg["log.flush.offset.checkpoint.interval.ms"],
                self.log_manager.checkpoint_recovery_points,
            ),
            (
                "log-start-offset-checkpoint",
                cfg["log.flush.start.offset.checkpoint.interval.ms"],
                self.log_manager.checkpoint_log_start_offsets,
            ),
            ("log-retention", cfg["log.retention.check.interval.ms"], self.log_manager.cleanup_logs),
            ("kafka-delete-logs", 1000, self.log_manager.delete_doomed_logs),
            ("log-dir-free-space", REFRESH_INTERVAL_MS, self.replica_manager.disk_space.refresh),  # issue 25
            (
                "producer-id-expiration",
                cfg["producer.id.expiration.check.interval.ms"],
                self.log_manager.remove_expired_producers,
            ),
            (
                "log-flusher",
                min(cfg["log.flush.scheduler.interval.ms"], 3_600_000),
                self.log_manager.flush_dirty_logs,
            ),
            ("purgatory-purge", 10_000, self._purge_purgatories),
            (
                "delete-expired-group-metadata",
                cfg["offsets.retention.check.interval.ms"],
                lambda: group_offsets.expire_offsets(self.group_apis.coordinator),
            ),
            # Kafka's ReplicaManager.startup: ISR shrink and ISR change propagation
            (
                "isr-expiration",
                max(1, cfg["replica.lag.time.max.ms"] // 2),
                self.replica_manager.maybe_shrink_isr,
            ),
            (
                "isr-change-propagation",
                ISR_CHANGE_PROPAGATION_INTERVAL_MS,
                self.replica_manager.maybe_propagate_isr_changes,
            ),
        ]
        loop = asyncio.get_running_loop()
        for name, interval_ms, job in schedule:
            if interval_ms > 0:
                self._tasks.append(loop.create_task(self._every(name, interval_ms, job), name=name))

    def _purge_purgatories(self) -> None:
        self.replica_manager.produce_purgatory.purge_completed()
        self.replica_manager.fetch_purgatory.purge_completed()

    async def _every(self, name: str, interval_ms: int, job: Callable[[], object]) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                result = job()
                if inspect.isawaitable(result):
                    await result
            except Exception:
                log.exception("periodic task %s failed", name)

    # -- shutdown ------------------------------------------------------------------------------------
    async def _shutdown_step(self, name: str, step: Awaitable[object], timeout_s: float = 10.0) -> None:
        """Run one shutdown step, bounded: a step that hangs (a peer that stopped answering while
        every broker stops at once) is logged and skipped, so the broker still exits cleanly and
        writes its clean-shutdown marker."""
        started = asyncio.get_running_loop().time()
        try:
            await asyncio.wait_for(step, timeout_s)
            took = asyncio.get_running_loop().time() - started
            if took >= SLOW_SHUTDOWN_STEP_S:
                log.info("[KafkaServer id=%d] shutdown step '%s' took %.1fs", self.broker_id, name, took)
        except TimeoutError:
            log.warning(
                "[KafkaServer id=%d] shutdown step '%s' took over %.0fs; going on",
                self.broker_id,
                name,
                timeout_s,
            )
        except Exception:
            log.exception("[KafkaServer id=%d] shutdown step '%s' failed; going on", self.broker_id, name)

    async def shutdown(self, controlled: bool = True) -> None:
        log.info("[KafkaServer id=%d] shutting down", self.broker_id)
        self._stopping = True
        if controlled and self.config["controlled.shutdown.enable"]:
            await controlled_shutdown(
                self.broker_id,
                self.replica_manager.broker_epoch,
                self.zk,
                self.config.controlled_shutdown_settings(),
                self.runtime.connect,
            )
        for task in self._tasks:
            task.cancel()
        await self._shutdown_step("periodic tasks", asyncio.gather(*self._tasks, return_exceptions=True))
        await self._shutdown_step("socket server", self.socket_server.stop())
        self.group_apis.shutdown()
        await self._shutdown_step("config change listener", self.dynamic_config.shutdown())
        self.metrics.close()
        await self._shutdown_step("controller", self.controller.shutdown())
        await self._shutdown_step("replica fetchers", self.replica_manager.fetchers.shutdown())
        self.replica_manager.shutdown()
        await self._shutdown_step("ZooKeeper session", self.zk.close())
        self.log_manager.shutdown()
        self.state_change_log.close()
        log.info("[KafkaServer id=%d] shut down completed", self.broker_id)
