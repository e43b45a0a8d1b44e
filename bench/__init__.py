"""floodmark's benchmarks: ``bench/run_all.py`` (``make bench``) and ``bench/failover.py``.

They start a throw-away local cluster (devcluster.cluster.LocalCluster) on free loopback
ports, drive it with the ``floodmark perf`` tools and the client library, and write their
results to stdout and to docs/benchmarks.md between markers.
"""
