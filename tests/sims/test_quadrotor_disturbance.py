"""Quadrotor disturbance presets (sims/quadrotor/disturbance.py): each changes the flight measurably, draws
within its documented ranges, is seeded, and `none` is the nominal env bit for bit."""

from __future__ import annotations

import pytest
import torch

from embodied import registry
from embodied.config import ConfigError
from sims.quadrotor import HoverConfig, QuadrotorHoverEnv, QuadrotorWaypointEnv, WaypointConfig
from sims.quadrotor import disturbance as dist
from sims.quadrotor.dynamics import CrazyflieParams

P = CrazyflieParams()
NO_DR = dict(dr_mass=0.0, dr_thrust=0.0, dr_motor_tau=0.0)
N = 64


def hover_env(preset: str, n: int = N, **kw) -> QuadrotorHoverEnv:
    env = QuadrotorHoverEnv(HoverConfig(obs_motor_estimate=True, disturbance=preset, **kw), num_envs=n)
    env.reset(seed=3)
    return env


def fly_expert(env, steps: int) -> list[dict[str, torch.Tensor]]:
    """The scripted expert's states after each of `steps` steps (no episode ends within them here)."""
    states = []
    for _ in range(steps):
        env.step(env.expert_action())
        states.append(env.get_state())
    return states


def level_start(env) -> None:
    """Every env level at the origin, at rest, rotors at the nominal hover speed."""
    state = env.get_state()
    state["position"].zero_()
    state["velocity"].zero_()
    state["angular_velocity"].zero_()
    state["quaternion"] = torch.tensor([1.0, 0.0, 0.0, 0.0]).expand(env.num_envs, 4).clone()
    state["motor_speed"].fill_(P.hover_fraction)
    state["motor_estimate"].fill_(P.hover_fraction)
    env.set_state(state)


def test_none_adds_nothing_and_the_presets_start_from_the_nominal_initial_states():
    nominal, none = QuadrotorHoverEnv(HoverConfig()), QuadrotorHoverEnv(HoverConfig(disturbance="none"))
    assert set(none.get_state()) == set(nominal.get_state()) and "disturbance" not in none.get_state()
    assert none._s.shape == nominal._s.shape
    obs = [hover_env(p)._observe()["state"] for p in ("none", "push", "gust", "payload", "motor", "all")]
    assert all(torch.equal(obs[0], o) for o in obs[1:])  # the disturbances draw from a generator of their own


def test_push_matches_the_nominal_flight_bit_for_bit_until_the_kick_then_jumps_by_dv():
    nominal, pushed = hover_env("none", **NO_DR), hover_env("push", **NO_DR)
    d = pushed.get_state()["disturbance"]
    first = int(d[:, dist.PUSH_STEP].min())
    a, b = fly_expert(nominal, first + 1), fly_expert(pushed, first + 1)
    for s, t in zip(a[:first], b[:first]):  # the identity multipliers of the other components are exact
        assert all(torch.equal(s[k], t[k]) for k in ("position", "velocity", "angular_velocity", "motor_speed"))
    kicked = d[:, dist.PUSH_STEP] == first
    dv = b[first]["velocity"][kicked] - a[first]["velocity"][kicked]
    # the kick lands before the step's integration: one step of flight later it is still ~dv
    assert torch.allclose(dv, d[kicked][:, dist.PUSH_DV], atol=0.05)
    assert not torch.equal(a[first]["velocity"], b[first]["velocity"])


def test_gust_pushes_a_hovering_expert_downwind():
    nominal, gusty = hover_env("none", **NO_DR), hover_env("gust", **NO_DR)
    for env in (nominal, gusty):
        level_start(env)
    wind = gusty.get_state()["disturbance"][:, dist.WIND]
    a, b = fly_expert(nominal, 250)[-1], fly_expert(gusty, 250)[-1]  # every onset is before step 150
    offset = b["position"] - a["position"]
    downwind = (offset * wind).sum(-1) / wind.norm(dim=-1)
    assert (downwind > 0.005).all()  # a PD controller without integral action settles downwind
    assert a["position"].abs().max() < 1e-3


def test_payload_needs_more_thrust_and_the_nominal_hover_command_no_longer_holds():
    nominal, heavy = hover_env("none", **NO_DR), hover_env("payload", **NO_DR)
    for env in (nominal, heavy):
        level_start(env)
    base, speed = (fly_expert(env, 200)[-1]["motor_speed"].mean(-1) for env in (nominal, heavy))
    # in a steady hover the rotors carry the weight: speed grows as sqrt(mass), x1.2-1.3 -> +9-14%
    assert (speed > base * 1.08).all() and (speed < base * 1.15).all()
    for preset in ("none", "payload", "motor"):
        env = hover_env(preset, **NO_DR)
        level_start(env)
        for _ in range(15):
            env.step(torch.zeros(N, 4))  # the nominal vehicle's hover command, 0.15 s (a weak rotor crashes by 0.3 s)
        s = env.get_state()
        assert (s["step"] == 15).all()  # still the same episodes
        sinks, spins = s["velocity"][:, 2] < -0.1, s["angular_velocity"].norm(dim=-1) > 1.0
        if preset == "none":
            assert s["velocity"].abs().max() < 1e-3 and s["angular_velocity"].abs().max() < 1e-3
        elif preset == "payload":
            assert sinks.all()  # at -1.5 to -2.3 m/s^2
        else:  # all four rotors weaker: it sinks; one: it rolls/pitches over
            weak = (s["disturbance"][:, dist.ROTOR_KF] < 1).sum(-1)
            assert (sinks | (weak == 1)).all() and (spins | (weak == 4)).all()


def test_draws_lie_in_their_ranges_and_follow_the_seed():
    env = hover_env("all", n=4096)
    d = env.get_state()["disturbance"]
    steps = env.max_episode_steps
    for row, (low, high) in ((dist.MASS, dist.PAYLOAD_MASS), (dist.INERTIA, dist.PAYLOAD_INERTIA),
                             (dist.TAU, dist.MOTOR_TAU)):
        assert low <= d[:, row].min() and d[:, row].max() <= high
    kf = d[:, dist.ROTOR_KF]
    weak = kf < 1
    assert ((kf == 1) | ((kf >= 0.75) & (kf <= 0.85))).all()
    assert set(weak.sum(-1).tolist()) == {1, 4}  # one rotor or all four
    for row in (dist.PUSH_STEP, dist.GUST_STEP):
        assert 0.15 * steps - 1 <= d[:, row].min() and d[:, row].max() < 0.5 * steps
    dv = d[:, dist.PUSH_DV].norm(dim=-1)
    assert 0.5 - 1e-5 <= dv.min() and dv.max() <= 1.0 + 1e-5 and d[:, dist.PUSH_DW].abs().max() <= 1.0
    wind = d[:, dist.WIND]
    assert (wind[:, 2] == 0).all() and 2.0 < wind.norm(dim=-1).min() and wind.norm(dim=-1).max() < 6.5  # m/s
    assert torch.equal(d, hover_env("all", n=4096).get_state()["disturbance"])  # same seed, same draws
    env.reset(seed=4)
    assert not torch.equal(d, env.get_state()["disturbance"])
    alone = hover_env("push", n=4096).get_state()["disturbance"]  # a component draws the same alone as in `all`
    assert torch.equal(alone[:, dist.PUSH_STEP : dist.GUST_STEP], d[:, dist.PUSH_STEP : dist.GUST_STEP])


def test_mix_draws_one_component_per_episode():
    d = hover_env("mix", n=4096).get_state()["disturbance"]
    on = torch.stack([d[:, dist.MASS] != 1, d[:, dist.ROTOR_KF].lt(1).any(-1), d[:, dist.PUSH_STEP] >= 0,
                      d[:, dist.DRAG] == 1])  # payload, motor, push, gust
    assert on.sum(0).max() == 1  # at most one per episode
    share = torch.cat([on.float().mean(1), (~on.any(0)).float().mean().view(1)])
    assert torch.allclose(share, torch.full((5,), 0.2), atol=0.03)  # none and each component, 1/5 each
    assert (d[~on[3]][:, dist.WIND] == 0).all() and (d[~on[2]][:, dist.PUSH_DV] == 0).all()


@pytest.mark.parametrize("cls,config", [(QuadrotorHoverEnv, HoverConfig), (QuadrotorWaypointEnv, WaypointConfig)])
def test_snapshot_restore_reproduces_a_disturbed_trajectory_bit_for_bit(cls, config):
    env = cls(config(disturbance="all"), num_envs=32)
    env.reset(seed=0)
    actions = torch.rand(400, 32, 4, generator=torch.Generator().manual_seed(0)) * 2 - 1
    for a in actions[:100]:
        env.step(a)
    snapshot = env.get_state()
    first = [env.step(a)[0]["state"] for a in actions[100:]]  # crosses auto-resets: fresh draws too
    env.set_state(snapshot)
    again = [env.step(a)[0]["state"] for a in actions[100:]]
    assert all(torch.equal(x, y) for x, y in zip(first, again))


def test_bad_preset_is_a_clear_error():
    with pytest.raises(ConfigError, match="valid presets: none, push, gust, payload, motor, all, mix"):
        HoverConfig(disturbance="gsut")
    with pytest.raises(ConfigError, match="valid choices"):  # the config path (env.disturbance=...) names them too
        registry.build("env", "quadrotor_waypoint", {"disturbance": "wind"})
