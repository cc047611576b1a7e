"""Quadrotor disturbance presets (sims/quadrotor/disturbance.py): each changes the flight measurably, draws
within its documented ranges, is seeded, and `none` is the nominal env bit for bit."""

from __future__ import annotations

import math

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


# ---- the critic's view of the draws (privileged_disturbance) --------------------------------------------------
HOVER_OMEGA = 4 * P.hover_fraction * P.max_rpm * 2 * math.pi / 60  # rad/s, the rotors' summed hover speed
MAX_WIND = dist.GUST_FORCE[1] * P.mass * P.gravity / (dist.DRAG_XY * HOVER_OMEGA)  # m/s, the strongest gust's wind


def critic_view(state: dict[str, torch.Tensor]) -> torch.Tensor:
    """The 13 rows of disturbance.PRIVILEGED_ROWS from a snapshot, written out from their documentation."""
    d, t = state["disturbance"], state["step"].float()
    push, gust = d[:, dist.PUSH_STEP], d[:, dist.GUST_STEP]
    blowing = ((gust >= 0) & (t >= gust)).float().unsqueeze(1)
    return torch.cat([(d[:, 0:3] - 1) / torch.tensor([0.3, 0.5, 0.6]), (d[:, 3:7] - 1) / 0.25,
                      torch.stack([push >= t, (push >= 0) & (push < t), d[:, dist.DRAG] == 1, gust > t], 1).float(),
                      d[:, dist.WIND][:, :2] * blowing / MAX_WIND], 1)  # fmt: skip


def test_privileged_disturbance_off_changes_nothing_and_never_computes_the_rows(monkeypatch):
    def fail(*args):
        raise AssertionError("Disturbances.observe called with privileged_disturbance off")

    actions = torch.rand(400, N, 4, generator=torch.Generator().manual_seed(0)) * 2 - 1  # crosses auto-resets
    for preset in ("none", "mix"):
        off, on = hover_env(preset), hover_env(preset, privileged_disturbance=True)
        assert off.observation_spec["privileged"].shape == (9,) and on.observation_spec["privileged"].shape == (22,)
        with monkeypatch.context() as m:
            m.setattr(dist.Disturbances, "observe", fail)
            a = [off.step(x) for x in actions]  # the off path: the nominal env's step, bit for bit
        for x, (obs, reward, terminated, truncated, info) in zip(actions, a):
            o, r, te, tr, i = on.step(x)
            assert torch.equal(obs["state"], o["state"]) and torch.equal(obs["privileged"], o["privileged"][:, :9])
            assert torch.equal(info["final_obs"]["privileged"], i["final_obs"]["privileged"][:, :9])
            assert torch.equal(reward, r) and torch.equal(terminated, te) and torch.equal(truncated, tr)
            assert obs["privileged"].shape == (N, 9)
            if preset == "none":  # no draws: the rows are the identity's, 0
                assert not o["privileged"][:, 9:].any()
        assert sum(bool((s[2] | s[3]).any()) for s in a) > 0  # episodes ended and were redrawn on the way


def test_privileged_disturbance_rows_are_the_drawn_disturbance_as_it_acts():
    env = hover_env("all", n=256, privileged_disturbance=True, **NO_DR)
    level_start(env)
    first_push = int(env.get_state()["disturbance"][:, dist.PUSH_STEP].min())
    rows, same = [], torch.ones(256, dtype=torch.bool)  # same: still the first episode (weak rotors crash some)
    for t in range(env.max_episode_steps // 2 + 2):  # past every push and gust onset (before 50% of the episode)
        state = env.get_state()
        same &= state["step"] == t
        obs = env._observe()["privileged"][:, 9:]
        torch.testing.assert_close(obs, critic_view(state), atol=1e-5, rtol=0)  # redrawn episodes included
        rows.append(obs)
        obs, *_ = env.step(env.expert_action())
        if t == first_push:  # the flag turns from "to come" to "happened" on the step that kicks the velocity
            kicked = same & (state["disturbance"][:, dist.PUSH_STEP] == first_push)
            kicked &= env.get_state()["step"] == t + 1
            assert kicked.any() and (obs["privileged"][kicked, 16:18] == torch.tensor([0.0, 1.0])).all()
            jump = (env.get_state()["velocity"] - state["velocity"])[kicked]
            assert torch.allclose(jump, state["disturbance"][kicked][:, dist.PUSH_DV], atol=0.1)
    rows = torch.stack(rows)
    assert same.sum() > 10 and rows.abs().max() <= 1.0 + 1e-5  # O(1), within the spec
    assert (rows[0, :, 7] == 1).all() and (rows[-1, same, 8] == 1).all()  # every push came, within the window
    assert (rows[0, :, 11:].abs().max() == 0) and (rows[-1, same, 11:].norm(dim=-1) > 0.3).all()  # the wind rose
    assert rows[-1, :, 0:3].min() > 0.3 and (rows[-1, :, 3:7] <= -0.6 + 1e-5).any(1).all()  # payload, weak rotors
    # the actor does not see them: the state is the nominal one
    plain, seen = (hover_env("all", n=256, privileged_disturbance=p, **NO_DR) for p in (False, True))
    assert torch.equal(plain._observe()["state"], seen._observe()["state"])


def test_a_run_with_privileged_disturbance_evaluates_under_every_preset():
    """The width is the same under every preset (eval rebuilds the env with --disturbance), for both tasks."""
    for cls, config in ((QuadrotorHoverEnv, HoverConfig), (QuadrotorWaypointEnv, WaypointConfig)):
        specs = {cls(config(disturbance=p, privileged_disturbance=True), num_envs=2).observation_spec["privileged"].shape
                 for p in dist.PRESETS}  # fmt: skip
        assert len(specs) == 1
    built = registry.build("env", "quadrotor_waypoint", {"disturbance": "gust", "privileged_disturbance": True})
    assert built.reset(seed=0)[0]["privileged"].shape[-1] == 9 + dist.PRIVILEGED_ROWS
