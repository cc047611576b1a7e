"""Q-chunking: an actor-critic over action chunks (policy=sac_mlp policy.horizon=H), trained by chunked TD on
windows of H steps offline (the store's WindowSampler) and online (ReplayWindows over the online buffer)."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from embodied import keys
from embodied.algorithms.calql import CalQL
from embodied.algorithms.iql import IQL
from embodied.algorithms.offpolicy_losses import chunked_td_target, soft_td_target
from embodied.algorithms.sac import RLPD, backup
from embodied.cli import compose
from embodied.data.replay import ReplayBuffer, ReplayWindows
from embodied.runner import checkpoint
from embodied.runner.pipeline import Pipeline
from embodied.specs import Spec
from policies.sac_mlp import SACPolicy

H, A, D = 3, 2, 4
OBS_SPEC = {keys.STATE: Spec((D,), torch.float32)}
ACTION_SPEC = Spec((A,), torch.float32, low=-1.0, high=1.0)


def policy(horizon: int = H, **config) -> SACPolicy:
    torch.manual_seed(0)
    return SACPolicy(SACPolicy.Config(actor_hidden=(16,), critic_hidden=(16,), horizon=horizon, **config),
                     OBS_SPEC, ACTION_SPEC)


def window_batch(b: int = 8) -> TensorDict:
    g = torch.Generator().manual_seed(1)
    mask = torch.ones(b, H, dtype=torch.bool)
    mask[0, 2:] = False  # an episode that ended after 2 of the window's 3 steps
    return TensorDict({
        keys.OBS: {keys.STATE: torch.randn(b, D, generator=g)},
        keys.NEXT_OBS: {keys.STATE: torch.randn(b, D, generator=g)},
        keys.ACTION: torch.rand(b, H, A, generator=g) * 1.8 - 0.9,
        keys.REWARD: torch.where(mask, torch.randn(b, H, generator=g), 0.0),
        keys.MASK: mask, keys.TERMINATED: torch.arange(b) == 0, keys.TRUNCATED: torch.zeros(b, dtype=torch.bool),
        keys.MC_RETURN: torch.randn(b, generator=g),
    }, batch_size=[b])


def test_the_actor_emits_a_chunk_the_env_gets_its_first_action_and_evaluate_scores_the_chunk():
    p = policy()
    obs = TensorDict({keys.STATE: torch.randn(5, D)}, batch_size=[5])
    out = p.act(obs)
    chunk = out.extras["chunk"]
    assert out.action.shape == (5, A) and chunk.shape == (5, H * A)
    assert torch.equal(out.action, chunk[:, :A])
    log_prob, entropy, value = p.evaluate(obs, out.action, out.extras)
    assert torch.allclose(log_prob, out.log_prob, atol=1e-5) and torch.equal(entropy, -log_prob)
    # a window's [B, H, A] actions and the flat chunk are the same chunk to the actor and the critic
    assert torch.allclose(p.log_prob(obs[keys.STATE], chunk.view(5, H, A)), log_prob)
    assert torch.equal(p.q(obs[keys.STATE], chunk.view(5, H, A)), p.q(obs[keys.STATE], chunk))
    deterministic = p.act(obs, deterministic=True)
    assert torch.equal(deterministic.action, p.mean_action(obs[keys.STATE])[:, :A])
    with pytest.raises(ValueError, match=r"scores the chunk act\(\) sampled"):
        p.evaluate(obs, out.action)
    with pytest.raises(ValueError, match=r"policy.horizon=3 actions of 2 .*sample the data with horizon=3"):
        p.bc_loss(TensorDict({keys.OBS: obs, keys.ACTION: torch.zeros(5, 2, A)}, batch_size=[5]))
    assert policy(horizon=1).act(obs).extras == {}  # horizon 1 is plain SAC


def test_a_window_backs_up_by_chunked_td_and_a_transition_by_one_step_td():
    batch, value = window_batch(), torch.randn(8)
    expected = chunked_td_target(batch[keys.REWARD], batch[keys.MASK], batch[keys.TERMINATED], value, 0.9)
    assert torch.equal(backup(batch, value, 0.9), expected)
    # row 1 by hand: r0 + g r1 + g^2 r2 + g^3 V
    r = batch[keys.REWARD][1]
    assert torch.allclose(expected[1], r[0] + 0.9 * r[1] + 0.81 * r[2] + 0.729 * value[1])
    assert torch.allclose(expected[0], batch[keys.REWARD][0, 0] + 0.9 * batch[keys.REWARD][0, 1])  # terminated
    single = batch.clone()
    single[keys.REWARD] = batch[keys.REWARD][:, 0]
    del single[keys.MASK]
    assert torch.equal(backup(single, value, 0.9),
                       soft_td_target(single[keys.REWARD], single[keys.TERMINATED], value, 0.9))


@pytest.mark.parametrize("algo", ["iql", "calql", "rlpd"])
def test_offline_and_online_algorithms_update_a_chunk_critic_from_windows(algo):
    p = policy(num_critics=4 if algo == "rlpd" else 2)
    make = {"iql": lambda: IQL(IQL.Config(batch_size=8), p),
            "calql": lambda: CalQL(CalQL.Config(batch_size=8, num_samples=2), p),
            "rlpd": lambda: RLPD(RLPD.Config(batch_size=8), p)}[algo]
    learner = make()
    before = {k: v.clone() for k, v in p.state_dict().items()}
    metrics = learner.update(window_batch())
    assert all(torch.isfinite(torch.as_tensor(v)).all() for v in metrics.values())
    changed = {k.split(".")[0] for k, v in p.state_dict().items() if not torch.equal(v, before[k])}
    assert {"critic", "actor_trunk", "actor_head"} <= changed


def buffer_of(steps: int, num_envs: int, done: dict[tuple[int, int], str]) -> ReplayBuffer:
    """Rows t * N + n with obs = 10 t + n, action = [t, n], reward = t; `done[(t, n)]` ends env n's episode at t."""
    buffer = ReplayBuffer(100)
    for t in range(steps):
        n = torch.arange(num_envs)
        buffer.extend(TensorDict({
            keys.OBS: {keys.STATE: (10 * t + n).float()[:, None]},
            keys.NEXT_OBS: {keys.STATE: (10 * (t + 1) + n).float()[:, None]},
            keys.ACTION: torch.stack([torch.full((num_envs,), float(t)), n.float()], -1),
            keys.REWARD: torch.full((num_envs,), float(t)),
            keys.TERMINATED: torch.tensor([done.get((t, i)) == "terminated" for i in range(num_envs)]),
            keys.TRUNCATED: torch.tensor([done.get((t, i)) == "truncated" for i in range(num_envs)]),
        }, batch_size=[num_envs]))
    return buffer


def test_replay_windows_follow_one_env_and_stop_at_episode_ends_and_at_the_newest_row():
    buffer = buffer_of(steps=5, num_envs=2, done={(1, 0): "terminated", (3, 1): "truncated"})
    windows = ReplayWindows(buffer, horizon=3, num_envs=2)
    first = {}
    for _ in range(20):
        batch = windows.sample(64, torch.Generator().manual_seed(len(first)))
        for row in batch.unbind(0):
            first[int(row[keys.OBS][keys.STATE])] = row
    assert len(first) == 10  # every stored row starts a window
    w = first[1]  # env 1 from step 0: steps 0, 1, 2 all taken
    assert w[keys.MASK].tolist() == [True] * 3 and w[keys.ACTION][:, 0].tolist() == [0, 1, 2]
    assert w[keys.ACTION][:, 1].tolist() == [1, 1, 1] and float(w[keys.NEXT_OBS][keys.STATE]) == 31
    w = first[0]  # env 0 from step 0: its episode terminated at step 1
    assert w[keys.MASK].tolist() == [True, True, False] and w[keys.REWARD].tolist() == [0, 1, 0]
    assert w[keys.ACTION][:, 0].tolist() == [0, 1, 1]  # padding repeats the last action taken
    assert bool(w[keys.TERMINATED]) and float(w[keys.NEXT_OBS][keys.STATE]) == 20
    w = first[21]  # env 1 from step 2: truncated at step 3
    assert w[keys.MASK].tolist() == [True, True, False] and bool(w[keys.TRUNCATED]) and not bool(w[keys.TERMINATED])
    w = first[40]  # env 0's newest step: the window stops at the newest row, no episode end
    assert w[keys.MASK].tolist() == [True, False, False]
    assert not bool(w[keys.TERMINATED] | w[keys.TRUNCATED]) and float(w[keys.NEXT_OBS][keys.STATE]) == 50


def test_replay_windows_read_a_wrapped_ring_in_age_order():
    buffer = ReplayBuffer(6)
    for t in range(5):  # 10 rows through a ring of 6: the oldest kept is step 2
        buffer.extend(TensorDict({keys.OBS: {keys.STATE: torch.tensor([[10.0 * t], [10.0 * t + 1]])},
                                  keys.NEXT_OBS: {keys.STATE: torch.zeros(2, 1)}, keys.ACTION: torch.zeros(2, 1),
                                  keys.REWARD: torch.full((2,), float(t)), keys.TERMINATED: torch.zeros(2, dtype=bool),
                                  keys.TRUNCATED: torch.zeros(2, dtype=bool)}, batch_size=[2]))
    batch = ReplayWindows(buffer, horizon=2, num_envs=2).sample(200, torch.Generator().manual_seed(0))
    starts = batch[keys.OBS][keys.STATE][:, 0]
    assert set(starts.tolist()) == {20, 21, 30, 31, 40, 41}
    assert torch.equal(batch[keys.REWARD][:, 0], (starts // 10))
    full = batch[keys.MASK].all(1)
    assert torch.equal(batch[keys.REWARD][full, 1], starts[full] // 10 + 1) and not full[starts >= 40].any()


TINY = ["experiment=arm_reach_o2o", "train.num_envs=8", "train.total_env_steps=64", "train.eval_episodes=4",
        "train.progress=false", "policy.actor_hidden=[16]", "policy.critic_hidden=[16]", "policy.horizon=3",
        "pipeline.demos.episodes=8", "pipeline.bc.updates=10", "pipeline.bc.batch_size=32",
        "pipeline.offline.updates=4", "pipeline.offline.eval_every=2", "pipeline.offline.algo.batch_size=32",
        "pipeline.online.warmup_steps=16", "pipeline.online.eval_every=32", "pipeline.online.eval_episodes=4",
        "algo.batch_size=32", "algo.utd_ratio=0.25"]


def test_the_pipeline_trains_a_chunk_policy_from_windows_in_every_stage(tmp_path):
    """BC on chunks, offline IQL with chunked TD, online RLPD on offline windows + ReplayWindows, from the CLI's
    config: policy.horizon is the one setting."""
    seen = []
    original = IQL.update

    def spy(self, batch, update_actor=True):
        seen.append((tuple(batch[keys.ACTION].shape), tuple(batch[keys.REWARD].shape)))
        return original(self, batch, update_actor)

    online = []
    windows = ReplayWindows.sample

    def spy_windows(self, n, generator=None):
        batch = windows(self, n, generator)
        online.append(tuple(batch[keys.ACTION].shape))
        return batch

    IQL.update, ReplayWindows.sample = spy, spy_windows
    try:
        summary = Pipeline(compose(TINY), tmp_path).learn()
    finally:
        IQL.update, ReplayWindows.sample = original, windows
    assert seen == [((32, 3, 4), (32, 3))] * 4  # windows of 3 actions of arm_reach's 4
    assert online and set(online) == {(16, 3, 4)}  # RLPD: half of each batch from online windows
    assert summary["env_steps"] == 64
    model = checkpoint.load_model(tmp_path / "online" / "checkpoints" / "final", "cpu")
    assert model["action_scale"].shape == (12,)  # actor and critic act in chunks of 3 x 4
