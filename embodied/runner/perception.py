"""Perception first: the pipeline's stage that trains a pixel policy's vision tower before BC (`pipeline.perception`).

    frames = reset_frames(env, seeds)                       # sim-labelled frames: obs with the "privileged" truth
    loss = train_perception(policy, frames, updates=600)    # the tower and aux head on privileged_loss alone
    errors = privileged_errors(policy, frames)              # metres (the rows' units) from each estimate to the truth

The tower and the aux head (`policy.privileged_aux`, a VLA with cameras on an env with a `privileged` observation)
learn to regress the privileged state (the goal the cameras show) from the env's reset frames, with no actions, as
Levine et al. 2016 ("End-to-End Training of Deep Visuomotor Policies", sec. 4.2) pretrained their spatial-softmax
vision layers on object positions before the policy. Trained jointly with the actions in BC, the pixel VLA's tower
placed the goal 4.8-5.9 cm off; trained on this alone, 2.0 cm at 48 px. BC on it, frozen
(`policy.freeze_vision=true`), roughly doubled success, and PPO after that added 15-23 points where it had added ~11
(benchmarks/RESULTS.md, "Perception first, then PPO").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from tensordict import TensorDict

from embodied import keys
from embodied.config import check


@dataclass(frozen=True)
class PerceptionConfig:
    updates: int = 0  # Adam steps of the tower and aux head on the privileged regression; 0 = skip the stage
    # reset frames to train on (whole resets of the run's envs); 4,096 = 16 resets of 256 envs: 512 to 16,384 gave
    # the same held-out error (benchmarks/vla_goal_resolution.py)
    frames: int = 4096
    lr: float = 1e-3  # as the pixel VLA's BC (configs/experiment/mujoco_reach_rgb_vla_ppo.yaml)
    batch_size: int = 256  # as its BC

    def __post_init__(self):
        check(self.updates >= 0 and self.frames >= 1 and self.lr > 0 and self.batch_size >= 1,
              "pipeline.perception: updates >= 0, frames >= 1, lr > 0, batch_size >= 1")


def reset_frames(env, seeds: list[int]) -> TensorDict:
    """The observations of `env.reset(seed)` for each seed, concatenated [len(seeds) x num_envs]."""
    return torch.cat([env.reset(seed=s)[0] for s in seeds])


def privileged_errors(policy, obs: TensorDict, rows: slice = slice(None)) -> torch.Tensor:
    """Distance between the aux head's estimate of obs["privileged"][:, rows] and the truth, per frame [B]."""
    with torch.no_grad():
        return (policy.estimate_privileged(obs)[:, rows] - obs[keys.PRIVILEGED][:, rows]).norm(dim=-1)


def train_perception(policy, obs: TensorDict, updates: int, lr: float = 1e-3, batch_size: int = 256,
                     generator: torch.Generator | None = None, advance: Callable[[], None] = lambda: None) -> float:
    """Fit the privileged normalizer on `obs`, then `updates` Adam steps of the tower and aux head on
    `policy.privileged_loss` of random batches (under freeze_vision too: the tower is frozen again after);
    returns the last loss."""
    policy.fit_privileged(obs[keys.PRIVILEGED])
    params = policy.perception_parameters()
    frozen = [p for p in params if not p.requires_grad]
    for p in frozen:
        p.requires_grad_(True)
    optimizer, loss = torch.optim.Adam(params, lr=lr), torch.tensor(float("nan"))
    try:
        for _ in range(updates):
            loss = policy.privileged_loss(obs[torch.randint(len(obs), (batch_size,), generator=generator)])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            advance()
    finally:
        for p in frozen:
            p.requires_grad_(False)
    return float(loss.detach())
