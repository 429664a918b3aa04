"""What the runner says a silent component was doing."""

from rl_pbt.runtime.heartbeat import ALL_POLICIES, INFERENCE, SNAPSHOT_PASS, STEPPING, Heartbeats


def test_a_fused_pass_for_all_policies_is_named_as_such():
    """A worker's or inference server's one pass for all its policies beats with detail -1:
    the error named "policy -1"."""
    beats = Heartbeats(["rollout_worker_0", "inference_cpu"])
    beats.beat(0, INFERENCE, -1)
    beats.beat(1, INFERENCE, 2)
    assert beats.describe(0) == "running inference for all its policies"
    assert beats.describe(1) == "running inference for policy 2"
    beats.beat(0, INFERENCE, ALL_POLICIES)
    assert beats.describe(0) == "running inference for all its policies"
    beats.beat(0, INFERENCE, SNAPSHOT_PASS)  # a rollout worker acting for a snapshot's seat
    assert beats.describe(0) == "running inference for a frozen snapshot"
    beats.beat(0, STEPPING, 3)
    assert beats.describe(0) == "stepping env 3"
