"""The fake cluster (tests/unit/fake_cluster.py) with a real group coordinator behind it, for
tests of the client's group member (client/consumer/group_coordinator.py; docs/design.md
"Consumer groups").

FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit and OffsetFetch are
handed to the broker's own :class:`broker.coordinator.group_coordinator.GroupCoordinator` (built
by :class:`tests.unit.group_harness.GroupEnv`), turned into answers as broker/group_apis.py does.
The coordinator's clock is the harness's :class:`FakeTimers`: it moves only when the test calls
:meth:`FakeGroupCluster.advance` (a member's session expires exactly then, never by accident),
except that timers already due fire after every request (``group.initial.rebalance.delay.ms``
is 0 here, so a first join completes as soon as the coordinator has seen it).

:attr:`FakeGroupCluster.hold` parks the next requests of an API before the coordinator sees
them, until the test releases them, while the connection goes on serving the member's other
requests (their answers overtake the parked one: the client matches answers by correlation id).
That is the window of a request in flight while the member's generation changes, as when an
old coordinator (stalled, its connection given up by the member's heartbeats) answers a commit
after the member has rejoined at the new one. A broker answers one connection in order, so
this is the cheap stand-in for that failover, not a broker's behaviour.
"""

from __future__ import annotations

import asyncio
import struct
from collections import defaultdict
from collections.abc import Callable

from broker.coordinator import group_offsets
from broker.coordinator.coordinator_config import GroupConfig
from client.protocol import api, framing
from client.protocol.api import ApiKey
from client.protocol.errors import ErrorCode, ProtocolError
from client.types import TopicPartition
from tests.unit.fake_cluster import FakeCluster, Received
from tests.unit.group_harness import GroupEnv, _as_sent


class FakeGroupCluster(FakeCluster):
    def __init__(self, coordinator_node: int = 1, **kwargs) -> None:
        super().__init__(**kwargs)
        self.coordinator_node = coordinator_node
        self.env = GroupEnv(config=GroupConfig(initial_rebalance_delay_ms=0, offsets_topic_num_partitions=1))
        #: api -> how many of its next requests to park; the parked ones wait in :attr:`held`
        self.hold: dict[ApiKey, int] = {}
        self.held: list[asyncio.Future] = []
        self._arrived = asyncio.Condition()

    # -- test helpers --------------------------------------------------------------------------
    def advance(self, ms: int) -> None:
        """Move the coordinator's clock: sessions without a heartbeat for ``ms`` expire."""
        self.env.timers.advance(ms)

    def committed(self, tp: TopicPartition, group_id: str) -> int:
        """The group's committed offset of ``tp`` at the coordinator (-1 for none)."""
        return self.env.fetch(group_id, [tp])[1][tp]

    async def wait_held(self, n: int = 1) -> None:
        async with self._arrived:
            await self._arrived.wait_for(lambda: len(self.held) >= n)

    def release(self) -> None:
        for gate in self.held:
            if not gate.done():
                gate.set_result(None)
        self.held.clear()

    async def stop(self) -> None:
        self.release()
        await super().stop()

    # -- serving -------------------------------------------------------------------------------
    async def _serve(self, node: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """FakeCluster._serve, except that a held request is answered by its own task."""
        self._writers.add(writer)
        parked: set[asyncio.Task] = set()
        try:
            while True:
                length = struct.unpack(">I", await reader.readexactly(4))[0]
                header, body = framing.decode_request(await reader.readexactly(length))
                try:
                    key = ApiKey(header.api_key)
                    if key is ApiKey.API_VERSIONS:
                        body = body or {}
                    else:
                        body = api.validate_request(header.api_key, header.api_version, body)
                except (ValueError, ProtocolError) as exc:
                    writer.write(
                        framing.encode_response(
                            header.correlation_id, api.error_body(ErrorCode.INVALID_REQUEST, str(exc))
                        )
                    )
                    continue
                self.requests.append(Received(node, key, body))
                handle = getattr(self, f"_{key.name.lower()}")(node, body)
                if self.hold.get(key, 0) > 0:
                    self.hold[key] -= 1
                    task = asyncio.get_running_loop().create_task(
                        self._answer_parked(handle, header.correlation_id, writer)
                    )
                    parked.add(task)
                    task.add_done_callback(parked.discard)
                    continue
                writer.write(framing.encode_response(header.correlation_id, await handle))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            for task in parked:
                task.cancel()
            self._writers.discard(writer)
            writer.close()

    async def _answer_parked(self, handle, correlation_id: int, writer: asyncio.StreamWriter) -> None:
        gate = asyncio.get_running_loop().create_future()
        self.held.append(gate)
        async with self._arrived:
            self._arrived.notify_all()
        await gate
        response = await handle
        if not writer.is_closing():
            writer.write(framing.encode_response(correlation_id, response))

    async def _answer(self, call: Callable[[Callable[[dict], None]], None]) -> dict:
        """Run a coordinator call whose answer may come later (a join waits for the group)."""
        answer: asyncio.Future = asyncio.get_running_loop().create_future()

        def respond(body: dict) -> None:
            if not answer.done():
                answer.set_result(_as_sent(body))

        call(respond)
        self.env.timers.advance(0)
        return await answer

    async def _find_coordinator(self, node: int, body: dict) -> dict:
        return {
            "error_code": 0,
            "error_message": None,
            "node_id": self.coordinator_node,
            "host": "127.0.0.1",
            "port": self.ports[self.coordinator_node],
        }

    async def _join_group(self, node: int, body: dict) -> dict:
        return await self._answer(
            lambda respond: self.env.coordinator.handle_join_group(body, "consumer", "/127.0.0.1", respond)
        )

    async def _sync_group(self, node: int, body: dict) -> dict:
        return await self._answer(lambda respond: self.env.coordinator.handle_sync_group(body, respond))

    async def _heartbeat(self, node: int, body: dict) -> dict:
        return await self._answer(lambda respond: self.env.coordinator.handle_heartbeat(body, respond))

    async def _leave_group(self, node: int, body: dict) -> dict:
        return await self._answer(lambda respond: self.env.coordinator.handle_leave_group(body, respond))

    async def _offset_commit(self, node: int, body: dict) -> dict:
        errors: dict[TopicPartition, int] = {}
        entries: dict[TopicPartition, dict] = {}
        for topic in body["topics"]:
            for entry in topic["partitions"]:
                tp = TopicPartition(topic["topic"], entry["partition"])
                if self._partition(tp.topic, tp.partition) is None:
                    errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                else:
                    entries[tp] = entry

        def call(respond: Callable[[dict], None]) -> None:
            def written(codes: dict[TopicPartition, int]) -> None:
                respond({"topics": _per_topic({**errors, **codes}, lambda code: {"error_code": int(code)})})

            if entries:
                group_offsets.handle_offset_commit(self.env.coordinator, body, entries, written)
            else:
                written({})

        return await self._answer(call)

    async def _offset_fetch(self, node: int, body: dict) -> dict:
        wanted = (
            None
            if body["topics"] is None
            else [TopicPartition(t["topic"], p) for t in body["topics"] for p in t["partitions"]]
        )
        error, offsets = group_offsets.handle_offset_fetch(self.env.coordinator, body["group_id"], wanted)

        def entry(committed: object) -> dict:
            if committed is None:
                return {"committed_offset": -1, "committed_leader_epoch": -1, "metadata": "", "error_code": 0}
            return {
                "committed_offset": committed.offset,  # type: ignore[attr-defined]
                "committed_leader_epoch": committed.leader_epoch,  # type: ignore[attr-defined]
                "metadata": committed.metadata,  # type: ignore[attr-defined]
                "error_code": 0,
            }

        return {"error_code": int(error), "topics": _per_topic(offsets, entry)}


def _per_topic(values: dict, entry: Callable[[object], dict]) -> list[dict]:
    by_topic: dict[str, list[dict]] = defaultdict(list)
    for tp, value in sorted(values.items()):
        by_topic[tp[0]].append({"partition": tp[1], **entry(value)})
    return [{"topic": topic, "partitions": parts} for topic, parts in by_topic.items()]
