"""Quadrotor simulator: physics against hand-worked values, and the VecEnv contract of both tasks."""

from __future__ import annotations

import math

import pytest
import torch

from embodied import registry
from embodied.config import ConfigError
from sims.quadrotor import HoverConfig, QuadrotorHoverEnv, QuadrotorWaypointEnv, WaypointConfig
from sims.quadrotor.dynamics import CrazyflieParams

P = CrazyflieParams()
NO_DR = dict(dr_mass=0.0, dr_thrust=0.0, dr_motor_tau=0.0)
HOVER_ACTION = torch.zeros(1, 4)


def level_hover(env, position=(0.0, 0.0, 0.0), velocity=(0.0, 0.0, 0.0)) -> dict[str, torch.Tensor]:
    """Put every env level at `position`, rotors at the nominal hover speed; return the new state."""
    state = env.get_state()
    n = env.num_envs
    state["position"] = torch.tensor(position).expand(n, 3).clone()
    state["velocity"] = torch.tensor(velocity).expand(n, 3).clone()
    state["angular_velocity"] = torch.zeros(n, 3)
    state["quaternion"] = torch.tensor([1.0, 0.0, 0.0, 0.0]).expand(n, 4).clone()
    state["motor_speed"] = torch.full((n, 4), P.hover_fraction)
    env.set_state(state)
    return state


def run(env, action, steps):
    for _ in range(steps):
        out = env.step(action)
    return out


# ---- physics -----------------------------------------------------------------------------------
def test_free_fall_matches_half_g_t_squared():
    env = QuadrotorHoverEnv(HoverConfig(max_pos=10.0, max_speed=20.0, **NO_DR))
    state = level_hover(env, position=(0.3, -0.2, 0.0))
    state["motor_speed"].zero_()
    env.set_state(state)
    run(env, torch.full((1, 4), -1.0), 100)  # -1 = 0 RPM: no thrust for 1 s
    s = env.get_state()
    # RK4 integrates constant acceleration exactly; float32 leaves ~1e-5 m
    assert s["position"][0, 2].item() == pytest.approx(-0.5 * P.gravity * 1.0**2, abs=1e-4)
    assert s["velocity"][0, 2].item() == pytest.approx(-P.gravity * 1.0, abs=1e-4)
    assert torch.allclose(s["position"][0, :2], torch.tensor([0.3, -0.2]), atol=1e-6)


def test_nominal_hover_action_holds_a_level_quad_for_one_second():
    env = QuadrotorHoverEnv(HoverConfig(**NO_DR))
    level_hover(env, position=(0.1, 0.2, -0.3))
    run(env, HOVER_ACTION, 100)
    s = env.get_state()
    assert torch.allclose(s["position"], torch.tensor([[0.1, 0.2, -0.3]]), atol=1e-3)  # within 1 mm
    assert s["velocity"].abs().max() < 1e-3
    assert s["angular_velocity"].abs().max() < 1e-3


@pytest.mark.parametrize(
    "action, axis",
    [
        ([-0.1, -0.1, 0.1, 0.1], 0),  # left rotors (2, 3 at +y) faster: roll about +x
        ([-0.1, 0.1, 0.1, -0.1], 1),  # back rotors (1, 2 at -x) faster: pitch about +y (nose down)
        ([-0.1, 0.1, -0.1, 0.1], 2),  # rotors 1, 3 faster: their reaction torque yaws about +z
    ],
)
def test_differential_thrust_rotates_the_expected_way(action, axis):
    env = QuadrotorHoverEnv(HoverConfig(**NO_DR))
    level_hover(env)
    run(env, torch.tensor([action]), 10)
    s = env.get_state()
    assert s["step"].item() == 10  # no crash and reset on the way
    w = s["angular_velocity"][0]
    assert w[axis] > 0.5  # rad/s after 0.1 s
    others = [i for i in range(3) if i != axis]
    assert w[others].abs().max() < 1e-3 * w[axis]
    if axis == 0:  # rolling about +x tips the thrust toward -y
        assert s["velocity"][0, 1] < -0.01
    if axis == 1:  # pitching about +y tips it toward +x
        assert s["velocity"][0, 0] > 0.01


def test_motor_lag_reaches_63_percent_after_one_time_constant():
    env = QuadrotorHoverEnv(HoverConfig(**NO_DR))
    level_hover(env)
    h = P.hover_fraction
    setpoint = math.sqrt(h**2 + 0.5 * (1 - h**2))  # action +0.5: halfway from hover to max thrust
    run(env, torch.full((1, 4), 0.5), round(P.motor_time_constant / 0.01))
    m = env.get_state()["motor_speed"][0]
    fraction = (m - h) / (setpoint - h)
    assert torch.allclose(fraction, torch.full((4,), 1 - math.exp(-1)), atol=1e-4)


# ---- domain randomization, seeding ---------------------------------------------------------------
def test_randomized_parameters_lie_in_range_and_differ_per_env():
    config = HoverConfig(dr_mass=0.2, dr_thrust=0.1, dr_motor_tau=0.3)
    env = QuadrotorHoverEnv(config, num_envs=2000)
    obs, _ = env.reset(seed=0)
    scale = env.get_state()["dr_scale"]
    for i, r in enumerate([0.2, 0.1, 0.3]):
        assert scale[:, i].min() >= 1 - r and scale[:, i].max() <= 1 + r
        assert scale[:, i].min() < 1 - 0.9 * r and scale[:, i].max() > 1 + 0.9 * r  # fills the range
    assert scale.unique(dim=0).shape[0] == 2000
    torch.testing.assert_close(obs["privileged"][:, 4:7], (scale - 1) / torch.tensor([0.2, 0.1, 0.3]))
    # and a fresh draw on every reset
    assert not torch.equal(env.reset()[0]["privileged"][:, 4:7], obs["privileged"][:, 4:7])
    fixed = QuadrotorHoverEnv(HoverConfig(**NO_DR), num_envs=8)
    assert torch.equal(fixed.get_state()["dr_scale"], torch.ones(8, 3))


def test_initial_states_respect_the_configured_ranges():
    env = QuadrotorHoverEnv(HoverConfig(init_max_tilt_deg=20.0), num_envs=2000)
    obs = env.reset(seed=1)[0]["state"]
    assert obs[:, 0:6].abs().max() <= 0.5 and obs[:, 6:9].abs().max() <= 1.0
    tilt = torch.rad2deg(torch.acos(obs[:, 17].clamp(-1, 1)))  # R_zz = cos(tilt)
    assert tilt.max() <= 20.0 + 1e-3 and tilt.max() > 19.0


def test_same_seed_same_observations_different_seed_different():
    a, b = QuadrotorHoverEnv(HoverConfig(), 16), QuadrotorHoverEnv(HoverConfig(), 16)
    assert torch.equal(a.reset(seed=3)[0]["state"], b.reset(seed=3)[0]["state"])
    actions = 0.5 * torch.randn(20, 16, 4)
    for act in actions:
        assert torch.equal(a.step(act)[0]["state"], b.step(act)[0]["state"])
    assert not torch.allclose(a.reset(seed=3)[0]["state"], b.reset(seed=4)[0]["state"])


# ---- contract -------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["masked", "indexed"])
@pytest.mark.parametrize("task", ["hover", "waypoint"])
def test_snapshot_restore_reproduces_the_trajectory_bit_for_bit(task, mode):
    if task == "hover":
        env = QuadrotorHoverEnv(HoverConfig(episode_s=0.3, success_hold_s=0.1, reset_mode=mode), 32)
    else:
        env = QuadrotorWaypointEnv(WaypointConfig(episode_s=0.3, reset_mode=mode), 32)
    env.reset(seed=0)
    actions = (0.8 * torch.randn(60, 32, 4, generator=torch.Generator().manual_seed(0))).clamp(-1, 1)
    run(env, actions[0], 7)
    snapshot = env.get_state()

    def rollout():
        outs = []
        for act in actions:
            obs, reward, terminated, truncated, info = env.step(act)
            outs.append((obs, reward, terminated, truncated, info["final_obs"], info["success"]))
        return outs

    first = rollout()
    assert torch.stack([o[3] for o in first]).any()  # episodes ended (and auto-reset) within the rollout
    restored_obs = env.set_state(snapshot)
    second = rollout()
    for x, y in zip(first, second):
        for a, b in zip(x, y):
            assert (a == b).all()
    assert restored_obs.batch_size == torch.Size([32])


@pytest.mark.parametrize("mode", ["masked", "indexed"])
def test_auto_reset_returns_final_and_fresh_observations(mode):
    config = HoverConfig(episode_s=0.1, success_hold_s=0.05, reset_mode=mode)
    env, twin = QuadrotorHoverEnv(config, 4), QuadrotorHoverEnv(HoverConfig(reset_mode=mode), 4)
    env.reset(seed=0)
    action = torch.full((4, 4), 0.1)
    run(env, action, 9)
    twin.set_state(env.get_state())  # same state, but a long episode: no reset on the next step
    obs, _, terminated, truncated, info = env.step(action)
    expected_final = twin.step(action)[0]
    assert truncated.all() and not terminated.any()
    assert torch.equal(info["final_obs"]["state"], expected_final["state"])
    assert torch.allclose(info["final_obs"]["privileged"][:, 7], torch.ones(4))  # 10 of 10 steps
    assert torch.equal(obs["privileged"][:, 7], torch.zeros(4))  # a new episode
    assert torch.equal(obs["state"][:, 18:22], torch.zeros(4, 4))  # no previous action yet
    assert (obs["state"] != info["final_obs"]["state"]).any(dim=1).all()


def test_specs_and_output_types():
    env = QuadrotorWaypointEnv(WaypointConfig(), 5)
    obs, _ = env.reset(seed=0)
    for key, spec in env.observation_spec.items():
        assert spec.contains(obs[key]) and obs[key].is_contiguous()
    assert env.action_spec.shape == (4,) and (env.action_spec.low, env.action_spec.high) == (-1.0, 1.0)
    obs, reward, terminated, truncated, info = env.step(torch.full((5, 4), 3.0))  # clipped to 1
    assert reward.shape == (5,) and reward.dtype == torch.float32
    assert terminated.dtype == truncated.dtype == info["success"].dtype == torch.bool
    assert info["final_obs"].batch_size == torch.Size([5])
    assert torch.equal(obs["state"][:, 18:22], torch.ones(5, 4))
    assert env.max_episode_steps == 800
    with pytest.raises(ValueError):
        env.step(torch.zeros(4, 4))


# ---- task logic -----------------------------------------------------------------------------------
def test_hover_success_needs_one_second_in_tolerance_and_a_drift_restarts_it():
    env = QuadrotorHoverEnv(HoverConfig(**NO_DR))
    level_hover(env)
    successes = [env.step(HOVER_ACTION)[4]["success"].item() for _ in range(100)]
    assert successes == [False] * 99 + [True]
    reward = env.step(HOVER_ACTION)[1]
    assert reward.item() == pytest.approx(1.0, abs=1e-3)  # alive bonus, no cost at the target
    state = env.get_state()
    state["position"][0, 0] = 0.2  # drift out of the 0.1 m tolerance
    env.set_state(state)
    assert not env.step(HOVER_ACTION)[4]["success"].item()
    assert env.get_state()["progress"].item() == 0


def test_hover_episode_succeeds_only_when_the_final_second_holds():
    env = QuadrotorHoverEnv(HoverConfig(episode_s=1.5, **NO_DR), 2)
    level_hover(env)
    state = env.get_state()
    state["position"][1, 0] = 0.3  # env 1 starts out of tolerance and drifts in only late
    env.set_state(state)
    out = run(env, torch.zeros(2, 4), 150)
    assert out[3].all()  # truncated at the limit
    assert out[4]["success"].tolist() == [True, False]


def test_crash_terminates_with_penalty():
    env = QuadrotorHoverEnv(HoverConfig(**NO_DR))
    level_hover(env, position=(1.99, 0.0, 0.0), velocity=(2.0, 0.0, 0.0))
    _, reward, terminated, truncated, info = env.step(HOVER_ACTION)
    assert terminated.item() and not truncated.item() and not info["success"].item()
    assert reward.item() < -3.5  # crash_penalty = 5


def test_a_reward_floor_clips_the_step_reward_and_a_crash_still_pays_its_penalty_below_it():
    """reward_floor=0: far from the target a step pays 0, not less (flying on never pays less than crashing); near
    it, the reward is unchanged; a crash pays the floor minus crash_penalty."""
    still = (0.0, 0.0, 0.0)
    for position, velocity, crashes in (((1.5, 0.0, 0.0), still, False), ((0.05, 0.0, 0.0), still, False),
                                        ((1.99, 0.0, 0.0), (2.0, 0.0, 0.0), True)):
        rewards = []
        for floor in (None, 0.0):
            env = QuadrotorHoverEnv(HoverConfig(w_pos=1.5, reward_floor=floor, **NO_DR))
            level_hover(env, position=position, velocity=velocity)
            _, reward, terminated, _, _ = env.step(HOVER_ACTION)
            assert terminated.item() == crashes
            rewards.append(reward.item())
        plain, floored = rewards
        if crashes:
            assert floored == pytest.approx(-5.0, abs=1e-6) and plain < -5.0  # the floor, then the penalty
        elif position[0] > 1:
            assert plain < -1.0 and floored == 0.0  # 1 - 1.5 x 1.5 m < 0
        else:
            assert floored == plain > 0.9


def test_an_action_delay_holds_the_previous_setpoint_for_its_share_of_the_step():
    """action_delay=1 over 3 envs: delays of 0, 0.5 and 1 period. The whole-period env flies the previous setpoint
    (hover, after a reset) through the step and this one through the next, exactly as a delay-free env given those
    setpoints; the half-period env's rotors end halfway between; the on-board motor estimate follows the setpoints
    sent, whatever the delay."""
    delayed = QuadrotorHoverEnv(HoverConfig(action_delay=1.0, **NO_DR), 3)
    at_once, late = QuadrotorHoverEnv(HoverConfig(**NO_DR), 1), QuadrotorHoverEnv(HoverConfig(**NO_DR), 1)
    for env in (delayed, at_once, late):
        state = level_hover(env, position=(0.1, -0.2, 0.3))
        state["prev_action"].zero_()
        env.set_state(state)
    x, y = torch.tensor([[0.8, -0.6, 0.4, -0.2]]), torch.tensor([[-0.5, 0.3, 0.9, 0.0]])
    for step, action in enumerate((x, y)):
        delayed.step(action.expand(3, 4))
        at_once.step(action)
        late.step(HOVER_ACTION if step == 0 else x)
        d, now, before = delayed.get_state(), at_once.get_state(), late.get_state()
        for key in ("motor_speed", "velocity", "angular_velocity", "position"):
            torch.testing.assert_close(d[key][0], now[key][0], rtol=0, atol=1e-6)
            torch.testing.assert_close(d[key][2], before[key][0], rtol=0, atol=1e-6)
        assert not torch.allclose(d["motor_speed"][0], d["motor_speed"][2], atol=1e-3)
        if step == 0:  # from the same rotor speeds, a first-order lag is linear in its setpoint
            torch.testing.assert_close(d["motor_speed"][1], (d["motor_speed"][0] + d["motor_speed"][2]) / 2,
                                       rtol=0, atol=1e-6)
        torch.testing.assert_close(d["motor_estimate"], now["motor_estimate"].expand(3, 4), rtol=0, atol=0)
    with pytest.raises(ConfigError, match="action_delay=1.5"):
        HoverConfig(action_delay=1.5)


def test_waypoints_advance_and_finishing_all_terminates_with_success():
    env = QuadrotorWaypointEnv(WaypointConfig(num_waypoints=3, **NO_DR), 1)
    state = level_hover(env)
    state["waypoints"] = torch.tensor([[[0.0, 0.0, 0.0], [0.1, 0.0, 0.0], [1.0, 0.0, 0.0]]])
    state["target"] = state["waypoints"][:, 0].clone()
    state["progress"].zero_()
    env.set_state(state)
    obs, reward, terminated, _, info = env.step(torch.zeros(1, 4))
    assert env.get_state()["progress"].item() == 1 and reward.item() > 4  # reach bonus 5
    assert torch.allclose(env.get_state()["target"], torch.tensor([[0.1, 0.0, 0.0]]))
    assert torch.allclose(obs["state"][0, 22:25], torch.tensor([-1.0, 0.0, 0.0]), atol=1e-3)  # p - next waypoint
    obs, reward, terminated, _, info = env.step(torch.zeros(1, 4))  # 0.1 m away: reached at once
    assert env.get_state()["progress"].item() == 2 and not terminated.item()
    state = env.get_state()
    state["position"][0] = torch.tensor([0.95, 0.0, 0.0])
    env.set_state(state)
    _, reward, terminated, truncated, info = env.step(torch.zeros(1, 4))
    assert terminated.item() and info["success"].item() and not truncated.item()


# ---- configuration ------------------------------------------------------------------------------
def test_config_validation_and_registry():
    with pytest.raises(ConfigError):
        HoverConfig(dr_mass=0.7)
    with pytest.raises(ConfigError):
        HoverConfig(success_hold_s=5.0)  # longer than the episode
    env = registry.build("env", "quadrotor_hover", {"episode_s": 2.0}, num_envs=3)
    assert env.max_episode_steps == 200 and env.num_envs == 3
    assert isinstance(registry.build("env", "quadrotor_waypoint", {"num_waypoints": 2}), QuadrotorWaypointEnv)


@pytest.mark.gpu
def test_cuda_steps_like_cpu():
    cpu = QuadrotorHoverEnv(HoverConfig(), 64)
    gpu = QuadrotorHoverEnv(HoverConfig(), 64, device="cuda")
    state = cpu.get_state()
    state["rng"] = gpu.get_state()["rng"]  # a generator state belongs to its device
    gpu.set_state(state)
    alive = torch.ones(64, dtype=torch.bool)
    for _ in range(50):
        action = 0.2 * torch.randn(64, 4)
        a, b = cpu.step(action), gpu.step(action.cuda())
        final_a, final_b = a[4]["final_obs"]["state"], b[4]["final_obs"]["state"].cpu()
        torch.testing.assert_close(final_a[alive], final_b[alive], rtol=1e-3, atol=1e-3)
        alive &= ~(a[2] | a[3]) & ~(b[2] | b[3]).cpu()  # resets draw differently on each device



def assert_same_step(a, b) -> None:
    """Two StepResults equal: obs, reward, terminated, truncated, final_obs and success."""
    for key in ("state", "privileged"):
        torch.testing.assert_close(a[0][key], b[0][key])
        torch.testing.assert_close(a[4]["final_obs"][key], b[4]["final_obs"][key])
    for x, y in zip(a[1:4], b[1:4]):
        torch.testing.assert_close(x, y)
    torch.testing.assert_close(a[4]["success"], b[4]["success"])


TASKS = {"hover": (QuadrotorHoverEnv, HoverConfig, {}),
         "hover, mixed disturbances": (QuadrotorHoverEnv, HoverConfig, {"disturbance": "mix"}),
         "hover, mixed disturbances, privileged": (QuadrotorHoverEnv, HoverConfig,
                                                   {"disturbance": "mix", "privileged_disturbance": True}),
         "waypoint": (QuadrotorWaypointEnv, WaypointConfig, {})}


def make_task(task: str, device: str = "cpu", **config):
    env_class, config_class, preset = TASKS[task]
    return env_class(config_class(**preset, **config), 64, device)


@pytest.mark.parametrize("task", TASKS)
def test_draws_made_before_the_step_give_the_eager_step(task):
    """The CUDA-graph step draws the uniforms first (`_draw`), then runs the step on them (draw=False): on the CPU,
    that order gives exactly the eager masked step, resets included, so a replayed graph does too."""
    eager, split = make_task(task, reset_mode="masked"), make_task(task, reset_mode="masked")
    eager.reset(seed=5)
    split.reset(seed=5)
    gen = torch.Generator().manual_seed(0)
    ended = 0
    for _ in range(150):
        action = (0.8 * torch.randn(64, 4, generator=gen)).clamp(-1, 1)
        a = eager.step(action)
        split._draw(64)
        b = split._physics_step(action, draw=False)
        assert_same_step(a, b)
        ended += int((a[2] | a[3]).sum())
    assert ended > 10  # the comparison covered resets


@pytest.mark.gpu
@pytest.mark.parametrize("task", TASKS)
def test_cuda_graph_steps_like_the_eager_cuda_step(task):
    """env.cuda_graph: the replayed graph gives the eager masked step's results on the same seed, through resets,
    a snapshot restored mid-run and a re-seeded reset."""
    eager = make_task(task, "cuda", reset_mode="masked", cuda_graph=False)
    graphed = make_task(task, "cuda")  # the default on CUDA: masked reset, CUDA graph
    gen = torch.Generator().manual_seed(0)

    def run(steps: int) -> int:
        ended = 0
        for _ in range(steps):
            action = (0.8 * torch.randn(64, 4, generator=gen)).clamp(-1, 1).cuda()
            a, b = eager.step(action), graphed.step(action)
            assert_same_step(a, b)
            ended += int((a[2] | a[3]).sum())
        return ended

    eager.reset(seed=5)
    graphed.reset(seed=5)
    assert run(150) > 10 and graphed._graph is not None
    graphed.set_state(eager.get_state())
    run(20)
    eager.reset(seed=9)
    graphed.reset(seed=9)
    run(20)


def test_motor_estimate_tracks_the_rotors_of_the_nominal_vehicle():
    env = QuadrotorWaypointEnv(WaypointConfig(obs_motor_estimate=True, **NO_DR), 8)
    assert env.observation_spec["state"].shape == (29,)
    env.reset(seed=0)
    for _ in range(30):
        obs = env.step((0.5 * torch.randn(8, 4)).clamp(-1, 1))[0]
    rotors = env.get_state()["motor_speed"]
    torch.testing.assert_close(obs["state"][:, 25:29], 2 * rotors - 1, atol=1e-4, rtol=0)
    torch.testing.assert_close(obs["state"][:, 25:29], obs["privileged"][:, 0:4], atol=1e-4, rtol=0)


def test_accelerometer_reads_thrust_over_mass_and_reveals_the_thrust_to_weight_ratio():
    """obs_accelerometer appends body-z specific force / g - 1: 0 in a nominal hover, kf/m - 1 for a
    randomized vehicle at hover rotor speed, -1 in free fall, and the measured vertical acceleration
    (plus g, for a level vehicle) at any motor speed."""
    env = QuadrotorHoverEnv(HoverConfig(obs_accelerometer=True, obs_motor_estimate=True, max_pos=10.0), 64)
    assert env.observation_spec["state"].shape == (27,)
    obs, _ = env.reset(seed=0)
    dr = env.get_state()["dr_scale"]
    torch.testing.assert_close(obs["state"][:, 26], dr[:, 1] / dr[:, 0] - 1)  # rotors start at nominal hover speed
    level_hover(env)
    before = env.get_state()["velocity"][:, 2].clone()
    obs = env.step((0.3 * torch.randn(64, 4)).clamp(-1, 1))[0]
    state = env.get_state()
    thrust = (state["motor_speed"] ** 2).mean(1) * 4 * P.max_thrust * dr[:, 1] / (P.mass * dr[:, 0])
    torch.testing.assert_close(obs["state"][:, 26] + 1, thrust / P.gravity, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(state["specific_force"], thrust / P.gravity, rtol=1e-5, atol=1e-6)
    # over one step the vertical acceleration of a (still nearly level) vehicle is specific force - g
    accel = (state["velocity"][:, 2] - before) / env.config.dt
    assert (accel - (thrust - P.gravity)).abs().max() < 0.05 * P.gravity
    free = QuadrotorHoverEnv(HoverConfig(obs_accelerometer=True, max_pos=10.0, max_speed=20.0, **NO_DR))
    state = level_hover(free)
    state["motor_speed"].zero_()
    free.set_state(state)
    assert free.step(torch.full((1, 4), -1.0))[0]["state"][0, -1].item() == pytest.approx(-1.0, abs=1e-6)
