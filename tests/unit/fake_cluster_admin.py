"""DescribeCluster, DescribeLogDirs and IncrementalAlterConfigs for tests/unit/fake_cluster.py
(KIP-700, KIP-113, KIP-339), with the broker's contract:

* DescribeCluster: the nodes not :attr:`~FakeCluster.down`, the controller, ``fake-cluster``;
  with :attr:`describe_cluster_unknown` set, refused as a broker older than the API refuses it
  (INVALID_REQUEST "unknown API key 60").
* DescribeLogDirs: one dir per node, ``/fake/<node>``, holding every partition whose replicas
  name the node, sized by the bytes of its stored batches; 1000 bytes total, 400 usable.
* IncrementalAlterConfigs: the operations applied to the stored overrides, then AlterConfigs'
  checks and replace (tests/unit/fake_configs.py); APPEND and SUBTRACT only for the throttled
  replica lists (INVALID_CONFIG otherwise), a null value but for DELETE INVALID_REQUEST.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from client.protocol import api
from client.protocol.api import ConfigResourceType
from client.protocol.errors import ErrorCode
from tests.unit.fake_configs import REPLICAS_KEYS


class FakeClusterAdmin:
    """The three APIs of FakeCluster (a mixin: the cluster owns topics, ports and the config dicts)."""

    node_ids: tuple[int, ...]
    ports: dict[int, int]
    down: set[int]
    controller_id: int
    topics: dict
    topic_configs: dict[str, dict[str, str]]
    broker_configs: dict[str, dict[str, str]]
    describe_cluster_unknown: bool = False

    async def _describe_cluster(self, node: int, body: dict) -> dict:
        if self.describe_cluster_unknown:
            return api.error_body(ErrorCode.INVALID_REQUEST, "unknown API key 60")
        return {
            "error_code": 0,
            "cluster_id": "fake-cluster",
            "controller_id": self.controller_id,
            "brokers": [
                {"broker_id": n, "host": "127.0.0.1", "port": self.ports[n], "rack": None}
                for n in self.node_ids
                if n not in self.down
            ],
        }

    async def _describe_log_dirs(self, node: int, body: dict) -> dict:
        wanted = None
        if body["topics"] is not None:
            wanted = {(t["topic"], p) for t in body["topics"] for p in t["partitions"]}
        topics = []
        for name, parts in sorted(self.topics.items()):
            held = [
                {
                    "partition_index": i,
                    "partition_size": sum(len(batch) for _, batch in p.batches),
                    "offset_lag": 0,
                    "is_future_key": False,
                }
                for i, p in enumerate(parts)
                if node in p.replicas and (wanted is None or (name, i) in wanted)
            ]
            if held:
                topics.append({"name": name, "partitions": held})
        result = {"error_code": 0, "log_dir": f"/fake/{node}", "topics": topics}
        return {"results": [{**result, "total_bytes": 1000, "usable_bytes": 400}]}

    async def _incremental_alter_configs(self, node: int, body: dict) -> dict:
        merged, refused = [], {}
        for i, r in enumerate(body["resources"]):
            store = (
                self.topic_configs if r["resource_type"] == ConfigResourceType.TOPIC else self.broker_configs
            )
            configs = dict(store.get(r["resource_name"], {}))
            for c in r["configs"]:
                name, value, op = c["name"], c["value"], c["config_operation"]
                if op != 1 and value is None:
                    refused[i] = (ErrorCode.INVALID_REQUEST, f"Null value not supported for : {name}")
                elif op in (2, 3) and name not in REPLICAS_KEYS:
                    refused[i] = (ErrorCode.INVALID_CONFIG, f"Config value append is not allowed for {name}")
                elif op == 0:
                    configs[name] = value
                elif op == 1:
                    configs.pop(name, None)
                else:
                    old = [v for v in configs.get(name, "").split(",") if v]
                    given = value.split(",")
                    new = (
                        old + [v for v in given if v not in old]
                        if op == 2
                        else [v for v in old if v not in given]
                    )
                    configs[name] = ",".join(new)
            if i not in refused:
                merged.append({**r, "configs": [{"name": k, "value": v} for k, v in configs.items()]})
        altered = iter(
            (await self._alter_configs(node, {"resources": merged, "validate_only": body["validate_only"]}))[
                "responses"
            ]
        )
        responses = []
        for i, r in enumerate(body["resources"]):
            item = {"resource_type": r["resource_type"], "resource_name": r["resource_name"]}
            if i in refused:
                responses.append({**item, "error_code": refused[i][0], "error_message": refused[i][1]})
            else:
                responses.append(next(altered))
        return {"throttle_time_ms": 0, "responses": responses}

    if TYPE_CHECKING:

        async def _alter_configs(self, node: int, body: dict) -> dict: ...  # FakeConfigs'
