"""The learner's hot path on the CPU: one host sync per iteration, repeatable minibatch order,
bfloat16 autocast, prefetching, checkpoints that resume exactly, PBT state transfers, and the
CUDA settings (with torch.cuda stubbed out)."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from contextlib import contextmanager

import gymnasium as gym
import numpy as np
import pytest
import torch

from rl_pbt import parse_cfg
from rl_pbt.config.parse import recurrence
from rl_pbt.learning import learner as learner_module
from rl_pbt.learning.learner import Learner, configure_cuda
from rl_pbt.memory.buffers import FREE, QUEUED, WORKER, TrajectoryBuffers
from rl_pbt.memory.device_weights import WeightBoard, WeightsReader
from rl_pbt.memory.param_store import ParamStore
from rl_pbt.memory.slots import SlotPool
from rl_pbt.models.actor_critic import make_actor_critic
from rl_pbt.models.loading import load_policy
from rl_pbt.models.normalizer import RunningMeanStd
from rl_pbt.runtime.devices import probe_gpu_count
from rl_pbt.runtime.messages import LocalQueue

ROLLOUT = 8
OBS = gym.spaces.Box(-1, 1, (5,), np.float32)
ACTIONS = gym.spaces.Discrete(3)


def make_cfg(tmp_path, *extra: str):
    return parse_cfg(
        [
            "--env=CartPole-v1",
            f"--rollout={ROLLOUT}",
            "--batch_size=16",  # two trajectories per minibatch
            "--num_batches_per_epoch=2",
            "--num_epochs=2",
            "--encoder_mlp_layers",
            "16",
            "--rnn_size=8",
            "--max_policy_lag=5",
            f"--train_dir={tmp_path}",
            "--experiment=hot",
            *extra,
        ]
    )


def make_learner(
    tmp_path, *extra: str, seed=0, obs_space=OBS, policy_id=0, params=None, device="cpu"
):
    """A learner with its own buffers, pool and store; weights from torch seed 0."""
    cfg = make_cfg(tmp_path, *extra)
    torch.manual_seed(0)
    model = make_actor_critic(obs_space, ACTIONS, cfg)
    buffers = TrajectoryBuffers.allocate(
        TrajectoryBuffers.layout(
            24, ROLLOUT, model.obs_spec, model.act_spec, model.rnn_size, recurrence(cfg)
        )
    )
    pool = SlotPool(buffers, LocalQueue())
    pool.fill()
    params = params or ParamStore.for_model(2, model)
    exp_dir = os.path.join(str(tmp_path), "hot")
    return Learner(cfg, policy_id, model, buffers, pool, params, device, exp_dir, seed=seed)


def fill(learner: Learner, gen: torch.Generator, n_slots: int) -> list[int]:
    """Write n_slots trajectories as rollout workers would and hand them to the learner: a few
    samples invalid, a few from another policy, some too old, episode ends anywhere."""
    b, t = learner.buffers, ROLLOUT
    slots = learner.pool.acquire(n_slots, timeout=0)
    assert len(slots) == n_slots
    for s in slots:
        for key, shape, _ in learner.model.obs_spec.items():
            if b.obs[key].dtype == torch.uint8:
                b.obs[key][s] = torch.randint(0, 256, (t + 1, *shape), generator=gen)
            else:
                b.obs[key][s] = torch.randn(t + 1, *shape, generator=gen) * 2 + 1
        b.actions[s] = torch.randint(0, ACTIONS.n, (t, 1), generator=gen)
        b.log_probs[s] = -1.1 + 0.2 * torch.randn(t, generator=gen)
        b.values[s] = torch.randn(t + 1, generator=gen)
        b.rewards[s] = torch.randn(t, generator=gen)
        b.dones[s] = (torch.rand(t, generator=gen) < 0.2).float()
        b.valid[s] = torch.rand(t, generator=gen) < 0.9
        other = torch.rand(t, generator=gen) < 0.1
        b.policy_id[s] = torch.where(other, 1 - learner.policy_id, learner.policy_id).short()
        b.policy_version[s] = learner.version - torch.randint(0, 8, (t,), generator=gen)
        b.rnn_states[s] = 0.3 * torch.randn(b.rnn_states.shape[1:], generator=gen)
    b.transfer(slots, WORKER, QUEUED)
    learner.add(slots)
    return slots


# --- host syncs -------------------------------------------------------------------------------
SYNC_METHODS = ("item", "cpu", "tolist", "__bool__", "__int__", "__float__", "__index__")
# Values that live on the host on every device, so reading them waits for nothing: Adam's step
# count when the kernel is not fused (CUDA learners use the fused one) and the batch sizes of a
# packed sequence, which nn.GRU takes on the host by design.
HOST_SIDE = (
    os.sep + os.path.join("torch", "optim") + os.sep,
    os.sep + os.path.join("torch", "nn", "modules", "rnn.py"),
)


@contextmanager
def counting_syncs(monkeypatch):
    """Counts every way Python code reads a tensor back to the host (and cuda.synchronize);
    yields the list of (method, file:line of the caller) it saw."""
    seen: list[tuple[str, str]] = []

    def counted(name, original):
        def wrapper(*args, **kwargs):
            frame = sys._getframe(1)
            where = f"{frame.f_code.co_filename}:{frame.f_lineno}"
            if not any(part in frame.f_code.co_filename for part in HOST_SIDE):
                seen.append((name, where))
            return original(*args, **kwargs)

        return wrapper

    with monkeypatch.context() as m:
        for name in SYNC_METHODS:
            m.setattr(torch.Tensor, name, counted(name, getattr(torch.Tensor, name)))
        m.setattr(torch.cuda, "synchronize", counted("synchronize", torch.cuda.synchronize))
        yield seen


@pytest.mark.parametrize("vtrace", [False, True])
@pytest.mark.parametrize("rnn", [False, True])
@pytest.mark.parametrize("prefetch", [False, True])
def test_at_most_one_host_sync_per_iteration(tmp_path, monkeypatch, vtrace, rnn, prefetch):
    extra = [f"--with_vtrace={vtrace}", f"--use_rnn={rnn}", "--recurrence=4"]
    learner = make_learner(tmp_path, *extra)
    learner.prefetch = prefetch
    gen = torch.Generator().manual_seed(0)
    fill(learner, gen, 3 * learner.traj_per_iteration)
    for _ in range(3):
        with counting_syncs(monkeypatch) as seen:
            assert learner.train_if_ready()
        assert len(seen) <= 1, seen
        assert np.isfinite(list(learner.stats.values())).all(), learner.stats
    assert learner.version == 3 * 2 * 2  # epochs x minibatches per epoch, per iteration
    assert not learner.ready()


@pytest.mark.parametrize("vtrace", [False, True])
def test_training_on_the_valid_samples_alone_changes_nothing(tmp_path, vtrace):
    """A feed-forward learner on the CPU runs each minibatch on its trainable samples only;
    weights and statistics come out as from the whole masked minibatch."""
    runs = []
    for compact in (True, False):
        learner = make_learner(tmp_path, f"--with_vtrace={vtrace}", "--use_rnn=False")
        assert learner.compact
        learner.compact = compact
        fill(learner, torch.Generator().manual_seed(4), 2 * learner.traj_per_iteration)
        assert learner.train_if_ready() and learner.train_if_ready()
        runs.append((learner.model.state_dict(), learner.stats))
    (w1, s1), (w2, s2) = runs
    for k in w1:
        torch.testing.assert_close(w1[k], w2[k], rtol=1e-4, atol=1e-5, msg=k)
    for k in s1:
        assert s1[k] == pytest.approx(s2[k], rel=1e-3, abs=1e-5), k


def test_train_on_a_gathered_batch_reads_back_once(tmp_path, monkeypatch):
    learner = make_learner(tmp_path, "--use_rnn")
    slots = fill(learner, torch.Generator().manual_seed(1), learner.traj_per_iteration)
    batch = learner.buffers.gather(slots, learner.device)
    with counting_syncs(monkeypatch) as seen:
        learner.train_on(batch)
    assert len(seen) <= 1, seen
    assert learner.version == 4 and np.isfinite(learner.stats["policy_loss"])


def test_stats_and_env_steps(tmp_path):
    learner = make_learner(tmp_path, "--env_frameskip=2")
    gen = torch.Generator().manual_seed(5)
    slots = fill(learner, gen, learner.traj_per_iteration)
    b = learner.buffers
    idx = torch.tensor(slots)
    own = b.valid[idx] & (b.policy_id[idx] == 0)
    trainable = own & (b.policy_version[idx] >= -5)
    lag = -b.policy_version[idx]
    assert learner.train_if_ready()
    assert learner.env_steps == 2 * int(own.sum())
    # the lag of what is trained on: samples past --max_policy_lag are in masked_fraction
    assert learner.stats["policy_lag"] == pytest.approx(float(lag[trainable].float().mean()))
    assert float(lag[own].float().mean()) > learner.stats["policy_lag"]  # some were too old
    masked = 1 - float(trainable.sum()) / float(own.sum())
    assert learner.stats["masked_fraction"] == pytest.approx(masked)
    for key in ("policy_loss", "value_loss", "entropy", "grad_norm", "clip_fraction", "kl"):
        assert np.isfinite(learner.stats[key])
    assert learner.stats["grad_norm"] > 0 and learner.stats["entropy"] > 0
    # the weights trained on were published with the new version
    assert learner.params.current_version(0) == learner.version
    other = make_learner(tmp_path, seed=1)
    learner.params.read_into(0, other.model)
    for a, c in zip(learner.model.state_dict().values(), other.model.state_dict().values()):
        assert torch.equal(a, c)


def test_clipped_rewards_are_counted_and_noted_once(tmp_path, caplog):
    """--reward_clip: the share of this policy's samples whose scaled reward was clipped is
    logged, and the first clip is noted in one line naming the flags; no clip, no note."""
    quiet = make_learner(tmp_path, "--reward_clip=100")
    fill(quiet, torch.Generator().manual_seed(5), quiet.traj_per_iteration)
    with caplog.at_level("WARNING", logger=learner_module.__name__):
        assert quiet.train_if_ready()
    assert quiet.stats["rewards_clipped_fraction"] == 0.0
    assert "reward_clip" not in caplog.text

    learner = make_learner(tmp_path, "--reward_clip=0.5", "--reward_scale=2")
    gen = torch.Generator().manual_seed(5)
    slots = fill(learner, gen, learner.traj_per_iteration)
    b, idx = learner.buffers, torch.tensor(slots)
    own = b.valid[idx] & (b.policy_id[idx] == 0)
    expected = float((own & ((2 * b.rewards[idx]).abs() > 0.5)).sum()) / float(own.sum())
    assert 0 < expected < 1
    with caplog.at_level("WARNING", logger=learner_module.__name__):
        assert learner.train_if_ready()
        fill(learner, gen, learner.traj_per_iteration)
        assert learner.train_if_ready()
    assert learner.stats["rewards_clipped_fraction"] > 0
    notes = [r.getMessage() for r in caplog.records if "--reward_clip" in r.getMessage()]
    assert len(notes) == 1, notes
    assert "--reward_clip=0.5 after --reward_scale=2" in notes[0]
    count = int(expected * float(own.sum()) + 0.5)
    assert f"policy 0: {count} of {int(own.sum())} rewards" in notes[0]


def test_weights_shared_on_the_device_publish_within_the_one_sync(tmp_path, monkeypatch):
    """--inference=device: the iteration still reads back once, the server's reader gets the
    trained weights with their version, and the host row carries only the version."""
    learner = make_learner(tmp_path)
    board, q = WeightBoard.allocate(1), LocalQueue()
    learner.share_weights(board, q)
    learner.publish()
    reader = WeightsReader(board, 0)
    reader.attach(q.get().slots)
    host_seq = int(learner.params.seq[0])
    fill(learner, torch.Generator().manual_seed(2), 2 * learner.traj_per_iteration)
    for _ in range(2):
        with counting_syncs(monkeypatch) as seen:
            assert learner.train_if_ready()
        assert len(seen) <= 1, seen
        assert reader.changed()
        served = make_learner(tmp_path, seed=3).model
        assert reader.read_into(served) == learner.version
        for a, c in zip(learner.model.state_dict().values(), served.state_dict().values()):
            assert torch.equal(a, c)
    assert learner.params.current_version(0) == learner.version
    assert int(learner.params.seq[0]) == host_seq  # no host copy of the weights per iteration


# --- repeatability, prefetching, autocast ------------------------------------------------------
def train_losses(learner: Learner, iterations: int, data_seed: int = 0) -> list[float]:
    gen = torch.Generator().manual_seed(data_seed)
    fill(learner, gen, iterations * learner.traj_per_iteration)
    losses = []
    for _ in range(iterations):
        assert learner.train_if_ready()
        losses.append(learner.stats["policy_loss"] + learner.stats["value_loss"])
    return losses


def assert_same_weights(a: Learner, b: Learner) -> None:
    for x, y in zip(a.model.state_dict().values(), b.model.state_dict().values()):
        assert torch.equal(x, y)


@pytest.mark.parametrize("rnn", [False, True])
def test_same_seed_same_data_same_training(tmp_path, rnn):
    a = make_learner(tmp_path, f"--use_rnn={rnn}", seed=7)
    b = make_learner(tmp_path, f"--use_rnn={rnn}", seed=7)
    assert train_losses(a, 3) == train_losses(b, 3)
    assert_same_weights(a, b)
    c = make_learner(tmp_path, f"--use_rnn={rnn}", seed=8)  # another minibatch order
    train_losses(c, 3)
    assert any(not torch.equal(x, y) for x, y in zip(a.model.parameters(), c.model.parameters()))


def test_prefetch_trains_the_same_and_frees_slots_early(tmp_path):
    plain = make_learner(tmp_path, seed=3)
    early = make_learner(tmp_path, seed=3)
    early.prefetch = True
    gen = torch.Generator().manual_seed(0)
    fill(early, gen, 2 * early.traj_per_iteration)
    second = early.pending[early.traj_per_iteration :]
    assert early.train_if_ready()
    # the next batch is staged: its slots are back in the pool already
    assert early.next_batch is not None and early.pending == [] and early.ready()
    assert all(int(early.buffers.owner[s]) == FREE for s in second)
    assert early.train_if_ready() and early.next_batch is None and not early.ready()
    gen = torch.Generator().manual_seed(0)
    fill(plain, gen, 2 * plain.traj_per_iteration)
    assert plain.train_if_ready() and plain.train_if_ready()
    assert_same_weights(plain, early)
    assert plain.env_steps == early.env_steps


@pytest.mark.parametrize("rnn", [False, True])
def test_amp_trains_on_the_cpu(tmp_path, rnn):
    learner = make_learner(tmp_path, "--amp", f"--use_rnn={rnn}", "--with_vtrace")
    assert learner.amp
    before = [p.detach().clone() for p in learner.model.parameters()]
    losses = train_losses(learner, 2)
    assert np.isfinite(losses).all()
    assert all(np.isfinite(v) for v in learner.stats.values())
    changed = [not torch.equal(b, p) for b, p in zip(before, learner.model.parameters())]
    assert all(changed)
    assert all(p.dtype == torch.float32 for p in learner.model.parameters())


def test_impala_encoder_trains(tmp_path):
    space = gym.spaces.Box(0, 255, (3, 84, 84), np.uint8)
    learner = make_learner(tmp_path, "--encoder_conv_architecture=convnet_impala", obs_space=space)
    assert np.isfinite(train_losses(learner, 1)).all()


@pytest.mark.parametrize("shape", [(3, 84, 84), (4, 84, 84), (3, 72, 128)])
def test_impala_encoder_builds_and_runs(tmp_path, shape):
    cfg = make_cfg(tmp_path, "--encoder_conv_architecture=convnet_impala")
    model = make_actor_critic(gym.spaces.Box(0, 255, shape, np.uint8), ACTIONS, cfg)
    convs = [m for m in model.encoders["obs"].modules() if isinstance(m, torch.nn.Conv2d)]
    assert [c.out_channels for c in convs] == [16] * 5 + [32] * 10  # 3 x (conv + 2 blocks)
    obs = {"obs": torch.randint(0, 256, (2, *shape), dtype=torch.uint8)}
    actions, logp, values, _ = model.act(obs, None)
    assert actions.shape == (2, 1) and torch.isfinite(logp).all() and torch.isfinite(values).all()
    height, width = shape[1:]
    for _ in range(3):  # each max-pool halves the size, rounding up
        height, width = (height + 1) // 2, (width + 1) // 2
    assert model.encoders["obs"](obs["obs"].float()).shape == (2, 32 * height * width)


# --- checkpoints and PBT transfers --------------------------------------------------------------
def adam_state(learner: Learner) -> list[dict[str, torch.Tensor]]:
    return [learner.optimizer.state[p] for p in learner.model.parameters()]


def test_checkpoint_resumes_exactly(tmp_path):
    a = make_learner(tmp_path, "--use_rnn", seed=1)
    train_losses(a, 2)
    a.save()
    saved = {k: v.clone() for k, v in a.model.state_dict().items()}
    b = make_learner(tmp_path, "--use_rnn", seed=2)
    assert b.load_latest()  # weights_only=True: what was saved is plain data
    assert (b.version, b.env_steps, b.hp) == (a.version, a.env_steps, a.hp)
    assert_same_weights(a, b)
    for sa, sb, p in zip(adam_state(a), adam_state(b), b.model.parameters()):
        assert set(sa) == set(sb) == {"exp_avg", "exp_avg_sq", "step"}
        for key in ("exp_avg", "exp_avg_sq"):
            assert torch.equal(sa[key], sb[key]) and sb[key].device == p.device
        assert torch.equal(sa["step"], sb["step"]) and sb["step"].dtype == torch.float32
    # the same data in the same order: both go on identically
    a.generator.manual_seed(11)
    b.generator.manual_seed(11)
    assert train_losses(a, 1, data_seed=4) == train_losses(b, 1, data_seed=4)
    assert_same_weights(a, b)
    for sa, sb in zip(adam_state(a), adam_state(b)):
        assert all(torch.equal(sa[k], sb[k]) for k in sa)
    # and the evaluation loader reads the same checkpoint
    model = load_policy(a.exp_dir, 0, OBS, ACTIONS, a.cfg)
    for k, v in model.state_dict().items():
        assert torch.equal(v, saved[k])


def test_pbt_transfer_is_bit_exact_and_drops_a_staged_batch(tmp_path):
    src = make_learner(tmp_path, "--use_rnn", seed=1)
    dst = make_learner(tmp_path, "--use_rnn", seed=2, policy_id=1, params=src.params)
    train_losses(src, 2)
    src.model.ret_norm.mean.fill_(1 / 3)  # a float64 value float32 cannot hold
    dst.prefetch = True
    train_losses(dst, 1)
    gen = torch.Generator().manual_seed(9)
    fill(dst, gen, 2 * dst.traj_per_iteration)
    assert dst.train_if_ready() and dst.next_batch is not None
    staged = dst.next_batch.host
    own = int((staged["valid"] & (staged["policy_id"] == 1)).sum())
    steps, version = dst.env_steps, dst.version
    src.export_state()
    dst.import_state(0)
    assert_same_weights(src, dst)
    assert dst.model.ret_norm.mean.item() == 1 / 3
    for sa, sb in zip(adam_state(src), adam_state(dst)):
        assert all(torch.equal(sa[k], sb[k]) for k in ("exp_avg", "exp_avg_sq", "step"))
    assert dst.next_batch is None and not dst.ready()
    assert dst.env_steps == steps + own
    assert dst.version == version + dst.cfg.max_policy_lag + 1


# --- pieces -------------------------------------------------------------------------------------
def test_masked_normalizer_update_equals_indexed_update():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(6, 8, 3, generator=gen, dtype=torch.float64) * 3 + 2
    mask = torch.rand(6, 8, generator=gen) < 0.7
    x[~mask] = float("nan")  # sentinels where nothing was written
    indexed, masked = RunningMeanStd((3,)), RunningMeanStd((3,))
    for _ in range(3):
        indexed.update(x[mask])
        masked.update_masked(x, mask)
    for key in ("mean", "var", "count"):
        torch.testing.assert_close(getattr(masked, key), getattr(indexed, key), rtol=1e-12, atol=0)
    before = {k: v.clone() for k, v in masked.state_dict().items()}
    masked.update_masked(x, torch.zeros_like(mask))  # nothing valid: nothing changes
    for k, v in masked.state_dict().items():
        assert torch.equal(v, before[k])


CUDA_FLAGS = (
    (torch.backends.cudnn, "benchmark"),
    (torch.backends.cudnn, "allow_tf32"),
    (torch.backends.cuda.matmul, "allow_tf32"),
)


def test_configure_cuda_sets_the_flags(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: calls.append(d))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 2)
    saved = [getattr(module, name) for module, name in CUDA_FLAGS]  # process-wide flags
    try:
        cfg = parse_cfg(["--env=CartPole-v1", "--cudnn_benchmark", "--tf32=False"])
        assert configure_cuda(torch.device("cuda"), cfg) == torch.device("cuda", 2)
        assert calls == [torch.device("cuda", 2)]
        assert [getattr(m, n) for m, n in CUDA_FLAGS] == [True, False, False]
        cfg = parse_cfg(["--env=CartPole-v1"])
        assert configure_cuda(torch.device("cuda", 1), cfg) == torch.device("cuda", 1)
        assert calls[-1] == torch.device("cuda", 1)
        assert [getattr(m, n) for m, n in CUDA_FLAGS] == [False, True, True]
    finally:
        for (module, name), value in zip(CUDA_FLAGS, saved):
            setattr(module, name, value)


def test_indices_reach_the_device_in_one_copy():
    tensors = [torch.arange(5), torch.arange(6).view(2, 3), torch.zeros(0, dtype=torch.long)]
    assert learner_module.to_device_at_once(tensors, torch.device("cpu")) is tensors
    moved = learner_module.to_device_at_once(tensors, torch.device("meta"))
    assert [t.shape for t in moved] == [t.shape for t in tensors]
    assert all(t.device.type == "meta" for t in moved)


# --- on a CUDA device ---------------------------------------------------------------------------
def cuda_checks(tmp: str) -> None:
    """The CUDA path for real: at most one synchronising call per iteration as CUDA itself
    counts them (prefetching on a side stream, fused Adam), published weights equal to the
    trained ones, checkpoints moving between the CPU and the device."""
    for i, extra in enumerate(([], ["--use_rnn", "--with_vtrace"], ["--use_rnn", "--amp"])):
        exp = os.path.join(tmp, str(i))
        learner = make_learner(exp, *extra, "--recurrence=4", device="cuda")
        assert learner.prefetch and learner.optimizer.param_groups[0]["fused"]
        fill(learner, torch.Generator().manual_seed(0), 5 * learner.traj_per_iteration)
        assert learner.train_if_ready()  # warm-up: library handles, memory pools
        torch.cuda.set_sync_debug_mode("warn")
        try:
            for _ in range(3):
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    assert learner.train_if_ready()
                syncs = [str(w.message) for w in caught if "synchroniz" in str(w.message)]
                assert len(syncs) <= 1, syncs
        finally:
            torch.cuda.set_sync_debug_mode("default")
        assert np.isfinite(list(learner.stats.values())).all(), learner.stats
        for device in ("cpu", "cuda"):
            copy = make_actor_critic(OBS, ACTIONS, learner.cfg).to(device)
            assert learner.params.read_into(0, copy) == learner.version
            for a, b in zip(copy.state_dict().values(), learner.model.state_dict().values()):
                assert torch.equal(a.cpu(), b.cpu())
        learner.save()
        cpu = make_learner(exp, *extra, "--recurrence=4")
        assert cpu.load_latest()
        gpu = make_learner(exp, *extra, "--recurrence=4", device="cuda")
        assert gpu.load_latest()
        for other in (cpu, gpu):
            for sa, sb, p in zip(adam_state(learner), adam_state(other), other.model.parameters()):
                assert sb["exp_avg"].device == sb["exp_avg_sq"].device == p.device
                assert sb["step"].device == (p.device if other.cuda else torch.device("cpu"))
                assert all(torch.equal(sa[k].cpu(), sb[k].cpu()) for k in sa)
            assert np.isfinite(train_losses(other, 1)).all()


@pytest.mark.cuda
@pytest.mark.skipif(probe_gpu_count() == 0, reason="needs a CUDA device")
def test_cuda_hot_path(tmp_path):
    # in a child process: CUDA stays out of the test runner, whose forked children must not
    # inherit it
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    code = (
        f"from tests.unit.test_learner_hot_path import cuda_checks; cuda_checks({str(tmp_path)!r})"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-8000:]


@pytest.mark.parametrize("vtrace", [False, True])
def test_reward_scale_and_clip_train_as_rewards_scaled_by_hand(tmp_path, vtrace):
    """--reward_scale=0.5 --reward_clip=0.6 trains exactly as the defaults do on the same data
    with each reward halved and clipped to [-0.6, 0.6] by hand."""
    flags = [f"--with_vtrace={vtrace}"]
    a = make_learner(tmp_path, *flags, "--reward_scale=0.5", "--reward_clip=0.6", seed=7)
    b = make_learner(tmp_path, *flags, seed=7)
    for learner in (a, b):
        slots = fill(learner, torch.Generator().manual_seed(0), 2 * learner.traj_per_iteration)
    rewards = b.buffers.rewards[slots]
    assert rewards.abs().max() > 1.2  # the clip matters for some rewards
    by_hand = np.clip(rewards.numpy() * np.float32(0.5), -0.6, 0.6).astype(np.float32)
    b.buffers.rewards[slots] = torch.from_numpy(by_hand)
    losses = []
    for learner in (a, b):
        learner.train_if_ready()
        learner.train_if_ready()
        losses.append(learner.stats["value_loss"])
    assert losses[0] == losses[1]
    assert_same_weights(a, b)
    c = make_learner(tmp_path, *flags, seed=7)  # the raw rewards train otherwise
    fill(c, torch.Generator().manual_seed(0), 2 * c.traj_per_iteration)
    c.train_if_ready()
    c.train_if_ready()
    assert any(not torch.equal(x, y) for x, y in zip(a.model.parameters(), c.model.parameters()))


@pytest.mark.parametrize("vtrace", [False, True])
def test_the_value_clip_is_taken_around_the_actors_values(tmp_path, vtrace):
    """--ppo_clip_value bounds the new value around the value the actor stored: a tight clip
    trains otherwise than a clip that never binds. Taken around the targets instead (or the
    new values), the clip would change nothing, and the two would train alike."""
    flags = [f"--with_vtrace={vtrace}"]
    tight = make_learner(tmp_path, *flags, "--ppo_clip_value=0.01", seed=7)
    loose = make_learner(tmp_path, *flags, "--ppo_clip_value=1e6", seed=7)
    plain = make_learner(tmp_path, *flags, "--ppo_clip_value=1e7", seed=7)
    for learner in (tight, loose, plain):
        fill(learner, torch.Generator().manual_seed(0), 2 * learner.traj_per_iteration)
        learner.train_if_ready()
        learner.train_if_ready()
    assert_same_weights(loose, plain)  # neither clip binds
    assert tight.stats["value_loss"] != loose.stats["value_loss"]
    assert any(
        not torch.equal(x, y) for x, y in zip(tight.model.parameters(), loose.model.parameters())
    )


@pytest.mark.parametrize("vtrace", [False, True])
def test_late_rewards_add_to_the_last_step_as_they_are(tmp_path, vtrace):
    """A waiting agent's rewards after a rollout's last step (`late_rewards`, already scaled and
    clipped one by one by the rollout worker) add to that step's reward after the learner has
    clipped it, and are not clipped again: --reward_clip=1 with 3.0 late trains exactly as the
    defaults do on the same data with each reward clipped to [-1, 1] by hand and 3.0 added to
    the last step."""
    flags = [f"--with_vtrace={vtrace}"]
    a = make_learner(tmp_path, *flags, "--reward_clip=1", seed=7)
    b = make_learner(tmp_path, *flags, seed=7)
    for learner in (a, b):
        slots = fill(learner, torch.Generator().manual_seed(0), 2 * learner.traj_per_iteration)
    a.buffers.late_rewards[slots] = 3.0
    by_hand = b.buffers.rewards[slots].clamp(-1.0, 1.0)
    by_hand[:, -1] += 3.0
    b.buffers.rewards[slots] = by_hand
    for learner in (a, b):
        learner.train_if_ready()
        learner.train_if_ready()
    assert a.stats["value_loss"] == b.stats["value_loss"]
    assert_same_weights(a, b)
