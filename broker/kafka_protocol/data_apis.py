"""The data path and cluster metadata on the Kafka listener: Metadata, Produce, Fetch,
ListOffsets, OffsetForLeaderEpoch (KIP-320's client side) and InitProducerId (docs/design.md
"Two wire protocols"; the versions are docs/operations.md "Using Kafka's clients").

Record batches pass through as the bytes they are: Produce's ``records`` go to the handler as
they came (the log validates RecordBatch v2 without decoding records), Fetch's come back from
the log. Nothing here touches a record.

What differs from our own protocol:

- Fetch: the listener serves consumers only. ``replica_id`` is forced to -1 (a client claiming
  to be a follower would otherwise move the high watermark), so replication stays on the
  inter-broker msgpack listener. KIP-227 fetch sessions are not kept: every answer carries
  session id 0, which a client reads as "no session, send full requests" (Kafka's answer when
  its session cache is full); an incremental request (epoch > 0) is answered
  FETCH_SESSION_ID_NOT_FOUND by the codec, as Kafka answers a session it does not know.
- Metadata v0 asks for every topic with an empty list (v1+: with null); before v4 topics are
  auto-created when ``auto.create.topics.enable`` allows (v4 added the request's flag).
- Topic ids (Metadata v10+, KIP-516) are the controller's, from /brokers/topics/<t> through
  UpdateMetadata; the zero UUID for a topic whose id the broker has not heard yet.
"""

from __future__ import annotations

import uuid
from typing import Any

from broker.kafka_protocol.entities import make, response_class, response_module, to_ms
from broker.kafka_protocol.kafka_api import KafkaApi
from client.protocol.api import CONSUMER_REPLICA_ID, ApiKey
from client.protocol.topic_id import ZERO_UUID, uuid_bytes

#: Kafka's "not requested" value of the authorized-operations fields.
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)


# -- Metadata ------------------------------------------------------------------------------------


def metadata_body(request: Any, version: int) -> dict:
    topics = request.topics
    names = None if topics is None else [t.name for t in topics if t.name is not None]
    if version == 0 and not names:
        names = None  # v0: an empty list means every topic
    allow = request.allow_auto_topic_creation if version >= 4 else True
    return {"topics": names, "allow_auto_topic_creation": bool(allow)}


def metadata_response(body: dict, request: Any, version: int) -> Any:
    m = response_module(ApiKey.METADATA, version)
    brokers = tuple(
        make(m.MetadataResponseBroker, node_id=b["node_id"], host=b["host"], port=b["port"], rack=b["rack"])
        for b in body["brokers"]
    )
    topics = tuple(
        make(
            m.MetadataResponseTopic,
            error_code=t["error_code"],
            name=t["topic"],
            topic_id=kafka_uuid(t.get("topic_id", ZERO_UUID)),
            is_internal=t["is_internal"],
            partitions=tuple(
                make(
                    m.MetadataResponsePartition,
                    error_code=p["error_code"],
                    partition_index=p["partition"],
                    leader_id=p["leader"],
                    leader_epoch=p["leader_epoch"],
                    replica_nodes=tuple(p["replicas"]),
                    isr_nodes=tuple(p["isr"]),
                    offline_replicas=tuple(p["offline_replicas"]),
                )
                for p in t["partitions"]
            ),
            topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
        )
        for t in body["topics"]
    )
    return make(
        response_class(ApiKey.METADATA, version),
        throttle_time=0,
        brokers=brokers,
        cluster_id=body["cluster_id"],
        controller_id=body["controller_id"],
        topics=topics,
        cluster_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
    )


def kafka_uuid(topic_id: str) -> uuid.UUID | None:
    """Kafka's Uuid text as the codec's UUID (None: the zero UUID)."""
    return None if topic_id == ZERO_UUID else uuid.UUID(bytes=uuid_bytes(topic_id))


# -- Produce -------------------------------------------------------------------------------------


def produce_body(request: Any, version: int) -> dict:
    return {
        "acks": request.acks,
        "timeout_ms": to_ms(request.timeout),
        "transactional_id": request.transactional_id,
        "topics": [
            {
                "topic": t.name,
                "partitions": [
                    {"partition": p.index, "records": bytes(p.records or b"")} for p in t.partition_data
                ],
            }
            for t in request.topic_data
        ],
    }


def produce_response(body: dict, request: Any, version: int) -> Any:
    m = response_module(ApiKey.PRODUCE, version)
    return make(
        response_class(ApiKey.PRODUCE, version),
        responses=tuple(
            make(
                m.TopicProduceResponse,
                name=t["topic"],
                partition_responses=tuple(
                    make(
                        m.PartitionProduceResponse,
                        index=p["partition"],
                        error_code=p["error_code"],
                        base_offset=p["base_offset"],
                        log_append_time=p["log_append_time"],
                        log_start_offset=p["log_start_offset"],
                        error_message=p["error_message"],
                    )
                    for p in t["partitions"]
                ),
            )
            for t in body["topics"]
        ),
        throttle_time=body["throttle_time_ms"],
    )


# -- Fetch ---------------------------------------------------------------------------------------

#: KIP-227's epochs of a full (sessionless or session-creating) fetch request.
FULL_FETCH_EPOCHS = (0, -1)


def is_incremental_fetch(request: Any) -> bool:
    """A fetch that continues a session (epoch > 0): sessions are not kept, so it is refused."""
    return getattr(request, "session_epoch", -1) not in FULL_FETCH_EPOCHS


def fetch_body(request: Any, version: int) -> dict:
    return {
        "replica_id": CONSUMER_REPLICA_ID,
        "max_wait_ms": to_ms(request.max_wait),
        "min_bytes": request.min_bytes,
        "max_bytes": getattr(request, "max_bytes", 0x7FFFFFFF),
        "isolation_level": getattr(request, "isolation_level", 0),
        "topics": [
            {
                "topic": t.topic,
                "partitions": [
                    {
                        "partition": p.partition,
                        "fetch_offset": p.fetch_offset,
                        "current_leader_epoch": getattr(p, "current_leader_epoch", -1),
                        "log_start_offset": getattr(p, "log_start_offset", -1),
                        "partition_max_bytes": p.partition_max_bytes,
                    }
                    for p in t.partitions
                ],
            }
            for t in request.topics
        ],
    }


def fetch_response(body: dict, request: Any, version: int) -> Any:
    m = response_module(ApiKey.FETCH, version)
    return make(
        response_class(ApiKey.FETCH, version),
        throttle_time=body["throttle_time_ms"],
        error_code=body["error_code"],
        session_id=0,
        responses=tuple(
            make(
                m.FetchableTopicResponse,
                topic=t["topic"],
                partitions=tuple(
                    make(
                        m.PartitionData,
                        partition_index=p["partition"],
                        error_code=p["error_code"],
                        high_watermark=p["high_watermark"],
                        last_stable_offset=p["last_stable_offset"],
                        log_start_offset=p["log_start_offset"],
                        aborted_transactions=None,
                        preferred_read_replica=-1,
                        records=p["records"],
                    )
                    for p in t["partitions"]
                ),
            )
            for t in body["topics"]
        ),
    )


# -- ListOffsets, OffsetForLeaderEpoch, InitProducerId ------------------------------------------


def list_offsets_body(request: Any, version: int) -> dict:
    return {
        "replica_id": request.replica_id,
        "isolation_level": getattr(request, "isolation_level", 0),
        "topics": [
            {
                "topic": t.name,
                "partitions": [
                    {
                        "partition": p.partition_index,
                        "timestamp": p.timestamp,
                        "current_leader_epoch": getattr(p, "current_leader_epoch", -1),
                    }
                    for p in t.partitions
                ],
            }
            for t in request.topics
        ],
    }


def list_offsets_response(body: dict, request: Any, version: int) -> Any:
    m = response_module(ApiKey.LIST_OFFSETS, version)
    return make(
        response_class(ApiKey.LIST_OFFSETS, version),
        throttle_time=0,
        topics=tuple(
            make(
                m.ListOffsetsTopicResponse,
                name=t["topic"],
                partitions=tuple(
                    make(
                        m.ListOffsetsPartitionResponse,
                        partition_index=p["partition"],
                        error_code=p["error_code"],
                        timestamp=p["timestamp"],
                        offset=p["offset"],
                        leader_epoch=p["leader_epoch"],
                    )
                    for p in t["partitions"]
                ),
            )
            for t in body["topics"]
        ),
    )


def epoch_body(request: Any, version: int) -> dict:
    return {
        "replica_id": getattr(request, "replica_id", CONSUMER_REPLICA_ID),
        "topics": [
            {
                "topic": t.topic,
                "partitions": [
                    {
                        "partition": p.partition,
                        "leader_epoch": p.leader_epoch,
                        "current_leader_epoch": p.current_leader_epoch,
                    }
                    for p in t.partitions
                ],
            }
            for t in request.topics
        ],
    }


def epoch_response(body: dict, request: Any, version: int) -> Any:
    m = response_module(ApiKey.OFFSET_FOR_LEADER_EPOCH, version)
    return make(
        response_class(ApiKey.OFFSET_FOR_LEADER_EPOCH, version),
        throttle_time=0,
        topics=tuple(
            make(
                m.OffsetForLeaderTopicResult,
                topic=t["topic"],
                partitions=tuple(
                    make(
                        m.EpochEndOffset,
                        error_code=p["error_code"],
                        partition=p["partition"],
                        leader_epoch=p["leader_epoch"],
                        end_offset=p["end_offset"],
                    )
                    for p in t["partitions"]
                ),
            )
            for t in body["topics"]
        ),
    )


def init_producer_id_body(request: Any, version: int) -> dict:
    return {
        "transactional_id": request.transactional_id,
        "transaction_timeout_ms": to_ms(request.transaction_timeout),
        "producer_id": getattr(request, "producer_id", -1),
        "producer_epoch": getattr(request, "producer_epoch", -1),
    }


def init_producer_id_response(body: dict, request: Any, version: int) -> Any:
    return make(
        response_class(ApiKey.INIT_PRODUCER_ID, version),
        throttle_time=body["throttle_time_ms"],
        error_code=body["error_code"],
        producer_id=body["producer_id"],
        producer_epoch=body["producer_epoch"],
    )


DATA_APIS: tuple[KafkaApi, ...] = (
    KafkaApi(ApiKey.METADATA, 0, 12, metadata_body, metadata_response),
    KafkaApi(ApiKey.PRODUCE, 3, 9, produce_body, produce_response),
    KafkaApi(ApiKey.FETCH, 4, 11, fetch_body, fetch_response),
    KafkaApi(ApiKey.LIST_OFFSETS, 1, 6, list_offsets_body, list_offsets_response),
    KafkaApi(ApiKey.OFFSET_FOR_LEADER_EPOCH, 2, 4, epoch_body, epoch_response),
    KafkaApi(ApiKey.INIT_PRODUCER_ID, 0, 4, init_producer_id_body, init_producer_id_response),
)
