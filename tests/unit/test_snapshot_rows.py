"""More members freezing a snapshot in one turn of the main loop than the pool holds: each
param-store row is written by one learner only, for a snapshot still in the pool."""

from types import MethodType, SimpleNamespace

from rl_pbt.runtime.messages import LocalQueue, drain
from rl_pbt.runtime.runner import Runner
from rl_pbt.sampling.elo import EloRatings
from rl_pbt.sampling.matchmaking import SnapshotPool


def test_one_learner_per_row_when_the_pool_overflows_at_once():
    members, pool = 5, 2
    runner = SimpleNamespace(
        num_policies=members,
        cfg=SimpleNamespace(selfplay_snapshot_every_env_steps=1000, matchmaking="uniform"),
        env_steps=[1000] * members,
        last_snapshot_steps=[0] * members,
        snapshots=SnapshotPool(pool),
        snapshot_rows={},
        snapshot_row_of={},
        elo=EloRatings(),
        learner_queues=[LocalQueue() for _ in range(members)],
        worker_queues=[LocalQueue()],
    )
    for name in ("_pool_row", "_broadcast_snapshots"):
        setattr(runner, name, MethodType(getattr(Runner, name), runner))
    Runner._snapshot_step(runner)
    writes = [(p, m.row, m.snapshot_id) for p in range(members)
              for m in drain(runner.learner_queues[p])]  # fmt: skip
    rows = [row for _, row, _ in writes]
    assert len(rows) == len(set(rows)) == pool  # no row written twice
    assert {sid for _, _, sid in writes} == set(runner.snapshots.ids())
    assert all(runner.snapshot_row_of[sid] == row for _, row, sid in writes)
    assert all(runner.last_snapshot_steps[p] == 1000 for p in range(members))
