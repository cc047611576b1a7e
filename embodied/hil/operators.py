"""Scripted operators for simulated tasks: a sim's scripted expert taking over when a rule fires.

    operator = scripted_operator(env, {"action_dim": 4, "min_steps": 10})   # teleop=scripted settings

`DriftRule` models an attentive operator: it steps in when the task stops progressing, i.e. the
distance still to go grows past the smallest it has been this episode by `drift_m`, or is still
more than `stall_m` after `stall_fraction` of the time limit. The distance comes from what a
simulator knows and a person watching sees, the env's `task_progress(obs)` (sims/<env>/: e.g. for
arm_reach the end effector to the goal; for the MuJoCo Panda tasks the tcp to the target, plus the
tcp to the cube for push and pick); the expert is the env's `expert_action()`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from embodied.config import check


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


def scripted_operator(env, params: dict, rule_config: DriftRuleConfig = DriftRuleConfig()):
    """The registry's `teleop=scripted` operator, built with `params` (its Config's settings), driving `env`
    (a simulator) with its scripted expert under a `DriftRule`."""
    from embodied import registry

    missing = [m for m in ("expert_action", "task_progress") if not hasattr(env, m)]
    if missing:
        raise KeyError(f"{type(env).__name__} has no scripted operator: it lacks {' and '.join(missing)} "
                       "(sims/arm_reach and sims/mujoco have both)")
    rule = DriftRule(env.task_progress, rule_config)
    return registry.build("teleop", "scripted", params, expert=lambda obs: env.expert_action(), rule=rule)
