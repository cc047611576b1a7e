"""Isaac Gym adapter against the FAKE VecTask (embodied.testing), plus a real-simulator check where installed."""

import importlib.util
import subprocess
import sys

import pytest
import torch

from embodied import keys, registry
from embodied.specs import decode_text
from embodied.testing.fake_isaacgym import FakeCartpoleTask, cartpole_config
from sims.isaacgym.env import IsaacGymEnv


def make(num_envs=4, max_episode_length=500, **config):
    task = FakeCartpoleTask(cartpole_config(num_envs, max_episode_length, num_states=5))
    return IsaacGymEnv.from_task(task, IsaacGymEnv.Config(**config)), task


def test_fake_follows_vectask_semantics():
    """The fake itself: zeros before the first step, reset_buf starting at ones, resets one step late."""
    _, task = make(max_episode_length=5)
    assert torch.equal(task.reset()["obs"], torch.zeros(4, 4)) and bool((task.reset_buf == 1).all())
    task.step(task.zero_actions())  # resets every env
    assert bool((task.progress_buf == 0).all()) and not task.reset_buf.any()
    for _ in range(4):
        obs, _, reset, extras = task.step(task.zero_actions())
    assert bool(reset.all()) and bool(extras["time_outs"].all())  # progress 4 >= 5 - 1
    last = obs["obs"].clone()
    assert torch.equal(task.obs_buf, last)  # the step's obs is the finished episode's last
    task.step(task.zero_actions())  # the next step resets
    assert bool((task.progress_buf == 0).all()) and not torch.equal(task.obs_buf, last)


def test_time_limit_is_truncation_and_reset_comes_next_step():
    env, task = make(max_episode_length=5, instruction="balance the pole")
    obs, _ = env.reset(seed=0)
    assert decode_text(obs[keys.LANGUAGE]) == ["balance the pole"] * 4
    zero = torch.zeros(4, 1)
    for t in range(1, env.max_episode_steps + 1):
        obs, reward, terminated, truncated, info = env.step(zero)
        assert not info["autoreset"].any()
    assert env.max_episode_steps == 4 and truncated.all() and not terminated.any()
    assert torch.equal(info["final_obs"][keys.STATE], obs[keys.STATE])  # final obs, returned as is
    assert obs[keys.STATE].data_ptr() == task.obs_dict["obs"].data_ptr()  # passed through, not copied
    assert torch.equal(obs[keys.PRIVILEGED], task.states_buf.clamp(-5, 5))
    obs2, reward2, terminated2, truncated2, info2 = env.step(zero)
    assert info2["autoreset"].all() and (reward2 == 0).all() and not (terminated2 | truncated2).any()
    assert not torch.equal(obs2[keys.STATE], obs[keys.STATE]) and bool((task.progress_buf == 0).all())


def test_failure_is_termination():
    env, _ = make()
    env.reset(seed=1)
    ended = torch.zeros(4, dtype=torch.bool)
    for _ in range(40):  # full effort one way: the pole falls or the cart leaves the 3 m track
        _, reward, terminated, truncated, info = env.step(torch.ones(4, 1))
        assert not truncated.any() and (reward[terminated] == -2.0).all()
        ended |= terminated
    assert ended.all()


def test_success_from_extras():
    env, task = make(success_key="successes")
    env.reset(seed=0)
    task.extras["successes"] = torch.tensor([1.0, 0.0, 0.0, 2.0])
    _, _, _, _, info = env.step(torch.zeros(4, 1))
    assert info[keys.SUCCESS].tolist() == [True, False, False, True]


def test_missing_isaacgym_names_what_to_install():
    if importlib.util.find_spec("isaacgym") is not None:
        pytest.skip("isaacgym is installed")
    with pytest.raises(registry.MissingExtraError, match="Isaac Gym Preview 4"):
        registry.build("env", "isaacgym", {}, num_envs=2, device="cpu")


REAL = """
import isaacgym  # before torch, as Isaac Gym requires
import torch
from sims.isaacgym.env import IsaacGymEnv
env = IsaacGymEnv(IsaacGymEnv.Config(task="Cartpole"), num_envs=64, device="cuda:0")
obs, _ = env.reset(seed=0)
assert obs["state"].shape == (64, 4) and obs["state"].device.type == "cuda"
ended = torch.zeros(64, dtype=torch.bool, device="cuda")
for _ in range(env.max_episode_steps + 2):
    obs, reward, terminated, truncated, info = env.step(torch.rand(64, 1, device="cuda") * 2 - 1)
    done = terminated | truncated
    assert torch.equal(info["final_obs"]["state"][done], obs["state"][done])
    ended |= done
assert ended.all()
print("ok")
"""


@pytest.mark.gpu
def test_real_isaacgym_cartpole():
    if importlib.util.find_spec("isaacgym") is None or importlib.util.find_spec("isaacgymenvs") is None:
        pytest.skip("isaacgym / isaacgymenvs are not installed")
    result = subprocess.run([sys.executable, "-c", REAL], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr[-2000:]


def test_collector_masks_the_reset_step_for_ppo_and_replay():
    """The step after a done only resets the env (next-step autoreset): the Collector marks it
    mask=False, episode lengths skip it, replay drops it and PPO's update ignores whatever it holds."""
    from embodied.algorithms.ppo import PPO, PPOConfig
    from embodied.data.replay import transitions_from_rollout
    from embodied.rollout import Collector

    env, _ = make(max_episode_length=5)
    torch.manual_seed(0)
    policy = registry.build("policy", "mlp", {}, observation_spec=env.observation_spec, action_spec=env.action_spec)
    collector = Collector(env, policy, steps=12)
    collector.reset(seed=0)
    rollout = collector.collect()
    done = rollout[keys.DONE]
    expected = torch.ones_like(done)
    expected[1:] = ~done[:-1]
    assert done.any() and torch.equal(rollout[keys.MASK], expected)
    assert collector.pop_episode_stats()["length"] == env.max_episode_steps  # 4, not 5
    # masked steps hold garbage that must not move the weights
    garbage = rollout.clone()
    masked = ~rollout[keys.MASK]
    garbage[keys.ACTION][masked] = 50.0
    garbage[keys.REWARD][masked] = 1e3
    weights = []
    for batch in (rollout, garbage):
        torch.manual_seed(1)
        net = registry.build("policy", "mlp", {}, observation_spec=env.observation_spec, action_spec=env.action_spec)
        net.load_state_dict(policy.state_dict())
        PPO(PPOConfig(epochs=2, minibatches=2), net).update(batch)
        weights.append(net.state_dict())
    for key in weights[0]:
        assert torch.equal(weights[0][key], weights[1][key]), key
    with_next = Collector(env, policy, steps=12, keep_next_obs=True)
    with_next.reset(seed=0)
    rollout = with_next.collect()
    assert len(transitions_from_rollout(rollout)) == int(rollout[keys.MASK].sum()) < 12 * 4
