"""The admin client (Kafka's Admin API, KIP-4): create, delete, list and describe topics; the cluster.

CreateTopics and DeleteTopics go to the controller, as in ZooKeeper-era Kafka: the admin finds
it in metadata and, on NOT_CONTROLLER (the controller moved) or a lost connection, refreshes
metadata and sends the remaining topics again until ``timeout_ms`` runs out. After a successful
create it waits (best effort, within the same timeout) until every live broker's metadata shows a
leader for every new partition (:mod:`client.topic_propagation`), so a describe or produce right
after sees the topic on whichever broker it goes to. Describe and list read a
Metadata response from any broker.

Results per topic are ``None`` (success) or a :class:`KafkaError` whose message carries the
broker's ``error_message`` (``INVALID_REPLICATION_FACTOR: create topic 't' failed: ...``).

Configs (KIP-133): ``describe_configs`` and ``alter_configs`` take ConfigResource objects, as
Kafka's Admin does; topic resources go to any broker, a BROKER resource to that broker. Alter is
Kafka's non-incremental AlterConfigs: the configs given replace every override of the topic. A
resource the broker refuses raises its KafkaError with the broker's message
(``INVALID_CONFIG: alter configs of topic 't' failed: Unknown topic config name: x``).
Adding partitions (KIP-195) and leader elections (KIP-460) go to the controller, with the same
retries. Partition reassignments (KIP-455: ``alter_partition_reassignments`` and
``list_partition_reassignments``) go to any broker; they live in :mod:`client.reassignments`,
mixed in here, as do ``describe_cluster`` (DescribeCluster, KIP-700), ``describe_log_dirs``
(KIP-113) and ``incremental_alter_configs`` (KIP-339) from :mod:`client.cluster_admin`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping

from client import config_bodies, topic_propagation
from client.cluster_admin import ClusterAdminMixin
from client.group_admin import ConsumerGroupsMixin
from client.metadata import ClientRuntime, Cluster, parse_brokers, parse_topic
from client.protocol.api import ApiKey
from client.protocol.errors import RETRIABLE, ErrorCode, KafkaError
from client.protocol.topic_id import ZERO_UUID
from client.reassignments import PartitionReassignmentsMixin
from client.types import (
    Config,
    ConfigResource,
    NewTopic,
    TopicDescription,
    TopicPartition,
)

#: Per-topic codes after which the admin asks metadata for the controller again and retries.
_RETRY = {ErrorCode.NOT_CONTROLLER, ErrorCode.NETWORK_EXCEPTION}


class AdminClient(ClusterAdminMixin, PartitionReassignmentsMixin, ConsumerGroupsMixin):
    def __init__(
        self,
        bootstrap_servers,
        client_id: str = "floodmark-admin",
        request_timeout_ms: int = 30000,
        *,
        runtime: ClientRuntime | None = None,
        **kwargs,
    ) -> None:
        """``runtime``: connections, clocks and randomness (default: the real ones)."""
        retry_backoff_ms = kwargs.pop("retry_backoff_ms", 100)
        if kwargs:
            raise ValueError(f"unknown admin option(s): {', '.join(sorted(kwargs))}")
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        runtime = runtime or ClientRuntime()
        self._cluster = Cluster(
            bootstrap_servers,
            client_id,
            request_timeout_ms=request_timeout_ms,
            retry_backoff_ms=retry_backoff_ms,
            clock=runtime.monotonic_ms,
            rng=runtime.rng,
            connect=runtime.connect,
        )
        self._started = False

    @property
    def cluster(self) -> Cluster:
        return self._cluster

    async def start(self) -> None:
        if not self._started:
            await self._cluster.start()
            self._started = True

    async def close(self) -> None:
        await self._cluster.close()

    async def __aenter__(self) -> AdminClient:
        await self.start()
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.close()

    # -- topics -----------------------------------------------------------------------------------
    async def create_topics(
        self, topics: list[NewTopic], timeout_ms: int = 30000, validate_only: bool = False
    ) -> dict[str, KafkaError | None]:
        entries = {}
        for topic in topics:
            if not isinstance(topic, NewTopic):
                raise TypeError(f"create_topics takes NewTopic objects, got {topic!r}")
            entries[topic.name] = {
                "name": topic.name,
                "num_partitions": topic.num_partitions,
                "replication_factor": topic.replication_factor,
                "assignments": [],
                "configs": {str(k): str(v) for k, v in topic.configs.items()},
            }
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000
        results = await self._to_controller(
            ApiKey.CREATE_TOPICS,
            entries,
            lambda items, remaining: {
                "topics": items,
                "timeout_ms": remaining,
                "validate_only": validate_only,
            },
            "create topic",
            deadline,
        )
        created = [name for name, error in results.items() if error is None]
        if created and not validate_only:
            await self._await_leaders(created, deadline)
        return results

    async def create_topic(
        self,
        name: str,
        num_partitions: int = -1,
        replication_factor: int = -1,
        configs: dict[str, str] | None = None,
        timeout_ms: int = 30000,
    ) -> None:
        results = await self.create_topics(
            [NewTopic(name, num_partitions, replication_factor, dict(configs or {}))], timeout_ms
        )
        error = results[name]
        if error is not None:
            raise error

    async def create_partitions(
        self,
        totals: dict[str, int],
        assignments: dict[str, list[list[int]]] | None = None,
        timeout_ms: int = 30000,
        validate_only: bool = False,
    ) -> dict[str, KafkaError | None]:
        """Grow each topic to ``totals[topic]`` partitions (Kafka's ``createPartitions`` with
        ``NewPartitions.increaseTo``, KIP-195); ``assignments[topic]`` lists the replicas of each
        new partition, in order (default: the broker places them). Name -> None or the error."""
        assignments = assignments or {}
        entries = {
            name: {
                "name": name,
                "count": count,
                "assignments": (
                    None
                    if name not in assignments
                    else [{"broker_ids": list(replicas)} for replicas in assignments[name]]
                ),
            }
            for name, count in totals.items()
        }
        deadline = asyncio.get_running_loop().time() + timeout_ms / 1000
        results = await self._to_controller(
            ApiKey.CREATE_PARTITIONS,
            entries,
            lambda items, remaining: {
                "topics": items,
                "timeout_ms": remaining,
                "validate_only": validate_only,
            },
            "create partitions of",
            deadline,
            items="results",
            landed=lambda name, item: (
                item["error_code"] == ErrorCode.INVALID_PARTITIONS
                and item.get("error_message") == f"Topic already has {totals[name]} partitions."
            ),
        )
        grown = {name: totals[name] for name, error in results.items() if error is None}
        if grown and not validate_only:
            await self._await_leaders(sorted(grown), deadline, grown)
        return results

    async def elect_leaders(
        self, election_type: str, partitions: Iterable[TopicPartition] | None = None, timeout_ms: int = 60000
    ) -> dict[TopicPartition, KafkaError | None]:
        """Kafka's ``electLeaders`` (KIP-460) at the controller: ``election_type`` "preferred" or
        "unclean", of ``partitions`` (None: every partition). Each partition -> None (elected) or
        its error (ELECTION_NOT_NEEDED when its leader already fits)."""
        kinds = {"preferred": 0, "unclean": 1}
        if election_type not in kinds:
            raise ValueError(f"election_type must be preferred or unclean, not {election_type!r}")
        grouped: dict[str, list[int]] = {}
        for tp in partitions if partitions is not None else ():
            grouped.setdefault(tp.topic, []).append(tp.partition)
        body = {
            "election_type": kinds[election_type],
            "topic_partitions": None
            if partitions is None
            else [{"topic": t, "partitions": sorted(ps)} for t, ps in sorted(grouped.items())],
            "timeout_ms": timeout_ms,
        }
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000
        while True:
            try:
                conn = await self._controller_connection()
                response = await conn.request(ApiKey.ELECT_LEADERS, body, timeout=timeout_ms / 1000 + 5)
                if response["error_code"] != ErrorCode.NONE:
                    raise KafkaError(
                        response["error_code"], "elect leaders: the controller refused the request"
                    )
            except KafkaError as exc:
                if exc.code not in _RETRY or loop.time() + self.retry_backoff_ms / 1000 > deadline:
                    raise
                self._cluster.invalidate()
                await asyncio.sleep(self.retry_backoff_ms / 1000)
                continue
            return {
                TopicPartition(r["topic"], p["partition_id"]): None
                if p["error_code"] == ErrorCode.NONE
                else KafkaError(p["error_code"], p.get("error_message") or "")
                for r in response["replica_election_results"]
                for p in r["partition_result"]
            }

    async def delete_topics(self, names: list[str], timeout_ms: int = 30000) -> dict[str, KafkaError | None]:
        loop = asyncio.get_running_loop()
        return await self._to_controller(
            ApiKey.DELETE_TOPICS,
            {name: name for name in names},
            lambda items, remaining: {"topics": items, "timeout_ms": remaining},
            "delete topic",
            loop.time() + timeout_ms / 1000,
        )

    async def delete_topic(self, name: str, timeout_ms: int = 30000) -> None:
        error = (await self.delete_topics([name], timeout_ms))[name]
        if error is not None:
            raise error

    async def _to_controller(
        self,
        api: ApiKey,
        entries: dict,
        make_body,
        what: str,
        deadline: float,
        items: str = "topics",
        landed: Callable[[str, dict], bool] | None = None,
    ) -> dict:
        """Send ``entries`` (name -> request item) to the controller, retrying the ones that got
        NOT_CONTROLLER or lost their connection. Returns name -> None | KafkaError.

        A resend after a lost answer may meet the refusal the first send's success causes (asked
        again to grow a topic to a count it now has): ``landed(name, answer item)`` says when a
        refusal means exactly that, and such a name counts as done. Only names whose answer was
        lost are judged so."""
        loop = asyncio.get_running_loop()
        results: dict[str, KafkaError | None] = {}
        pending = dict(entries)
        last: dict[str, KafkaError] = {}
        in_doubt: set[str] = set()  # sent, and the answer lost: the request may have been applied
        while pending:
            remaining_ms = int((deadline - loop.time()) * 1000)
            if remaining_ms <= 0:
                for name in pending:
                    results[name] = last.get(name) or KafkaError(
                        ErrorCode.REQUEST_TIMED_OUT, f"{what} {name!r}: no answer from the controller in time"
                    )
                break
            conn = None
            try:
                conn = await self._controller_connection()
                response = await conn.request(
                    api, make_body(list(pending.values()), remaining_ms), timeout=remaining_ms / 1000 + 5
                )
            except KafkaError as exc:
                if not exc.retriable:
                    raise KafkaError(exc.code, f"{what}: {exc.message}") from None
                if conn is not None:
                    in_doubt.update(pending)
                self._cluster.invalidate()
                for name in pending:
                    last[name] = KafkaError(exc.code, f"{what} {name!r}: {exc.message}")
                await asyncio.sleep(self.retry_backoff_ms / 1000)
                continue
            retry = False
            for item in response[items]:
                name = item["name"]
                if name not in pending:
                    continue
                code = item["error_code"]
                if code == ErrorCode.NONE or (name in in_doubt and landed is not None and landed(name, item)):
                    results[name] = None
                    del pending[name]
                    continue
                message = f"{what} {name!r} failed" + (
                    f": {item.get('error_message')}" if item.get("error_message") else ""
                )
                error = KafkaError(code, message)
                if code in _RETRY:
                    last[name] = error
                    retry = True
                else:
                    results[name] = error
                    del pending[name]
            missing = [name for name in pending if name not in {i["name"] for i in response[items]}]
            for name in missing:
                results[name] = KafkaError(
                    ErrorCode.UNKNOWN_SERVER_ERROR, f"{what} {name!r}: not in the response"
                )
                del pending[name]
            if retry:
                self._cluster.invalidate()
                await asyncio.sleep(self.retry_backoff_ms / 1000)
        return {name: results[name] for name in entries}

    async def _controller_connection(self):
        await self._cluster.maybe_refresh([])
        controller = self._cluster.controller_id
        if controller < 0 or self._cluster.broker(controller) is None:
            self._cluster.invalidate()
            raise KafkaError(ErrorCode.NOT_CONTROLLER, "no controller is known to the brokers right now")
        return await self._cluster.connection(controller)

    async def _await_leaders(
        self, names: list[str], deadline: float, counts: dict[str, int] | None = None
    ) -> None:
        """Until every live broker shows every partition of ``names`` led (at least
        ``counts[name]`` partitions), or the deadline: :mod:`client.topic_propagation`."""
        await topic_propagation.await_leaders(self._cluster, names, deadline, counts, self.retry_backoff_ms)

    async def list_topics(self, include_internal: bool = True) -> list[str]:
        """Every topic name, sorted (``include_internal=False`` drops internal ones)."""
        body = await self._cluster.request_metadata(None)
        return sorted(
            t["topic"]
            for t in body["topics"]
            if t["error_code"] == ErrorCode.NONE and (include_internal or not t.get("is_internal"))
        )

    async def describe_topics(self, names: Iterable[str] | None = None) -> list[TopicDescription]:
        """Descriptions sorted by name (partitions sorted); an unknown name gives a description
        with ``error_code`` UNKNOWN_TOPIC_OR_PARTITION and no partitions."""
        wanted = None if names is None else sorted(set(names))
        body = await self._cluster.request_metadata(wanted)
        brokers = parse_brokers(body)
        found = {}
        for t in body["topics"]:
            info = parse_topic(t, brokers)
            partitions = [info.partitions[i].description() for i in info.partition_ids]
            topic_id = t.get("topic_id")
            found[info.name] = TopicDescription(
                info.name,
                partitions,
                info.error_code,
                info.is_internal,
                topic_id if topic_id and topic_id != ZERO_UUID else None,
            )
        for name in wanted or ():
            if name not in found:
                found[name] = TopicDescription(name, [], int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
        return [found[name] for name in sorted(found)]

    # -- configs (KIP-133) ---------------------------------------------------------------------
    async def describe_configs(
        self,
        resources: Iterable[ConfigResource],
        include_synonyms: bool = False,
        configuration_keys: Iterable[str] | None = None,
    ) -> dict[ConfigResource, Config]:
        """Every config of each resource (only ``configuration_keys`` when given) with its
        effective value and source. Raises the first refused resource's KafkaError."""
        keys = None if configuration_keys is None else list(configuration_keys)
        results: dict[ConfigResource, Config] = {}
        for node, group in config_bodies.by_node(resources).items():
            body = {
                "resources": [
                    {"resource_type": int(r.type), "resource_name": r.name, "configuration_keys": keys}
                    for r in group
                ],
                "include_synonyms": include_synonyms,
            }
            response = await self._request_node(node, ApiKey.DESCRIBE_CONFIGS, body, "describe configs")
            for item in config_bodies.answers(response["results"], group, "describe configs"):
                results[ConfigResource(item["resource_type"], item["resource_name"])] = Config(
                    tuple(config_bodies.config_entry(e) for e in item["configs"])
                )
        return results

    async def alter_configs(
        self, configs: Mapping[ConfigResource, Mapping[str, str]], validate_only: bool = False
    ) -> None:
        """Replace the overrides of each resource (a topic, a broker id, or "" for the brokers'
        cluster-wide default) by the ones given: a name left out loses its override (Kafka's
        AlterConfigs, not the incremental KIP-339 one).
        ``validate_only`` checks without writing. Raises the first refused resource's KafkaError."""
        for node, group in config_bodies.by_node(configs).items():
            body = {
                "resources": [
                    {
                        "resource_type": int(r.type),
                        "resource_name": r.name,
                        "configs": [{"name": str(k), "value": str(v)} for k, v in configs[r].items()],
                    }
                    for r in group
                ],
                "validate_only": validate_only,
            }
            response = await self._request_node(node, ApiKey.ALTER_CONFIGS, body, "alter configs")
            config_bodies.answers(response["responses"], group, "alter configs")

    async def _request_node(self, node: int | None, api: ApiKey, body: dict, what: str) -> dict:
        """``body`` to broker ``node`` (any broker for None), again after a retriable failure
        (a lost connection, a broker missing from metadata) until ``request_timeout_ms``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.request_timeout_ms / 1000
        while True:
            try:
                if node is None:
                    conn = await self._cluster.any_connection()
                else:
                    await self._cluster.maybe_refresh([])
                    conn = await self._cluster.connection(node)
                return await conn.request(api, body, timeout=max(0.1, deadline - loop.time()))
            except KafkaError as exc:
                if not exc.retriable or loop.time() + self.retry_backoff_ms / 1000 >= deadline:
                    raise KafkaError(exc.code, f"{what}: {exc.message}") from None
                self._cluster.invalidate()
                await asyncio.sleep(self.retry_backoff_ms / 1000)

    async def api_versions(self) -> list[dict]:
        """ApiVersions from any broker: ``[{api_key, name, min_version, max_version}]``."""
        conn = await self._cluster.any_connection()
        try:
            body = await conn.request(ApiKey.API_VERSIONS, {}, timeout=self.request_timeout_ms / 1000)
        except KafkaError as exc:
            if exc.code in RETRIABLE:
                self._cluster.invalidate()
            raise
        if body["error_code"]:
            raise KafkaError(body["error_code"], f"api versions from {conn.host}:{conn.port} failed")
        out = []
        for entry in body["api_keys"]:
            try:
                name = ApiKey(entry["api_key"]).name
            except ValueError:
                name = f"API_{entry['api_key']}"
            out.append({**entry, "name": name})
        return sorted(out, key=lambda e: e["api_key"])
