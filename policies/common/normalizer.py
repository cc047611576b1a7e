"""An affine normalizer fitted on a dataset and carried by the policy (saved in its state_dict).

    norm = Normalizer(dim)                  # identity until fitted
    norm.fit(x, mode="min_max")             # x [M, dim]: maps the data range onto [-1, 1]
    y = norm(x); x = norm.inverse(y)

As in diffusion_policy's LinearNormalizer (Chi et al. 2023): actions are scaled
min-max onto [-1, 1] (the range the sampler clips to), observations by mean and
std. The fitted numbers are buffers, so a checkpoint reproduces the policy
without the dataset.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn

_MIN_RANGE = 1e-4  # a constant dimension keeps scale 1 instead of blowing up (diffusion_policy's range_eps)


class Normalizer(nn.Module):
    """y = (x - offset) * scale, per dimension of the last axis."""

    def __init__(self, dim: int, offset: torch.Tensor | None = None, scale: torch.Tensor | None = None):
        super().__init__()
        self.register_buffer("offset", torch.zeros(dim) if offset is None else offset.clone().float())
        self.register_buffer("scale", torch.ones(dim) if scale is None else scale.clone().float())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.offset) * self.scale

    def inverse(self, y: torch.Tensor) -> torch.Tensor:
        return y / self.scale + self.offset

    @torch.no_grad()
    def fit(self, x: torch.Tensor, mode: Literal["min_max", "mean_std"]) -> None:
        """Fit on data [..., dim]: `min_max` maps [min, max] to [-1, 1], `mean_std` whitens."""
        x = x.reshape(-1, x.shape[-1]).float()
        if x.shape[-1] != self.offset.shape[0]:
            raise ValueError(f"normalizer of dim {self.offset.shape[0]} cannot fit data of dim {x.shape[-1]}")
        if mode == "min_max":
            low, high = x.min(0).values, x.max(0).values
            half = (high - low) / 2
            self.offset.copy_((high + low) / 2)
            self.scale.copy_(torch.where(half > _MIN_RANGE, 1.0 / half.clamp(min=_MIN_RANGE), torch.ones_like(half)))
        elif mode == "mean_std":
            var, mean = torch.var_mean(x, 0, correction=0)
            std = var.sqrt()
            self.offset.copy_(mean)
            self.scale.copy_(torch.where(std > _MIN_RANGE, 1.0 / std.clamp(min=_MIN_RANGE), torch.ones_like(std)))
        else:
            raise ValueError(f"normalizer mode={mode!r}; valid choices: 'min_max', 'mean_std'")
