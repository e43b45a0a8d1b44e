"""The deterministic simulator (docs/design.md "Simulation"): the real controller, replica
managers, fetchers and logs of N brokers in one process, under a virtual-time event loop and one
seeded random source, with an in-memory ZooKeeper beneath :class:`zk.bridge.ZkBridge`, a
simulated network, crashes and disk faults, and invariants checked after every step (in the
spirit of TigerBeetle's VOPR and FoundationDB's simulation). It imports the broker, controller,
zk and client layers; only the CLI and the tests import it.
"""
