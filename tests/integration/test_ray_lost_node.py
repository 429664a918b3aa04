"""A node lost for good under a population on Ray: the group that ran there cannot be placed
again (the cluster has no room left), the run stops once it has not answered for
--ray_group_timeout_s, the other group is stopped and saved, and the same command, on a
cluster with a node again, resumes both groups and trains to the budget. Its own 2-node
cluster (one CPU each), since it removes one. Slow (about 80 s): `python -m pytest -m slow`."""

import json
import os
import threading
import time

import pytest

from rl_pbt import parse_cfg, train

ray = pytest.importorskip("ray")

pytestmark = pytest.mark.slow


def flags(train_dir, address, steps):
    return [
        "--env=CartPole-v1",
        "--num_policies=4",
        "--policies_per_node=2",
        "--num_workers=1",
        f"--ray_address={address}",
        f"--train_dir={train_dir}",
        "--experiment=lost",
        f"--train_for_env_steps={steps}",
        "--save_every_sec=3",
        "--ray_group_timeout_s=20",
        "--seed=1",
    ]


def remove_node_under_a_group(cluster, node, exp, out):
    """Remove `node` once both groups have trained a little (population.json says where each
    group runs); out: the group that ran there, and when."""
    deadline = time.time() + 180
    while time.time() < deadline:
        try:
            with open(os.path.join(exp, "population.json")) as f:
                population = json.load(f)
        except (OSError, ValueError):
            population = {}
        nodes = population.get("group_nodes", {})
        if len(nodes) == 2 and min(population.get("env_steps", [0])) > 5000:
            out["group"] = [int(g) for g, n in nodes.items() if n == node.node_id]
            out["removed"] = time.monotonic()
            cluster.remove_node(node)
            return
        time.sleep(0.5)


def test_a_lost_node_stops_the_run_and_the_same_command_resumes_it(tmp_path, capsys):
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    node = cluster.add_node(num_cpus=1)
    ray.init(address=cluster.address, configure_logging=False)
    try:
        exp = os.path.join(tmp_path, "lost")
        out = {}
        remover = threading.Thread(
            target=remove_node_under_a_group, args=(cluster, node, exp, out), daemon=True
        )
        remover.start()
        assert train(parse_cfg(flags(tmp_path, cluster.address, 1_000_000))) == 1
        stopped = time.monotonic()
        text = capsys.readouterr().out
        (g,) = out["group"]
        assert f"ERROR: node group {g} has not answered for 20 s" in text, text[-3000:]
        assert f"node group {g} is not answering: not waited for at the stop" in text
        # the timeout, the stop's grace for a last answer and the other group's save; not the
        # 6 minutes of a stop that waits for the lost group
        assert stopped - out["removed"] < 120, stopped - out["removed"]
        population = json.loads(open(os.path.join(exp, "population.json")).read())
        saved = population["env_steps"]

        cluster.add_node(num_cpus=1)  # a node again: the same command resumes
        assert train(parse_cfg(flags(tmp_path, cluster.address, max(saved) + 20_000))) == 0
        text = capsys.readouterr().out
        assert "(resuming)" in text
        after = json.loads(open(os.path.join(exp, "population.json")).read())["env_steps"]
        assert all(a >= max(saved) + 20_000 for a in after), (saved, after)
        for member in range(4):
            folder = os.path.join(exp, "groups", f"g{member // 2}", f"checkpoint_p{member % 2}")
            assert os.listdir(folder), folder
    finally:
        ray.shutdown()
        cluster.shutdown()
