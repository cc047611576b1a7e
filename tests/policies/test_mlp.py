"""The MLP policy's camera path on MuJoCo reach with the goal taken out of the state (the goal reaches the
actor only through the images, and the privileged critic reads it without them); its frozen normalizer."""

import pytest
import torch

pytest.importorskip("sims.mujoco")  # imports mujoco after setting MUJOCO_GL=egl; skips where mujoco is missing
from sims.mujoco import MujocoReachEnv  # noqa: E402
from sims.mujoco.env import GOAL_ROWS  # noqa: E402

from embodied import keys  # noqa: E402
from policies.mlp import MLPConfig, MLPPolicy  # noqa: E402


def blind_env(n=4):
    return MujocoReachEnv(MujocoReachEnv.Config(cameras=("front", "side"), image_size=32, goal_in_state=False), n)


def moved_goal(env):
    """(obs, obs after moving every env's target 0.1 m along y) with nothing else changed."""
    obs, _ = env.reset(seed=0)
    snapshot = env.get_state()
    snapshot["target"] = snapshot["target"] + torch.tensor([0.0, 0.1, 0.0], dtype=torch.float64)
    return obs, env.set_state(snapshot)


def test_goal_leaves_the_state_for_privileged():
    env = blind_env()
    obs, moved = moved_goal(env)
    full = env.observe_state()  # the full 31 rows of the moved scene
    assert obs[keys.STATE].shape == (4, 25) and obs[keys.PRIVILEGED].shape == (4, 6)
    keep = [i for i in range(31) if i not in GOAL_ROWS]
    torch.testing.assert_close(moved[keys.STATE], full[:, keep])
    torch.testing.assert_close(moved[keys.PRIVILEGED], full[:, GOAL_ROWS])
    assert torch.equal(obs[keys.STATE], moved[keys.STATE])  # the state does not see the goal move
    assert not torch.equal(obs[keys.PRIVILEGED], moved[keys.PRIVILEGED])
    assert not torch.equal(obs[keys.IMAGES, "side"], moved[keys.IMAGES, "side"])  # the images do


def test_actor_finds_the_goal_only_through_the_images():
    env = blind_env()
    obs, moved = moved_goal(env)
    torch.manual_seed(0)
    config = MLPConfig(images=True, asymmetric_critic=True, image_channels=(8, 8, 8))
    policy = MLPPolicy(config, env.observation_spec, env.action_spec)
    policy.actor[-1].weight.data.normal_()  # the 0.01-gain output layer would hide small differences
    policy.observe(obs)
    before, after = policy.act(obs, deterministic=True), policy.act(moved, deterministic=True)
    assert (before.action - after.action).abs().amax(-1).min() > 1e-4  # the goal moved only in the pixels
    assert not torch.allclose(before.value, after.value)  # the critic reads the goal from `privileged`
    # the gradient of the action reaches the CNN of every camera
    policy.act(obs, deterministic=True).action.square().sum().backward()
    for cam in ("front", "side"):
        assert policy.image_encoder[cam].net[0].weight.grad.abs().sum() > 0
    # the privileged critic needs no images: value() gives act()'s value without a CNN pass
    torch.testing.assert_close(policy.value(obs), before.value)
    # without images the same actor is blind to the goal
    blind = MLPPolicy(MLPConfig(asymmetric_critic=True), env.observation_spec, env.action_spec)
    assert torch.equal(blind.act(obs, deterministic=True).action, blind.act(moved, deterministic=True).action)


def test_symmetric_critic_shares_the_image_features():
    env = blind_env(2)
    policy = MLPPolicy(MLPConfig(images=True, image_pool="avg"), env.observation_spec, env.action_spec)
    obs, _ = env.reset(seed=0)
    torch.testing.assert_close(policy.value(obs), policy.act(obs).value)
    policy.value(obs).sum().backward()
    assert policy.image_encoder["front"].net[0].weight.grad.abs().sum() > 0


def test_images_without_cameras_is_an_error():
    env = MujocoReachEnv(MujocoReachEnv.Config(), 2)
    with pytest.raises(ValueError, match="set env.cameras"):
        MLPPolicy(MLPConfig(images=True), env.observation_spec, env.action_spec)


def test_normalizer_stops_after_until_samples():
    env = blind_env(2)
    policy = MLPPolicy(MLPConfig(normalize_until=1), env.observation_spec, env.action_spec)
    obs, _ = env.reset(seed=0)
    policy.observe(obs)  # the first batch is taken whole
    frozen = {k: v.clone() for k, v in policy.state_dict().items() if "norm" in k}
    assert frozen["state_norm.count"] == 2
    policy.observe(env.step(torch.ones(2, 4))[0])
    assert all(torch.equal(v, policy.state_dict()[k]) for k, v in frozen.items())
