"""A scripted hover / waypoint expert for the quadrotor envs: demonstrations, baselines and tests.

    action = env.expert_action()           # [N, 4] in [-1, 1], for env.step (calls controller_action here)

A cascaded geometric controller on SE(3) (Lee, Leok & McClamroch 2010, "Geometric
tracking control of a quadrotor UAV on SE(3)", eqs. 11-12 with zero desired
velocity, acceleration and body rates): a PD position loop gives the desired
thrust vector, whose direction and the current heading give the desired
attitude R_d; a PD attitude loop on the error e_R = vee(R_d^T R - R^T R_d) / 2
gives the desired angular acceleration. The mixer inverts the rotor geometry
(`dynamics.wrench_matrix`) for per-rotor thrusts, and a lead term undoes most of
the 0.15 s rotor lag using the rotor-speed estimate the env computes from past
commands (`obs_motor_estimate`): the commanded speed overshoots the desired one
by LAG_LEAD times the current estimated gap.

It reads only what a flight controller knows on board (position error,
velocity, rates, attitude, its own past commands) and nominal parameters, so
its actions are a function of the observation (with `obs_motor_estimate: true`)
and suit behaviour cloning. The randomized mass and thrust coefficient
(+-10%) leave a small steady-state offset, as with any controller without
integral action.
"""

from __future__ import annotations

import torch

from sims.quadrotor.dynamics import wrench_matrix

# Gains, per unit mass / inertia (accelerations), tuned on 500 hover episodes of the default env (success
# rose from 72% to 99.8% going from the first to these): a position loop of natural frequency 5 rad/s and
# damping 0.9, and an attitude loop ~4.5x faster, which the rotor lag tolerates only with the lead term.
KP_POS = 25.0  # 1/s^2
KD_POS = 9.0  # 1/s
KP_ATT = 500.0  # 1/s^2
KD_ATT = 60.0  # 1/s
MAX_TILT = 0.6  # rad: the horizontal demand is capped so the thrust vector tilts at most ~34 deg
LAG_LEAD = 15.0  # motor command = estimate + (1 + LAG_LEAD) (desired - estimate), clipped to [0, 1]

def controller_action(state: torch.Tensor, motor_estimate: torch.Tensor, params) -> torch.Tensor:
    """state [N, >=18] (p - target, v, body rates, row-major R body->world), motor_estimate [N, 4] -> action [N, 4]."""
    g = params.gravity
    e_p, vel, rates = state[:, 0:3], state[:, 3:6], state[:, 6:9]
    rot = state[:, 9:18].reshape(-1, 3, 3)
    acc = -KP_POS * e_p - KD_POS * vel
    horizontal = acc[:, :2].norm(dim=-1, keepdim=True)
    cap = g * torch.tan(torch.tensor(MAX_TILT))
    acc = torch.cat([acc[:, :2] * (cap / horizontal.clamp(min=cap)), acc[:, 2:]], -1)
    thrust_vec = acc + torch.tensor([0.0, 0.0, g], device=state.device)
    thrust_vec[:, 2].clamp_(min=0.2 * g)  # never ask to push downwards
    b3 = thrust_vec / thrust_vec.norm(dim=-1, keepdim=True)
    b1_now = rot[:, :, 0]  # keep the current heading: yaw is free in these tasks
    b2 = torch.linalg.cross(b3, b1_now)
    b2 = b2 / b2.norm(dim=-1, keepdim=True).clamp(min=1e-6)
    b1 = torch.linalg.cross(b2, b3)
    rot_d = torch.stack([b1, b2, b3], -1)  # columns are the desired body axes in the world
    err = 0.5 * (rot_d.transpose(1, 2) @ rot - rot.transpose(1, 2) @ rot_d)
    e_r = torch.stack([err[:, 2, 1], err[:, 0, 2], err[:, 1, 0]], -1)  # vee map
    ang_acc = -KP_ATT * e_r - KD_ATT * rates
    collective = (thrust_vec * rot[:, :, 2]).sum(-1, keepdim=True)  # thrust acceleration along body z
    mix = torch.linalg.inv(wrench_matrix(params).to(state.device))
    common = collective * mix[:, 0]  # per-rotor thrust / max thrust: a collective part plus a differential
    differential = ang_acc @ mix[:, 1:].T
    # attitude first (as PX4's mixer): shift the collective so the differential fits in [0, 1]
    low, high = -differential.amin(-1, keepdim=True), 1 - differential.amax(-1, keepdim=True)
    common = torch.minimum(torch.maximum(common, low), high)
    thrust = (common + differential).clamp(0.0, 1.0)
    speed = thrust.sqrt()
    command = (motor_estimate + (1 + LAG_LEAD) * (speed - motor_estimate)).clamp(0.0, 1.0)
    return speed_to_action(command, params)


def speed_to_action(speed: torch.Tensor, params) -> torch.Tensor:
    """Rotor-speed setpoints (fraction of max RPM) -> env action, inverting the env's
    thrust map t + t a + (1 - 2t) relu(a) (t = hover thrust / max thrust)."""
    t = params.hover_fraction**2
    thrust = speed.square()
    return torch.where(thrust >= t, (thrust - t) / (1 - t), (thrust - t) / t).clamp(-1.0, 1.0)
