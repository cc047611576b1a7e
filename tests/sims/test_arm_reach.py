"""ArmReachEnv: kinematics against hand-worked poses, task logic, contract details, scripted expert."""

import math

import pytest
import torch

from embodied import registry
from embodied.config import ConfigError
from embodied.specs import decode_text
from sims.arm_reach import ArmReachEnv, scripted_action
from sims.arm_reach import kinematics as kin
from sims.arm_reach.env import COLORS, TEMPLATES

H, D = kin.SHOULDER_HEIGHT, kin.SHOULDER_OFFSET
L1, L2, L3 = kin.LINK_LENGTHS


def make(num_envs=16, **config):
    return ArmReachEnv(ArmReachEnv.Config(**config), num_envs=num_envs)


# --- kinematics ----------------------------------------------------------------


@pytest.mark.parametrize(
    "qpos, expected",
    [
        # stretched out along +x at shoulder height
        ((0, 0, 0, 0), (D + L1 + L2 + L3, 0, H)),
        # base yaw +90 deg swings the stretched arm onto +y
        ((math.pi / 2, 0, 0, 0), (0, D + L1 + L2 + L3, H)),
        # base yaw 180 deg: onto -x
        ((math.pi, 0, 0, 0), (-(D + L1 + L2 + L3), 0, H)),
        # shoulder straight up
        ((0, math.pi / 2, 0, 0), (D, 0, H + L1 + L2 + L3)),
        # upper arm horizontal, forearm and hand hanging down
        ((0, 0, -math.pi / 2, 0), (D + L1, 0, H - L2 - L3)),
        # only the hand pointing down
        ((0, 0, 0, -math.pi / 2), (D + L1 + L2, 0, H - L3)),
        # upper arm up, forearm back horizontal (-x), hand down, yawed to +y
        ((math.pi / 2, math.pi / 2, math.pi / 2, math.pi / 2), (0, D - L2, H + L1 - L3)),
    ],
)
def test_forward_kinematics_hand_worked(qpos, expected):
    ee = kin.forward_kinematics(torch.tensor(qpos, dtype=torch.float64))
    torch.testing.assert_close(ee, torch.tensor(expected, dtype=torch.float64), atol=1e-12, rtol=0)


def test_chain_points_and_batching():
    points = kin.chain_points(torch.zeros(2, 3, 4))
    assert points.shape == (2, 3, 4, 3)
    expected = torch.tensor([[D, 0, H], [D + L1, 0, H], [D + L1 + L2, 0, H], [D + L1 + L2 + L3, 0, H]])
    torch.testing.assert_close(points[1, 2], expected)
    # link lengths are preserved in any configuration
    q = torch.rand(100, 4, dtype=torch.float64) * 6 - 3
    lengths = (kin.chain_points(q).diff(dim=-2)).norm(dim=-1)
    torch.testing.assert_close(lengths, torch.tensor(kin.LINK_LENGTHS, dtype=torch.float64).expand(100, 3))


def test_jacobian_matches_autograd():
    q = torch.rand(32, 4, dtype=torch.float64) * 3 - 1.5
    expected = torch.func.vmap(torch.func.jacrev(kin.forward_kinematics))(q)
    torch.testing.assert_close(kin.jacobian(q), expected)


# --- dynamics and limits -----------------------------------------------------------


def test_velocity_control_integrates_and_respects_limits():
    env = make(64)
    env.reset(seed=0)
    q0 = env.qpos.clone()
    action = torch.zeros(64, 4)
    action[:, 1] = 0.5
    env.step(action)
    cfg = env.config
    torch.testing.assert_close(
        env.qpos[:, 1] - q0[:, 1], torch.full((64,), 0.5 * cfg.max_joint_velocity * cfg.control_dt)
    )
    torch.testing.assert_close(env.qvel[:, 1], torch.full((64,), 0.5 * cfg.max_joint_velocity))
    gen = torch.Generator().manual_seed(0)
    for _ in range(60):  # bang-bang actions drive joints into both limits
        action = torch.randint(0, 2, (64, 4), generator=gen).float() * 4 - 2  # +-2: clipped to +-1
        env.step(action)
        assert (env.qpos >= env.lower).all() and (env.qpos <= env.upper).all()
    at_limit = (env.qpos == env.lower) | (env.qpos == env.upper)
    assert at_limit.any()


def test_torque_control_reaches_terminal_velocity_and_stops_at_limit():
    env = make(4, control="torque")
    env.reset(seed=0)
    action = torch.zeros(4, 4)
    action[:, 0] = 1.0
    cfg = env.config
    terminal = cfg.max_torque / cfg.damping
    env.step(action)
    assert 0 < env.qvel[0, 0] < terminal  # inertia: not at full speed after one step
    for _ in range(20):
        env.step(action)
    torch.testing.assert_close(env.qvel[:, 0], torch.full((4,), terminal), atol=1e-3, rtol=0)
    for _ in range(40):
        env.step(action)
    assert torch.equal(env.qpos[:, 0], env.upper[0].expand(4)) and (env.qvel[:, 0] == 0).all()


# --- targets, language, observations -------------------------------------------------


def test_balls_are_reachable_and_well_placed():
    env = make(512)
    env.reset(seed=1)
    cfg = env.config
    torch.testing.assert_close(kin.forward_kinematics(env.ball_qpos), env.ball_pos)
    assert (env.ball_qpos >= env.lower).all() and (env.ball_qpos <= env.upper).all()
    z = env.ball_pos[..., 2]
    assert (z >= cfg.min_ball_height).all() and (z <= cfg.max_ball_height).all()
    assert (env.ball_pos[..., :2].norm(dim=-1) >= cfg.min_ball_radius).all()
    assert ((env.ball_pos - env.ee_position[:, None]).norm(dim=-1) >= cfg.min_start_distance).all()
    for a, b in [(0, 1), (0, 2), (1, 2)]:
        assert ((env.ball_pos[:, a] - env.ball_pos[:, b]).norm(dim=-1) >= cfg.min_ball_separation).all()
    # the goal is spread over all three balls, and the balls over the workspace
    assert set(env.goal.tolist()) == {0, 1, 2}
    assert env.ball_pos[..., 1].min() < -0.2 and env.ball_pos[..., 1].max() > 0.2


def test_language_names_the_goal_and_varies():
    env = make(64)
    texts = decode_text(env.reset(seed=2)[0]["language"])
    phrasings = {t.format(c): c for t in TEMPLATES for c in COLORS}
    for text, goal in zip(texts, env.goal.tolist()):
        assert phrasings[text] == COLORS[goal]
    assert len(set(texts)) > 6  # several templates and colors across envs
    # a new episode (here: reset with another seed) draws new instructions
    assert decode_text(env.reset(seed=3)[0]["language"]) != texts


def test_language_shift_names_another_ball_of_the_same_episode():
    true, shifted = make(64), make(64, language_shift=1)
    texts, moved = decode_text(true.reset(seed=2)[0]["language"]), decode_text(shifted.reset(seed=2)[0]["language"])
    phrasings = {t.format(c): c for t in TEMPLATES for c in COLORS}
    assert torch.equal(true.goal, shifted.goal) and torch.equal(true.ball_pos, shifted.ball_pos)  # the same episodes
    for text, goal in zip(moved, shifted.goal.tolist()):
        assert phrasings[text] == COLORS[(goal + 1) % 3]
    assert [t.split()[:-2] for t in texts] == [t.split()[:-2] for t in moved]  # the same template, another color
    with pytest.raises(ConfigError, match="language_shift=3 must be 0, 1 or 2"):
        make(1, language_shift=3)


def test_observation_layout():
    env = make(8)
    obs, _ = env.reset(seed=4)
    state = obs["state"]
    assert state.shape == (8, 26) and obs["privileged"].shape == (8, 10)
    ee, goal = env.ee_position, env.goal_position
    torch.testing.assert_close(state[:, 8:11] * kin.REACH, ee)
    torch.testing.assert_close(state[:, 11:20] * kin.REACH, env.ball_pos.reshape(8, 9))
    assert torch.equal(state[:, 20:23].argmax(-1), env.goal)
    torch.testing.assert_close(state[:, 23:26] * kin.REACH, goal - ee)
    assert state[:, :4].abs().max() <= 1 and (state[:, 4:8] == 0).all()
    torch.testing.assert_close(obs["privileged"][:, 3] * kin.REACH, (goal - ee).norm(dim=-1))
    blind = make(8, goal_in_state=False)
    assert blind.reset(seed=4)[0]["state"].shape == (8, 20)
    assert blind.observation_spec["state"].shape == (20,)


# --- success, termination, auto-reset ----------------------------------------------------


def test_success_after_hold_steps_terminates_and_resets():
    env = make(8)
    env.reset(seed=5)
    env.qpos = env.goal_qpos.clone()  # teleport: the goal ball came from this configuration
    goal, hold = env.goal_position.clone(), env.config.hold_steps
    zero = torch.zeros(8, 4)
    for t in range(1, hold + 1):
        obs, reward, terminated, truncated, info = env.step(zero)
        assert not truncated.any()
        if t < hold:
            assert not terminated.any() and not info["success"].any()
            torch.testing.assert_close(reward, torch.zeros(8), atol=1e-5, rtol=0)  # at the goal, no action
    assert terminated.all() and info["success"].all()
    torch.testing.assert_close(reward, torch.full((8,), env.config.success_bonus), atol=1e-5, rtol=0)
    # final_obs is the last state of the finished episode; obs is a fresh episode
    final = info["final_obs"]["state"]
    torch.testing.assert_close(final[:, 8:11] * kin.REACH, goal, atol=1e-6, rtol=0)
    torch.testing.assert_close(final[:, 23:26], torch.zeros(8, 3), atol=1e-6, rtol=0)
    assert (obs["state"][:, 23:26].norm(dim=-1) * kin.REACH >= env.config.min_start_distance - 1e-6).all()
    assert (env.steps == 0).all() and (env.hold == 0).all()


def test_leaving_the_ball_resets_the_hold_counter():
    env = make(1, hold_steps=3)
    env.reset(seed=6)
    env.qpos = env.goal_qpos.clone()
    env.step(torch.zeros(1, 4))
    env.step(torch.zeros(1, 4))
    assert env.hold.item() == 2
    env.qpos = env.goal_qpos + torch.tensor([[0.5, 0, 0, 0]])  # 0.5 rad of yaw: >= 6 cm at >= 12 cm radius
    _, _, terminated, _, info = env.step(torch.zeros(1, 4))
    assert env.hold.item() == 0 and not terminated.any() and not info["success"].any()


def test_time_limit_truncates_without_success():
    env = make(8, max_episode_steps=10)
    obs, _ = env.reset(seed=7)
    zero = torch.zeros(8, 4)
    for _ in range(9):
        obs, _, terminated, truncated, info = env.step(zero)
        assert not (terminated | truncated).any()
    before = obs["state"].clone()
    obs, _, terminated, truncated, info = env.step(zero)
    assert truncated.all() and not terminated.any() and not info["success"].any()
    assert torch.equal(info["final_obs"]["state"], before)  # zero action: nothing moved on the last step
    assert not torch.equal(obs["state"], before)


# --- seeding and snapshots -----------------------------------------------------------


def test_seeding_is_deterministic():
    a, b = make(16), make(16)
    assert (a.reset(seed=11)[0] == b.reset(seed=11)[0]).all()
    assert not torch.equal(a.reset(seed=12)[0]["state"], b.reset(seed=11)[0]["state"])
    first, _ = a.reset(seed=11)
    assert (first == b.reset(seed=11)[0]).all()


def test_snapshot_restore_is_bit_identical_across_resets():
    env = make(32, max_episode_steps=7)  # short episodes: resets consume the generator
    env.reset(seed=8)
    gen = torch.Generator().manual_seed(0)
    for _ in range(3):
        obs, *_ = env.step(torch.rand(32, 4, generator=gen) * 2 - 1)
    snapshot = env.get_state()
    actions = [torch.rand(32, 4, generator=gen) * 2 - 1 for _ in range(20)]
    first = [env.step(a) for a in actions]
    assert (env.set_state(snapshot) == obs).all()
    for action, (obs, reward, terminated, truncated, info) in zip(actions, first):
        obs2, reward2, terminated2, truncated2, info2 = env.step(action)
        assert (obs2 == obs).all() and torch.equal(reward2, reward)
        assert torch.equal(terminated2, terminated) and torch.equal(truncated2, truncated)
        assert (info2["final_obs"] == info["final_obs"]).all()
    assert any(truncated.any() for _, _, _, truncated, _ in first), "the test should cross an auto-reset"


# --- config and registry ---------------------------------------------------------------


def test_config_validation_and_registry():
    with pytest.raises(ConfigError, match="success_radius"):
        ArmReachEnv.Config(success_radius=0.0)
    with pytest.raises(ConfigError, match="control"):
        ArmReachEnv.Config(control="position")
    with pytest.raises(ConfigError, match="max_instruction_bytes"):
        ArmReachEnv.Config(max_instruction_bytes=8)
    env = registry.build("env", "arm_reach", {"hold_steps": 3}, num_envs=2, device="cpu")
    assert isinstance(env, ArmReachEnv) and env.config.hold_steps == 3
    assert env.action_spec.shape == (4,) and env.action_spec.low == -1 and env.action_spec.high == 1


# --- the scripted expert ---------------------------------------------------------------


def first_episode_success(env, space):
    """Success rate [0, 1] of each env's first episode under the scripted expert."""
    env.reset(seed=9)
    finished = torch.zeros(env.num_envs, dtype=torch.bool)
    success = torch.zeros(env.num_envs, dtype=torch.bool)
    for _ in range(env.max_episode_steps):
        _, _, terminated, truncated, info = env.step(scripted_action(env, space))
        success |= info["success"] & ~finished
        finished |= terminated | truncated
    assert finished.all()
    return success.float().mean().item()


@pytest.mark.parametrize("control", ["velocity", "torque"])
@pytest.mark.parametrize("space", ["cartesian", "joint"])
def test_scripted_expert_succeeds(control, space):
    env = make(256, control=control)
    assert first_episode_success(env, space) >= 0.95
