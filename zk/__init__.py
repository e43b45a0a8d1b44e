"""The ZooKeeper layer every server-side part uses (Kafka's KafkaZkClient + ZkData): ``paths``
(every znode path), ``data`` (values and codecs, no kazoo), ``bridge`` (asyncio over kazoo),
``client`` (Kafka's reads and writes). docs/architecture.md has the map.
"""
