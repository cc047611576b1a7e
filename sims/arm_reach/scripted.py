"""A scripted expert for ArmReachEnv: demonstrations, baselines and tests.

    action = scripted_action(env)          # [N, J] in [-1, 1], for env.step

"cartesian" (default) moves the gripper tip straight toward the goal ball
with damped least squares (Wampler 1986, "Manipulator inverse kinematic
solutions based on vector formulations and damped least-squares methods";
Buss 2004, "Introduction to inverse kinematics with Jacobian transpose,
pseudoinverse and damped least squares methods"), its redundant degree of
freedom pulled toward the home posture. It only reads what the observation
shows (joints, tip, goal ball), so its demonstrations are a function of the
observation and suit behaviour cloning. "joint" heads straight, in joint
space, for the configuration that generated the goal ball: it cannot fail
within the time limit but depends on hidden state.
"""

from __future__ import annotations

from typing import Literal

import torch

from sims.arm_reach import kinematics as kin

DLS_DAMPING = 0.02  # m; keeps joint steps bounded near the stretched-out singularity (Buss 2004, sec. 5)
POSTURE_GAIN = 0.1  # fraction of the posture error closed per step, inside the null space


@torch.no_grad()
def scripted_action(
    env, space: Literal["cartesian", "joint"] = "cartesian", gain: float = 0.5
) -> torch.Tensor:
    """Action [N, J] closing `gain` of the remaining error each step, saturated to [-1, 1]."""
    qpos = env.qpos
    if space == "joint":
        step = gain * (env.goal_qpos - qpos)
    elif space == "cartesian":
        step = _dls_step(env, kin.jacobian(qpos), gain)
        # joint clamping: a joint held at its limit drops out and the others
        # make up for it (Raunhardt & Boulic 2007, "Progressive clamping")
        blocked = ((qpos >= env.upper - 1e-4) & (step > 0)) | ((qpos <= env.lower + 1e-4) & (step < 0))
        step = _dls_step(env, kin.jacobian(qpos) * (~blocked).unsqueeze(-2), gain) * (~blocked)
    else:
        raise ValueError(f"space={space!r} must be 'cartesian' or 'joint'")
    return _joint_step_to_action(env, step)


def _dls_step(env, jac: torch.Tensor, gain: float) -> torch.Tensor:
    """Joint step [N, J] moving the tip `gain` of the way to the goal; jac [N, 3, J]."""
    jac_t = jac.transpose(-1, -2)
    eye = torch.eye(3, device=jac.device)
    pinv = jac_t @ torch.linalg.inv(jac @ jac_t + DLS_DAMPING**2 * eye)  # [N, J, 3]
    error = env.goal_position - env.ee_position
    step = (pinv @ (gain * error).unsqueeze(-1)).squeeze(-1)
    null = torch.eye(jac.shape[-1], device=jac.device) - pinv @ jac  # [N, J, J] projector onto the null space
    return step + (null @ (POSTURE_GAIN * (env.home - env.qpos)).unsqueeze(-1)).squeeze(-1)


def _joint_step_to_action(env, step: torch.Tensor) -> torch.Tensor:
    """Joint displacement for the next control step [N, J] -> action [N, J].

    Velocity control commands step / dt directly; torque control inverts the
    joint model so the velocity after the step is step / dt. Actions beyond
    [-1, 1] are scaled down together so the motion keeps its direction.
    """
    cfg = env.config
    velocity = step / cfg.control_dt
    if cfg.control == "velocity":
        action = velocity / cfg.max_joint_velocity
    else:
        torque = cfg.inertia * (velocity - env.qvel) / cfg.control_dt + cfg.damping * velocity
        action = torque / cfg.max_torque
    return action / action.abs().amax(dim=-1, keepdim=True).clamp(min=1.0)
