"""The local runner's one error type: anything the operator must act on (a dead broker, a
timeout, a missing state file); the ``floodmark cluster`` commands print it as one line."""

from __future__ import annotations


class ClusterError(RuntimeError):
    """Anything the operator must act on: a dead broker, a timeout, a missing state file."""
