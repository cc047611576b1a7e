"""ManiSkill3 adapter against real ManiSkill (PushCube-v1 on the CPU backend, rendered with lavapipe).

The contract suite covers shapes, seeding, auto-reset and image layout; these
tests check that the adapter is a faithful pass-through of ManiSkill itself.
"""

import pytest
import torch

from embodied import keys
from embodied.config import ConfigError

pytest.importorskip("mani_skill", reason="needs the maniskill extra: pip install -e '.[maniskill]'")

from sims.maniskill import ManiSkillEnv  # noqa: E402

KWARGS = dict(obs_mode="state", control_mode="pd_joint_delta_pos", reward_mode="normalized_dense")


@pytest.fixture(scope="module")
def state_env():
    env = ManiSkillEnv(ManiSkillEnv.Config(privileged=True), num_envs=1)
    yield env
    env.close()


@pytest.fixture(scope="module")
def raw_env():
    import gymnasium as gym

    env = gym.make("PushCube-v1", num_envs=1, sim_backend="physx_cpu", render_backend="cpu",
                   enhanced_determinism=True, **KWARGS)
    yield env
    env.close()


def test_matches_raw_maniskill_step_for_step(state_env, raw_env):
    """Same seed and actions: our obs, rewards and flags are ManiSkill's, across an auto-reset."""
    env = state_env
    obs, _ = env.reset(seed=7)
    raw_obs, _ = raw_env.reset(seed=7)
    assert torch.equal(obs[keys.STATE], raw_obs)
    assert torch.equal(obs[keys.PRIVILEGED], raw_env.unwrapped.get_state())
    gen = torch.Generator().manual_seed(0)
    resets = 0
    for _ in range(env.max_episode_steps + 5):
        action = torch.rand(1, *env.action_spec.shape, generator=gen) * 2 - 1
        obs, reward, terminated, truncated, info = env.step(action)
        raw_obs, raw_reward, raw_term, raw_trunc, raw_info = raw_env.step(action)
        assert torch.equal(info["final_obs"][keys.STATE], raw_obs)
        assert torch.equal(reward, raw_reward) and torch.equal(info[keys.SUCCESS], raw_info["success"])
        assert torch.equal(terminated, raw_term) and torch.equal(truncated, raw_trunc & ~raw_term)
        if bool(raw_term | raw_trunc):
            raw_obs, _ = raw_env.reset()  # ManiSkillVectorEnv's auto-reset, unseeded
            resets += 1
        assert torch.equal(obs[keys.STATE], raw_obs)
    assert resets == 1 and env.max_episode_steps == 50  # PushCube-v1's registered time limit


def test_success_terminates_and_keeps_final_obs(state_env):
    """Put the cube on the goal: ManiSkill's success ends the episode as terminated, never truncated."""
    env = state_env
    env.reset(seed=3)
    task = env.maniskill_envs[0].unwrapped
    goal = task.goal_region.pose.p.clone()
    pose = task.obj.pose.raw_pose.clone()
    pose[:, :2] = goal[:, :2]
    task.obj.set_pose(task.obj.pose.create_from_pq(p=pose[:, :3], q=pose[:, 3:]))
    obs, reward, terminated, truncated, info = env.step(torch.zeros(1, *env.action_spec.shape))
    assert info[keys.SUCCESS].item() and terminated.item() and not truncated.item()
    final = info["final_obs"][keys.PRIVILEGED]
    assert not torch.equal(final, obs[keys.PRIVILEGED])  # a new episode began
    assert int(task.elapsed_steps[0]) == 0


def test_rgb_maps_cameras_and_proprioception():
    env = ManiSkillEnv(ManiSkillEnv.Config(obs_mode="rgb", image_size=64), num_envs=1)
    obs, _ = env.reset(seed=0)
    raw = env.maniskill_envs[0].unwrapped.get_obs()
    image = obs[keys.IMAGES]["base_camera"]
    assert image.dtype == torch.uint8 and image.shape == (1, 64, 64, 3)
    assert torch.equal(image, raw["sensor_data"]["base_camera"]["rgb"])
    proprio = [raw["agent"]["qpos"], raw["agent"]["qvel"], raw["extra"]["tcp_pose"]]
    assert torch.equal(obs[keys.STATE], torch.cat(proprio, -1))
    for _ in range(3):  # the arm moves, and the camera sees it
        obs2, *_ = env.step(torch.ones(1, *env.action_spec.shape))
    assert not torch.equal(obs2[keys.IMAGES]["base_camera"], image)
    env.close()


def test_per_dimension_action_bounds_are_rescaled():
    env = ManiSkillEnv(ManiSkillEnv.Config(control_mode="pd_joint_pos"), num_envs=1)
    assert (env.action_spec.low, env.action_spec.high) == (-1.0, 1.0)
    space = env.maniskill_envs[0].unwrapped.single_action_space
    mid = (torch.as_tensor(space.low) + torch.as_tensor(space.high)) / 2
    assert torch.allclose(env._action_mid, mid)
    env.reset(seed=0)
    env.step(torch.zeros(1, *env.action_spec.shape))
    env.close()


def test_bad_config_names_the_choices():
    with pytest.raises(ConfigError, match="valid choices"):
        ManiSkillEnv(ManiSkillEnv.Config(env_id="PushCubeX-v1", instruction="push"), num_envs=1)
    with pytest.raises(ConfigError, match="physx_cuda"):
        ManiSkillEnv(ManiSkillEnv.Config(sim_backend="physx_cuda"), num_envs=1, device="cpu")
    with pytest.raises(ConfigError, match="instruction"):
        ManiSkillEnv.Config(env_id="OpenCabinetDrawer-v1")


@pytest.mark.gpu
def test_gpu_parallel_envs_pass_through_on_cuda():
    env = ManiSkillEnv(ManiSkillEnv.Config(), num_envs=16, device="cuda")
    assert env.sim_backend == "physx_cuda" and len(env.maniskill_envs) == 1
    obs, _ = env.reset(seed=0)
    assert obs[keys.STATE].device.type == "cuda" and obs.batch_size == (16,)
    obs, reward, terminated, truncated, info = env.step(torch.zeros(16, *env.action_spec.shape, device="cuda"))
    assert reward.device.type == "cuda" and info["final_obs"].batch_size == (16,)
