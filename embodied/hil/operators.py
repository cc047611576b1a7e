"""Scripted operators for simulated tasks: a sim's scripted expert taking over when a rule fires.

    operator = scripted_operator(env, "arm_reach", ScriptedOperatorConfig(action_dim=4))

`DriftRule` models an attentive operator of a reaching task: it steps in when the end effector
moves away from the goal (distance grows past the closest it has been this episode by
`drift_m`) or makes too little progress (still farther than `stall_m` after `stall_fraction`
of the time limit). It reads the env's `privileged` observation (distance / REACH at [3], step
fraction at [9] for arm_reach), which a simulator has and a person watching sees.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from embodied.config import check
from embodied.demos import load_expert

# arm_reach `privileged` layout (sims/arm_reach/env.py): [3] distance / REACH, [9] step fraction
_DISTANCE, _TIME = 3, 9


@dataclass(frozen=True)
class DriftRuleConfig:
    drift_m: float = 0.03  # m the tip may move away from its best approach before the operator steps in
    stall_m: float = 0.08  # m: still this far ...
    stall_fraction: float = 0.4  # ... after this fraction of the episode: the operator steps in

    def __post_init__(self):
        check(self.drift_m > 0 and self.stall_m > 0, "drift_m and stall_m must be > 0")
        check(0 < self.stall_fraction <= 1, f"stall_fraction={self.stall_fraction} must be in (0, 1]")


class DriftRule:
    def __init__(self, reach: float, config: DriftRuleConfig = DriftRuleConfig()):
        self.reach, self.config = reach, config
        self.best: torch.Tensor | None = None

    def __call__(self, obs) -> torch.Tensor:
        privileged = obs["privileged"]
        distance = privileged[:, _DISTANCE] * self.reach
        fraction = privileged[:, _TIME]
        if self.best is None or self.best.shape != distance.shape:
            self.best = distance.clone()
        self.best = torch.where(fraction == 0, distance, torch.minimum(self.best, distance))  # new episode: restart
        drifting = distance > self.best + self.config.drift_m
        stalled = (fraction >= self.config.stall_fraction) & (distance > self.config.stall_m)
        return (drifting | stalled).cpu()


def scripted_operator(env, env_name: str, config, rule_config: DriftRuleConfig = DriftRuleConfig()):
    """A `ScriptedOperator` driving `env` (a simulator) with its scripted expert under a `DriftRule`."""
    from real_robot.teleop.scripted import ScriptedOperator

    if env_name != "arm_reach":
        raise KeyError(f"no scripted operator rule for env {env_name!r}; envs with one: arm_reach")
    from sims.arm_reach import kinematics

    expert = load_expert(env_name)
    return ScriptedOperator(config, expert=lambda obs: expert(env), rule=DriftRule(kinematics.REACH, rule_config))
