"""Scripted operators for simulated tasks: a sim's scripted expert taking over when a rule fires.

    operator = scripted_operator(env, "arm_reach", ScriptedOperatorConfig(action_dim=4))

`DriftRule` models an attentive operator: it steps in when the task stops progressing, i.e. the
distance still to go grows past the smallest it has been this episode by `drift_m`, or is still
more than `stall_m` after `stall_fraction` of the time limit. The distance comes from what a
simulator knows and a person watching sees (`PROGRESS`): for arm_reach the end effector to the
goal (its `privileged` observation); for the MuJoCo Panda tasks the tcp to the target (reach),
plus the tcp to the cube for push and pick, where the cube must first be reached.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from embodied.config import check
from embodied.demos import load_expert

# fn(env, obs) -> (distance still to go [N] m, fraction of the time limit used [N])
Progress = Callable[[object, dict], tuple[torch.Tensor, torch.Tensor]]


def _arm_reach_progress(env, obs):
    from sims.arm_reach import kinematics

    privileged = obs["privileged"]  # sims/arm_reach/env.py layout: [3] distance / REACH, [9] step fraction
    return privileged[:, 3] * kinematics.REACH, privileged[:, 9]


def _mujoco_progress(with_cube: bool) -> Progress:
    def progress(env, obs):  # sims/mujoco/env.py state layout: [24:27] cube - tcp, [27:30] target - (cube or tcp)
        state = env.full_state(obs)  # the goal rows may sit in `privileged` (goal_in_state=false)
        distance = state[:, 27:30].norm(dim=-1)
        if with_cube:
            distance = distance + state[:, 24:27].norm(dim=-1)
        return distance, torch.from_numpy(env.steps / env.max_episode_steps).to(distance)

    return progress


PROGRESS: dict[str, Progress] = {
    "arm_reach": _arm_reach_progress,
    "mujoco_reach": _mujoco_progress(with_cube=False),
    "mujoco_push": _mujoco_progress(with_cube=True),
    "mujoco_pick": _mujoco_progress(with_cube=True),
}


@dataclass(frozen=True)
class DriftRuleConfig:
    drift_m: float = 0.03  # m the distance to go may grow past its best this episode before the operator steps in
    stall_m: float = 0.08  # m: still this far ...
    stall_fraction: float = 0.4  # ... after this fraction of the episode: the operator steps in

    def __post_init__(self):
        check(self.drift_m > 0 and self.stall_m > 0, "drift_m and stall_m must be > 0")
        check(0 < self.stall_fraction <= 1, f"stall_fraction={self.stall_fraction} must be in (0, 1]")


class DriftRule:
    """`rule(obs) -> bool [N]` for a ScriptedOperator; `progress(obs) -> (distance m, time fraction)`."""

    def __init__(self, progress: Callable[[dict], tuple[torch.Tensor, torch.Tensor]],
                 config: DriftRuleConfig = DriftRuleConfig()):  # fmt: skip
        self.progress, self.config = progress, config
        self.best: torch.Tensor | None = None

    def __call__(self, obs) -> torch.Tensor:
        distance, fraction = self.progress(obs)
        if self.best is None or self.best.shape != distance.shape:
            self.best = distance.clone()
        self.best = torch.where(fraction == 0, distance, torch.minimum(self.best, distance))  # new episode: restart
        drifting = distance > self.best + self.config.drift_m
        stalled = (fraction >= self.config.stall_fraction) & (distance > self.config.stall_m)
        return (drifting | stalled).cpu()


def scripted_operator(env, env_name: str, config, rule_config: DriftRuleConfig = DriftRuleConfig()):
    """A `ScriptedOperator` driving `env` (a simulator) with its scripted expert under a `DriftRule`."""
    from real_robot.teleop.scripted import ScriptedOperator

    if env_name not in PROGRESS:
        raise KeyError(f"no scripted operator rule for env {env_name!r}; envs with one: {', '.join(PROGRESS)}")
    expert, progress = load_expert(env_name), PROGRESS[env_name]
    rule = DriftRule(lambda obs: progress(env, obs), rule_config)
    return ScriptedOperator(config, expert=lambda obs: expert(env), rule=rule)
