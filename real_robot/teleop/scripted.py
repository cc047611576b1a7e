"""A scripted operator: an expert that takes over whenever a rule fires (tests, demos, benchmarks).

    operator = ScriptedOperator(ScriptedOperatorConfig(action_dim=4), expert=fn, rule=fn)
    action, active, events = operator.command(obs, num_envs)   # action [N, A], active bool [N]

`rule(obs) -> bool [N]` says where the policy is about to fail; `expert(obs) -> [N, A]` is what
the operator does there. Both are callables handed in by `embodied` code (a sim's scripted
expert, a trained policy), so `real_robot` does not import any simulator. As a person does,
the operator keeps control for at least `min_steps` once it took over (HIL-SERL's operator
steers the arm back on track, then lets go), and at most `max_per_episode` takeovers happen in
one episode (the human's attention budget); `probability` < 1 models an operator who misses
some failures.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from embodied.config import check
from real_robot.teleop.base import RELEASE, TAKEOVER, Teleop, TeleopConfig


@dataclass(frozen=True)
class ScriptedOperatorConfig(TeleopConfig):
    min_steps: int = 10  # steps the operator keeps control once it took over
    max_per_episode: int = 2  # takeovers per episode at most
    probability: float = 1.0  # chance the operator reacts when the rule fires
    seed: int = 0

    def __post_init__(self):
        super().__post_init__()
        check(self.min_steps >= 1, f"teleop.min_steps={self.min_steps} must be >= 1")
        check(self.max_per_episode >= 0, f"teleop.max_per_episode={self.max_per_episode} must be >= 0")
        check(0.0 <= self.probability <= 1.0, f"teleop.probability={self.probability} must be in [0, 1]")


class ScriptedOperator(Teleop):
    Config = ScriptedOperatorConfig

    def __init__(self, config: ScriptedOperatorConfig, expert: Callable[[Any], torch.Tensor],
                 rule: Callable[[Any], torch.Tensor]):  # fmt: skip
        super().__init__(config)
        self.expert, self.rule = expert, rule
        self.rng = np.random.default_rng(config.seed)
        self.remaining: torch.Tensor | None = None  # [N] steps of control left
        self.takeovers: torch.Tensor | None = None  # [N] takeovers this episode

    def get_action(self) -> tuple[np.ndarray | None, list[str]]:
        raise TypeError("ScriptedOperator decides from observations: call command(obs, num_envs)")

    def episode_start(self, mask: torch.Tensor | None = None) -> None:
        """Forget the per-episode counters of the envs in `mask` (all when None)."""
        if self.remaining is None:
            return
        mask = torch.ones_like(self.remaining, dtype=torch.bool) if mask is None else mask.to(self.remaining.device)
        self.remaining[mask] = 0
        self.takeovers[mask] = 0

    def command(self, obs: Any, num_envs: int = 1) -> tuple[torch.Tensor, torch.Tensor, list[str]]:
        cfg = self.config
        if self.remaining is None or self.remaining.shape[0] != num_envs:
            self.remaining = torch.zeros(num_envs, dtype=torch.long)
            self.takeovers = torch.zeros(num_envs, dtype=torch.long)
        fires = torch.as_tensor(self.rule(obs)).reshape(num_envs).bool().cpu()
        if cfg.probability < 1.0:
            fires &= torch.from_numpy(self.rng.random(num_envs) < cfg.probability)
        start = fires & (self.remaining == 0) & (self.takeovers < cfg.max_per_episode)
        self.takeovers += start.long()
        self.remaining[start] = cfg.min_steps
        active = self.remaining > 0
        self.remaining = (self.remaining - 1).clamp(min=0)
        events = [TAKEOVER] * int(start.sum()) + [RELEASE] * int((active & (self.remaining == 0)).sum())
        action = torch.zeros(num_envs, cfg.action_dim)
        if bool(active.any()):
            action = torch.as_tensor(self.expert(obs)).float().cpu().clamp(cfg.low, cfg.high)
        return action, active, events
