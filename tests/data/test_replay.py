"""ReplayBuffer, MixedSampler and transitions_from_rollout: exact contents, counts, errors."""

import pytest
import torch
from tensordict import TensorDict

from embodied import keys
from embodied.data import SOURCE, MixedSampler, ReplayBuffer, transitions_from_rollout
from embodied.rollout import Collector
from policies.mlp import MLPPolicy
from sims.arm_reach import ArmReachEnv


def rows(start, n, img=False):
    """Transitions whose every entry encodes its row id, so contents can be checked exactly."""
    i = torch.arange(start, start + n)
    obs = {keys.STATE: i[:, None].float().expand(n, 3).clone()}
    if img:
        obs["images"] = {"wrist": (i % 256).to(torch.uint8)[:, None, None, None].expand(n, 4, 4, 3).clone()}
    return TensorDict({
        keys.OBS: obs,
        keys.NEXT_OBS: {keys.STATE: (i[:, None] + 1).float().expand(n, 3).clone()},
        keys.ACTION: i[:, None].float() * torch.ones(n, 2),
        keys.REWARD: i.float(), keys.TERMINATED: i % 7 == 0, keys.TRUNCATED: torch.zeros(n, dtype=torch.bool),
        keys.IS_INTERVENTION: i % 2 == 0,
    }, batch_size=[n])


def test_ring_buffer_keeps_the_newest_rows():
    buf = ReplayBuffer(10)
    buf.extend(rows(0, 6, img=True))
    buf.extend(rows(6, 7, img=True))  # wraps: rows 0..2 overwritten
    assert len(buf) == 10
    state = buf.state_dict()
    assert state["data/reward"].tolist() == list(range(3, 13))  # oldest first
    assert state["data/obs/images/wrist"][:, 0, 0, 0].tolist() == list(range(3, 13))
    buf.extend(rows(100, 25, img=True))  # more than capacity: only the last 10 survive
    assert sorted(buf.state_dict()["data/reward"].tolist()) == list(range(115, 125))


def test_sample_is_uniform_reproducible_and_consistent():
    buf = ReplayBuffer(100)
    buf.extend(rows(0, 50))
    a = buf.sample(20_000, torch.Generator().manual_seed(0))
    b = buf.sample(20_000, torch.Generator().manual_seed(0))
    assert torch.equal(a[keys.REWARD], b[keys.REWARD])
    r = a[keys.REWARD]
    assert torch.equal(a[keys.OBS][keys.STATE][:, 0], r) and torch.equal(a[keys.NEXT_OBS][keys.STATE][:, 0], r + 1)
    assert torch.equal(a[keys.IS_INTERVENTION], r.long() % 2 == 0)
    counts = torch.bincount(r.long(), minlength=50).float()
    assert r.max() < 50 and counts.min() > 0
    chi2 = ((counts - 400) ** 2 / 400).sum()
    assert chi2 < 100, chi2  # 49 dof: p(chi2 > 100) < 1e-4 for a uniform draw


def test_layout_errors_and_empty_buffer():
    buf = ReplayBuffer(8)
    with pytest.raises(ValueError, match="empty"):
        buf.sample(1)
    buf.extend(rows(0, 3))
    with pytest.raises(KeyError, match="is_intervention"):
        buf.extend(rows(0, 3).exclude(keys.IS_INTERVENTION))
    bad = rows(0, 3)
    bad[keys.ACTION] = torch.zeros(3, 5)
    with pytest.raises(ValueError, match="'action'"):
        buf.extend(bad)
    with pytest.raises(ValueError, match="batch_size"):
        buf.extend(rows(0, 4).reshape(2, 2))
    with pytest.raises(ValueError, match="capacity"):
        ReplayBuffer(0)


def test_state_dict_round_trip():
    buf = ReplayBuffer(10)
    buf.extend(rows(0, 14, img=True))
    other = ReplayBuffer(10)
    other.load_state_dict(buf.state_dict())
    assert len(other) == 10
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    assert (buf.sample(64, g1) == other.sample(64, g2)).all()
    with pytest.raises(ValueError, match="capacity"):
        ReplayBuffer(11).load_state_dict(buf.state_dict())


def test_mixed_sampler_fixed_counts_and_source():
    demos, online = ReplayBuffer(100), ReplayBuffer(100)
    demos.extend(rows(0, 10))
    online.extend(rows(1000, 10))
    mixed = MixedSampler({"offline": demos, "online": online}, {"offline": 0.5, "online": 0.5})
    batch = mixed.sample(256, torch.Generator().manual_seed(0))
    assert batch.batch_size == torch.Size([256])
    src = batch[SOURCE]
    assert (src == 0).sum() == 128 and (src == 1).sum() == 128
    assert bool((batch[keys.REWARD][src == 0] < 10).all()) and bool((batch[keys.REWARD][src == 1] >= 1000).all())
    thirds = MixedSampler({"a": demos, "b": online, "c": demos}, {"a": 1 / 3, "b": 1 / 3, "c": 1 / 3})
    assert thirds.counts(256) == {"a": 86, "b": 85, "c": 85}
    assert sum(MixedSampler({"a": demos, "b": online}, {"a": 0.1, "b": 0.9}).counts(7).values()) == 7


def test_mixed_sampler_errors():
    a, empty = ReplayBuffer(4), ReplayBuffer(4)
    a.extend(rows(0, 2))
    with pytest.raises(ValueError, match="sum to"):
        MixedSampler({"a": a, "b": empty}, {"a": 0.5, "b": 0.6})
    with pytest.raises(ValueError, match="one fraction per source"):
        MixedSampler({"a": a, "b": empty}, {"a": 1.0})
    with pytest.raises(ValueError, match="must be in"):
        MixedSampler({"a": a, "b": empty}, {"a": 1.5, "b": -0.5})
    with pytest.raises(ValueError, match="'b' is empty"):
        MixedSampler({"a": a, "b": empty}, {"a": 0.5, "b": 0.5}).sample(8)
    assert len(MixedSampler({"a": a, "b": empty}, {"a": 1.0, "b": 0.0}).sample(8)) == 8


def test_transitions_from_rollout_uses_final_obs_at_episode_ends():
    torch.manual_seed(0)
    env = ArmReachEnv(ArmReachEnv.Config(max_episode_steps=5, hold_steps=2), num_envs=3)
    policy = MLPPolicy(MLPPolicy.Config(), env.observation_spec, env.action_spec)
    collector = Collector(env, policy, steps=12, keep_next_obs=True)
    rollout = collector.collect()
    flat = transitions_from_rollout(rollout)
    assert flat.batch_size == torch.Size([36])
    assert keys.LOG_PROB not in flat.keys() and keys.NEXT_OBS in flat.keys()
    done = rollout[keys.DONE]
    assert done.any()
    state, nxt = rollout[keys.OBS][keys.STATE], rollout[keys.NEXT_OBS][keys.STATE]
    # not done: next_obs is the next step's obs; done: it is the final obs, not the reset one
    same = (nxt[:-1] == state[1:]).all(-1)
    assert bool(same[~done[:-1]].all()) and not bool(same[done[:-1]].any())
    # a truncated step's next_obs carries the time fraction of the last step (step counter = 5 of 5)
    cut = rollout[keys.TRUNCATED]
    assert cut.any() and torch.allclose(rollout[keys.NEXT_OBS][keys.PRIVILEGED][cut][:, -1], torch.ones(int(cut.sum())))
    assert torch.equal(flat[keys.REWARD], rollout[keys.REWARD].reshape(-1))
    with pytest.raises(KeyError, match="keep_next_obs"):
        transitions_from_rollout(Collector(env, policy, steps=2).collect())
    buf = ReplayBuffer(100)
    buf.extend(flat)
    assert len(buf) == 36
