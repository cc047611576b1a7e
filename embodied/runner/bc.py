"""Behaviour cloning: one BC step, and the pipeline's imitation stage that repeats it.

    optimizer = torch.optim.Adam(policy.parameters(), lr=3e-4)
    losses = bc_step(policy, optimizer, batch, value_coef=0.5)   # batch: TensorDict from a data source

`policy.bc_loss(batch)` is the policy's own imitation loss (Gaussian log-likelihood, DDPM noise
regression, flow matching, action-token cross-entropy); `value_coef` adds a regression of the critic
onto the demos' discounted returns-to-go (`mc_return`), so on-policy RL after BC starts with a critic
that knows the task's scale. The stage (`pipeline.bc`, embodied/runner/pipeline.py) feeds it windows of
the policy's action horizon from the run's data; HG-DAgger (Kelly et al. 2019) is the same stage on the
operator-corrected rows of a correction session only (`pipeline.bc.rows: interventions`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from tensordict import TensorDict

from embodied import keys
from embodied.algorithms.losses import SCALAR_CRITIC
from embodied.config import check


@dataclass(frozen=True)
class BCConfig:
    updates: int = 0  # gradient steps of policy.bc_loss on the demos; 0 = skip the stage
    lr: float = 3e-4  # Adam step
    batch_size: int = 256  # rows per step (Diffusion Policy trains with 256)
    lr_schedule: Literal["constant", "cosine"] = "constant"  # cosine: Diffusion Policy's decay to 0 over `updates`
    value_coef: float = 0.0  # weight of the critic's regression onto demo returns (0 = leave the critic untrained)
    rows: Literal["all", "interventions"] = "all"  # interventions: only operator-corrected rows (HG-DAgger)
    distill_updates: int = 0  # steps distilling a one-step student (policies that have one: diffusion); 0 = skip
    eval_every: int = 500  # updates between evaluations (pipeline.online.eval_episodes episodes) and at the end
    # shift every camera image of a BC batch by up to +-shift pixels, each row its own (DrQ's random shift, Kostrikov
    # et al. 2020: replicate-pad 4 of 84 px, then crop back); 0 = off. Images only: the state is left as it is
    shift: int = 0

    def __post_init__(self):
        check(self.updates >= 0 and self.lr > 0 and self.batch_size >= 1, "pipeline.bc: updates >= 0, lr > 0, batch_size >= 1")
        check(self.lr_schedule in ("constant", "cosine"), f"pipeline.bc.lr_schedule={self.lr_schedule!r}: "
              "choose constant or cosine")
        check(self.rows in ("all", "interventions"), f"pipeline.bc.rows={self.rows!r}: choose all or interventions")
        check(self.value_coef >= 0 and self.distill_updates >= 0, "pipeline.bc: value_coef and distill_updates >= 0")
        check(self.eval_every >= 1, f"pipeline.bc.eval_every={self.eval_every} must be >= 1")
        check(self.shift >= 0, f"pipeline.bc.shift={self.shift} must be >= 0 (pixels)")


def random_shift(images: torch.Tensor, pad: int, generator: torch.Generator) -> torch.Tensor:
    """uint8 images [B, H, W, C] -> the same shape, each moved by its own integer (dy, dx) in [-pad, pad], the border
    repeated into the gap (DrQ's replicate padding and crop)."""
    batch, height, width, _ = images.shape
    padded = torch.nn.functional.pad(images.permute(0, 3, 1, 2).float(), (pad,) * 4, mode="replicate")
    offset = torch.randint(0, 2 * pad + 1, (2, batch, 1), generator=generator).to(images.device)
    rows = (offset[0] + torch.arange(height, device=images.device))[:, :, None]  # [B, H, 1]
    cols = (offset[1] + torch.arange(width, device=images.device))[:, None, :]  # [B, 1, W]
    moved = padded.permute(0, 2, 3, 1)[torch.arange(batch, device=images.device)[:, None, None], rows, cols]
    return moved.to(images.dtype)


def shift_images(batch: TensorDict, pad: int, generator: torch.Generator) -> TensorDict:
    """Replace every obs["images", <camera>] of a freshly sampled batch by a random shift of it (`random_shift`), in
    place; returns the batch."""
    obs = batch[keys.OBS]
    if keys.IMAGES in obs.keys():
        for cam in list(obs[keys.IMAGES].keys()):
            obs[keys.IMAGES, cam] = random_shift(obs[keys.IMAGES, cam], pad, generator)
    return batch


def bc_step(policy, optimizer: torch.optim.Optimizer, batch: TensorDict, value_coef: float = 0.0) -> dict[str, torch.Tensor]:
    """One Adam step on policy.bc_loss (+ value_coef x the critic's loss toward the returns G, for squared error
    0.5 (V - G)^2); the losses, detached."""
    bc = policy.bc_loss(batch)
    loss, losses = bc, {"bc_loss": bc.detach()}
    if value_coef:  # by the policy's own critic loss (squared error, or HL-Gauss cross-entropy over its bins)
        head = getattr(policy, "critic_head", SCALAR_CRITIC)
        obs = batch[keys.OBS]
        prediction = policy.evaluate(obs, batch[keys.ACTION])[2] if head.bins else policy.value(obs)
        value = head.loss(prediction, batch[keys.MC_RETURN]).mean()
        loss, losses["value_loss"] = bc + value_coef * value, value.detach()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return losses


def bc_optimizer(policy, config: BCConfig):
    """Adam over every parameter (those bc_loss and the value term leave without a gradient do not move) and the
    configured learning-rate schedule."""
    optimizer = torch.optim.Adam(policy.parameters(), lr=config.lr)
    if config.lr_schedule == "cosine":
        return optimizer, torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, max(config.updates, 1))
    return optimizer, None
