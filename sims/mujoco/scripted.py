"""Scripted experts for the Panda tasks (ee_delta control): tests, baselines, demonstrations.

    action = scripted_action(env, obs["state"])     # [N, 4] in [-1, 1]
    action = expert(env)                            # the same, from the env's current state

Stateless rules on the observation alone (so demonstrations are a function of the
observation): move the tool centre point toward a waypoint chosen by the task's
phase, saturated at ee_step per step.
"""

from __future__ import annotations

import torch

from sims.mujoco import scene

HOVER = 0.07  # m, tcp height for moving over the cube without touching it
OPEN, CLOSED = 1.0, -1.0


@torch.no_grad()
def scripted_action(env, state: torch.Tensor) -> torch.Tensor:
    """The expert's action [N, 4] for observation `state` [N, 31] (env.config.control must be ee_delta)."""
    if env.config.control != "ee_delta":
        raise ValueError("the scripted experts drive control='ee_delta'")
    state = state.cpu().double()
    tcp, cube, target = state[:, 15:18], state[:, 18:21], state[:, 21:24]
    grasped = state[:, 30] > 0.5
    gripper = torch.full_like(tcp[:, 0], OPEN)
    if env.TASK == "reach":
        waypoint = target
    elif env.TASK == "push":
        direction = target[:, :2] - cube[:, :2]
        direction = direction / direction.norm(dim=-1, keepdim=True).clamp(min=1e-6)
        behind = cube[:, :2] - (scene.CUBE_HALF + 0.03) * direction
        lined_up = ((tcp[:, :2] - behind).norm(dim=-1) < 0.03)[:, None]
        low = tcp[:, 2:] < scene.CUBE_HALF + 0.01
        z_low, z_hover = torch.full_like(low, scene.CUBE_HALF, dtype=tcp.dtype), torch.full_like(tcp[:, 2:], HOVER)
        push_through = torch.cat([target[:, :2] - scene.CUBE_HALF * direction, z_low], -1)
        # hover over the spot behind the cube, go down there, then push toward the target
        waypoint = torch.where(
            lined_up, torch.where(low, push_through, torch.cat([behind, z_low], -1)), torch.cat([behind, z_hover], -1)
        )
        gripper[:] = CLOSED
    elif env.TASK == "pick":
        above = (tcp[:, :2] - cube[:, :2]).norm(dim=-1) < 0.008
        at_cube = above & (tcp[:, 2] - cube[:, 2] < 0.008)
        hover = torch.cat([cube[:, :2], torch.full_like(cube[:, :1], HOVER)], -1)
        waypoint = torch.where(above[:, None], cube, hover)
        waypoint = torch.where((at_cube | grasped)[:, None], torch.where(grasped[:, None], target, cube), waypoint)
        gripper = torch.where(at_cube | grasped, torch.full_like(gripper, CLOSED), gripper)
    else:
        raise TypeError(f"no scripted expert for {type(env).__name__}")
    move = ((waypoint - tcp) / env.config.ee_step).clamp(-1.0, 1.0)
    return torch.cat([move, gripper[:, None]], -1).float()


def expert(env) -> torch.Tensor:
    """`scripted_action` on the env's current state (what `MujocoArmEnv.expert_action` returns)."""
    return scripted_action(env, env.observe_state())
