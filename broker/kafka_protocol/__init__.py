"""Kafka's binary protocol on a listener of its own, for Kafka's own clients (kcat, librdkafka,
kafka-python, aiokafka): the codec (codec.py, header.py, entities.py) and one translator per API
between Kafka's messages and our request bodies (data_apis.py, group_apis.py, admin_apis.py).
docs/design.md "Two wire protocols".
"""
