"""Adversarial review of ``floodmark reassign --throttle`` (cli/reassign.py, cli/reassign_throttle.py)
against Kafka 3.7's ReassignPartitionsCommand (tools/.../reassign/ReassignPartitionsCommand.java),
through CliRunner against tests/unit/fake_cluster.py as tests/unit/test_cli_reassign_throttle.py does.
"""

from __future__ import annotations

from tests.unit.test_cli_reassign import invoke, plan, write
from tests.unit.test_cli_reassign_throttle import FOLLOWER_REPLICAS, LEADER_REPLICAS, fake, ok

__all__ = ["fake"]  # the fixture, imported for pytest


def test_a_second_plan_for_the_same_topic_keeps_the_running_moves_throttle(fake, tmp_path):
    """Interleaving: ``--execute --throttle`` starts t-0 [1,2,3] -> [1,2,4] (topic t throttled:
    leader 0:1,0:2,0:3, follower 0:4); while t-0 still copies, a second plan moves another
    partition of the same topic, t-2 [3,4,5] -> [3,4,1], also with ``--throttle``.

    Kafka 3.7: executeAssignment refuses the second plan without --additional ("Cannot execute
    because there is an existing partition assignment"), and with --additional
    calculateProposedMoveMap starts from calculateCurrentMoveMap(currentReassignments), so topic
    t's throttled-replicas configs name the running t-0 move as well as t-2's. Either way t-0 stays
    throttled. floodmark: _execute asks ListPartitionReassignments about the plan's partitions
    only, set_throttle -> throttled_replicas computes topic t's two configs from the plan alone
    and AlterConfigs replaces them: t-0's entries are gone, so t-0's copy runs unthrottled at
    whatever the network gives (the throttle the operator set to protect the cluster is lost
    silently; the tool prints the limit line as if applied).
    """
    first = write(tmp_path / "a.json", plan(("t", 0, [1, 2, 4])))
    ok(invoke(fake, "--execute", "--reassignment-json-file", first, "--throttle", "1000"))
    assert fake.topic_configs["t"][LEADER_REPLICAS] == "0:1,0:2,0:3"
    assert ("t", 0) in fake.reassignments  # t-0 still moving

    second = write(tmp_path / "b.json", plan(("t", 2, [3, 4, 1])))
    result = invoke(fake, "--execute", "--reassignment-json-file", second, "--throttle", "1000")
    leader = fake.topic_configs["t"].get(LEADER_REPLICAS, "").split(",")
    follower = fake.topic_configs["t"].get(FOLLOWER_REPLICAS, "").split(",")
    assert {"0:1", "0:2", "0:3"} <= set(leader) and "0:4" in follower, (
        "the running move t-0 lost its throttle: topic t now has "
        f"{LEADER_REPLICAS}={fake.topic_configs['t'].get(LEADER_REPLICAS)!r}, "
        f"{FOLLOWER_REPLICAS}={fake.topic_configs['t'].get(FOLLOWER_REPLICAS)!r} "
        f"(second --execute exit {result.exit_code}: {result.stdout.splitlines()[-1:]})"
    )
