"""The local cluster runner (docs/operations.md): one ZooKeeper and N broker processes on this
machine, the state file that remembers them, and the network namespaces and ports they use.

``devcluster.cluster.LocalCluster`` composes the parts: ``state`` (the state file and each
broker's server.properties, with its /metrics port), ``launch`` (starting ZooKeeper and the brokers
and waiting until ZooKeeper shows them), ``report`` (``floodmark cluster status``),
``processes`` (starting, signalling and reaping broker processes),
``zookeeper`` (the ZooKeeper server process and what the runner reads from it), ``netns``
(one network namespace per broker) and ``ports`` (free loopback ports). Brokers run as
processes (``python -m broker``): nothing here imports ``broker`` or ``controller``. Users are
the operator's composition root (``cli``), the chaos runner, the tests and the benchmarks.
"""
