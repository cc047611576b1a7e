"""The policy contract every model speaks (MLP, diffusion, flow, VLA, language model).

    out = policy.act(obs, deterministic=False)
    out.action    [N, A] (or a chunk [N, H, A], or tokens [N, L])
    out.log_prob  [N]    log-probability of the action under the policy ([N, S]: S steps each
                         given its own PPO ratio, e.g. denoising steps with step_ratios)
    out.value     [N]    critic estimate (zeros for critic-free policies; a policy may skip its
                         critic under deterministic=True, which evaluation and deployment use)
    out.extras    dict   whatever `evaluate` needs to score the action again
                         (e.g. a denoising chain); stored in the rollout
    log_prob, entropy, value = policy.evaluate(obs, action, extras)
    loss = policy.bc_loss(batch)   # imitation, batch holds obs and action

A policy never knows which algorithm trains it.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
from tensordict import TensorDict
from torch import nn


class ActOutput(NamedTuple):
    action: torch.Tensor
    log_prob: torch.Tensor
    value: torch.Tensor
    extras: dict[str, Any]


class Policy(nn.Module):
    """Base class; subclasses implement act, evaluate and bc_loss."""

    def act(self, obs: TensorDict, deterministic: bool = False) -> ActOutput:
        raise NotImplementedError

    def evaluate(
        self, obs: TensorDict, action: torch.Tensor, extras: dict[str, Any] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(log_prob [N], entropy [N], value [N]) of `action` under the current weights."""
        raise NotImplementedError

    def value(self, obs: TensorDict) -> torch.Tensor:
        """Critic estimate [N] for bootstrapping."""
        raise NotImplementedError

    def bc_loss(self, batch: TensorDict) -> torch.Tensor:
        """Imitation loss on a batch with `obs` and `action`."""
        raise NotImplementedError

    def observe(self, obs: TensorDict) -> None:
        """Update input statistics (e.g. running normalizers) from rollout data; default: none."""
