"""Isaac Lab adapter against the FAKE Direct/ManagerBased envs (embodied.testing), plus a real check where installed."""

import importlib.util
import subprocess
import sys

import pytest
import torch

from embodied import keys, registry
from embodied.testing.fake_isaaclab import FakeCartpoleDirectEnv, FakeEnvCfg, FakeManagerBasedRLEnv
from sims.isaaclab import IsaacLabEnv

FAKES = [FakeCartpoleDirectEnv, FakeManagerBasedRLEnv]


def make(cls, episode_length_s=0.25, num_envs=4, **config):
    fake = cls(FakeEnvCfg(num_envs=num_envs, episode_length_s=episode_length_s, asymmetric=True))
    return IsaacLabEnv.from_env(fake, IsaacLabEnv.Config(**config)), fake


@pytest.mark.parametrize("cls", FAKES)
def test_fake_resets_inside_step(cls):
    fake = cls(FakeEnvCfg(num_envs=4, episode_length_s=0.25))  # 15 steps
    obs, extras = fake.reset(seed=0)
    assert set(obs) == {"policy"} and extras is fake.extras
    for _ in range(20):
        obs, reward, terminated, time_outs, _ = fake.step(torch.zeros(4, 1))
        if time_outs.any():
            break
    assert time_outs.all() and bool((fake.episode_length_buf == 0).all())  # already reset, inside step


@pytest.mark.parametrize("cls", FAKES)
def test_captured_final_obs_is_the_pre_reset_observation(cls):
    """At a time limit the final obs is what a longer episode would have observed at that step."""
    env, fake = make(cls)
    twin, _ = make(cls, episode_length_s=1.0)  # same physics, no reset at that step
    zero = torch.zeros(4, 1)
    env.reset(seed=3)
    steps = []
    while True:
        obs, reward, terminated, truncated, info = env.step(zero)
        steps.append((obs, info["final_obs"]))
        if truncated.any():
            break
    assert truncated.all() and not terminated.any()
    assert len(steps) == fake.max_episode_length - (1 if cls is FakeCartpoleDirectEnv else 0)
    twin.reset(seed=3)
    for obs, final in steps:
        twin_obs, *_ = twin.step(zero)
        assert torch.equal(final[keys.STATE], twin_obs[keys.STATE])
        assert torch.equal(final[keys.PRIVILEGED][:, :4], twin_obs[keys.PRIVILEGED][:, :4])
    assert not torch.equal(obs[keys.STATE], final[keys.STATE])  # the returned obs is the new episode's


@pytest.mark.parametrize("cls", FAKES)
def test_post_reset_mode_leaves_isaac_lab_untouched(cls):
    env, fake = make(cls, final_obs="post_reset")
    assert "_reset_idx" not in vars(fake)
    env.reset(seed=0)
    for _ in range(fake.max_episode_length):
        obs, _, terminated, truncated, info = env.step(torch.zeros(4, 1))
        assert info["final_obs"] is obs


def test_terminated_and_time_out_together_is_terminated():
    env, fake = make(FakeCartpoleDirectEnv)
    env.reset(seed=0)
    fake.episode_length_buf[:] = fake.max_episode_length  # the time limit falls on this step ...
    fake.joint_pos[:, 0] = 10.0  # ... and the cart is off the track
    _, _, terminated, truncated, info = env.step(torch.zeros(4, 1))
    assert terminated.all() and not truncated.any()
    assert (info["final_obs"][keys.STATE][:, 2] > 3.0).all()  # cart position before the reset


def test_actions_unbounded_by_default_and_clipped_when_asked():
    env, fake = make(FakeCartpoleDirectEnv)
    assert env.action_spec.low is None and env.action_spec.high is None
    clipped, fake2 = make(FakeCartpoleDirectEnv, clip_actions=1.0)
    clipped.reset(seed=0)
    clipped.step(torch.full((4, 1), 5.0))
    assert torch.equal(fake2.actions, torch.ones(4, 1))


def test_success_term_of_a_manager_based_env():
    env, fake = make(FakeManagerBasedRLEnv, success_term="cart_out_of_bounds")
    env.reset(seed=0)
    fake.joint_pos[:2, 0] = 10.0
    _, _, terminated, _, info = env.step(torch.zeros(4, 1))
    assert info[keys.SUCCESS].tolist() == [True, True, False, False] and torch.equal(terminated, info[keys.SUCCESS])


def test_missing_isaaclab_names_what_to_install():
    if importlib.util.find_spec("isaaclab") is not None:
        pytest.skip("isaaclab is installed")
    with pytest.raises(registry.MissingExtraError, match="Isaac Lab"):
        registry.build("env", "isaaclab", {}, num_envs=2, device="cpu")


REAL = """
import torch
from sims.isaaclab import IsaacLabEnv
for task in ("Isaac-Cartpole-Direct-v0", "Isaac-Cartpole-v0"):
    env = IsaacLabEnv(IsaacLabEnv.Config(task=task), num_envs=64, device="cuda:0")
    obs, _ = env.reset(seed=0)
    assert obs["state"].device.type == "cuda"
    ended = torch.zeros(64, dtype=torch.bool, device="cuda")
    for _ in range(env.max_episode_steps + 1):
        obs, reward, terminated, truncated, info = env.step(torch.zeros(64, 1, device="cuda"))
        done = terminated | truncated
        if done.any():
            assert not torch.equal(info["final_obs"]["state"][done], obs["state"][done])
        ended |= done
    assert ended.all()
    env.close()
print("ok")
"""


@pytest.mark.gpu
def test_real_isaaclab_cartpole():
    if importlib.util.find_spec("isaaclab") is None:
        pytest.skip("isaaclab is not installed")
    result = subprocess.run([sys.executable, "-c", REAL], capture_output=True, text=True, timeout=900)
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr[-2000:]
