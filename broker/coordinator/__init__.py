"""The group coordinator (Kafka's kafka.coordinator.group; seed 004; docs/design.md "Consumer groups").

Every broker runs one; it coordinates the groups whose ``__consumer_offsets`` partition this broker
leads. :mod:`~broker.coordinator.group_metadata` holds a group's state machine,
:mod:`~broker.coordinator.group_coordinator` the join/sync/heartbeat protocol,
:mod:`~broker.coordinator.group_metadata_manager` the offsets topic (writes and loading).
"""
