"""Interventions: the operator's action where it is in control, the policy's elsewhere, as plain data.

    actor = InterventionActor(env, policy, operator)
    transitions, events = actor.step()     # TensorDict [N]: one transition per env
    actor.pop_episode_stats()              # intervention rate and length of the finished episodes

Each transition row (shapes per row):
    obs/<k>, next_obs/<k>      the observation acted in and the one it led to (final_obs at an end)
    action [A]                 the action executed: the human's where `is_intervention`
    policy_action [A]          what the policy proposed (HG-DAgger and RaC compare the two)
    reward [], terminated [], truncated [], success [], is_intervention bool []

As in HIL-SERL (Luo et al. 2024, Sec. III-B) and LeRobot's gym_manipulator, intervention rows
are ordinary transitions with a flag: the learner puts every row in the online buffer and copies
the flagged ones into the demonstration buffer (`split_interventions`). HG-DAgger (Kelly et al.
2019) aggregates only the expert-labelled rows and retrains by imitation: the pipeline's BC stage on a
session's store with `pipeline.bc.rows=interventions` (embodied/runner/bc.py).
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict

from embodied import keys
from embodied.envs import VecEnv
from embodied.policy import Policy

POLICY_ACTION = "policy_action"


class InterventionActor:
    """Steps `env` with the arbitrated action and returns the transitions (one per env)."""

    def __init__(self, env: VecEnv, policy: Policy, operator: Any, deterministic: bool = False):
        self.env, self.policy, self.operator, self.deterministic = env, policy, operator, deterministic
        self.obs: TensorDict | None = None
        n = env.num_envs
        self.steps = torch.zeros(n, dtype=torch.long)  # this episode's steps, per env
        self.human_steps = torch.zeros(n, dtype=torch.long)  # ... of which the operator controlled
        self.segments = torch.zeros(n, dtype=torch.long)  # takeovers this episode
        self.was_active = torch.zeros(n, dtype=torch.bool)
        self._finished: list[torch.Tensor] = []  # rows (steps, human_steps, segments, success)

    def reset(self, seed: int | None = None) -> TensorDict:
        self.obs, _ = self.env.reset(seed=seed)
        for t in (self.steps, self.human_steps, self.segments):
            t.zero_()
        self.was_active.zero_()
        self.operator.episode_start()
        return self.obs

    @torch.no_grad()
    def step(self) -> tuple[TensorDict, list[str]]:
        if self.obs is None:
            self.reset()
        env, obs = self.env, self.obs
        proposed = self.policy.act(obs, deterministic=self.deterministic).action
        human, active, events = self.operator.command(obs, env.num_envs)
        active = active.to(env.device)
        action = torch.where(active.unsqueeze(-1), human.to(proposed), proposed)
        next_obs, reward, terminated, truncated, info = env.step(action)
        done = terminated | truncated
        true_next = next_obs.clone()
        if bool(done.any()):
            true_next[done] = info["final_obs"][done]
        success = info.get(keys.SUCCESS, torch.zeros_like(done))
        row = TensorDict({keys.OBS: obs, keys.NEXT_OBS: true_next, keys.ACTION: action, POLICY_ACTION: proposed,
                          keys.REWARD: reward, keys.TERMINATED: terminated, keys.TRUNCATED: truncated,
                          keys.SUCCESS: success.bool(), keys.IS_INTERVENTION: active}, batch_size=[env.num_envs])  # fmt: skip
        self._track(active.cpu(), done.cpu(), success.bool().cpu())
        self.obs = next_obs
        return row, events

    def _track(self, active: torch.Tensor, done: torch.Tensor, success: torch.Tensor) -> None:
        self.steps += 1
        self.human_steps += active.long()
        self.segments += (active & ~self.was_active).long()
        self.was_active = active & ~done
        if bool(done.any()):
            rows = torch.stack([self.steps, self.human_steps, self.segments, success.long()], -1)[done]
            self._finished.append(rows.float())
            for t in (self.steps, self.human_steps, self.segments):
                t[done] = 0
            self.operator.episode_start(done)

    def pop_episode_stats(self) -> dict[str, float]:
        """Per finished episode, averaged: intervention rate (operator steps / steps), takeovers,
        mean takeover length (steps), success; plus the share of episodes with any intervention."""
        if not self._finished:
            return {}
        rows = torch.cat(self._finished)
        self._finished = []
        steps, human, segments, success = rows.unbind(-1)
        return {"episodes": int(rows.shape[0]), "intervention_rate": float((human / steps).mean()),
                "interventions": float(segments.mean()),
                "intervention_length": float(human.sum() / segments.sum().clamp(min=1)),
                "intervened_episodes": float((segments > 0).float().mean()), "success": float(success.mean())}  # fmt: skip


def split_interventions(transitions: TensorDict) -> TensorDict:
    """The rows the operator controlled (what goes into the demonstration buffer)."""
    return transitions[transitions[keys.IS_INTERVENTION].bool()]
