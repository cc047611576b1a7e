"""DDPM noise schedule and the DDIM step as an exact Gaussian, pure tensor functions.

    ab = cosine_alpha_bars(100)                      # alpha_bar_k, k = 0..K-1
    steps = ddim_timesteps(100, 10)                  # [90, 80, ..., 0]
    mean, std = ddim_step(x, pred, k, k_prev, ab, "epsilon", eta, min_std)

A DDIM step (Song et al. 2021, "Denoising Diffusion Implicit Models", eq. 12)
from step k to k_prev draws x_prev ~ N(mean, std^2) with

    x0    = (x - sqrt(1 - ab_k) eps) / sqrt(ab_k), clipped to [-1, 1]
    sigma = eta sqrt((1 - ab_prev) / (1 - ab_k)) sqrt(1 - ab_k / ab_prev)
    mean  = sqrt(ab_prev) x0 + sqrt(1 - ab_prev - sigma^2) eps

With eta > 0 every step is a Gaussian with known mean and std, so the chain's
log-likelihood is exact (DPPO, Ren et al. 2024; RL-100, Lei et al. 2025). The
last step has sigma = 0; like DPPO we floor the sampling std at `min_std` (their
min_sampling_denoising_std = 0.1) and use the same floored std in the
log-probability, so sampling and scoring describe one distribution.
"""

from __future__ import annotations

import math
from typing import Literal

import torch

Prediction = Literal["epsilon", "sample"]


def cosine_alpha_bars(num_steps: int, s: float = 0.008, max_beta: float = 0.999) -> torch.Tensor:
    """alpha_bar_k [K] of the cosine schedule (Nichol & Dhariwal 2021, eq. 17; s = 0.008 from the paper;
    diffusers' "squaredcos_cap_v2", Diffusion Policy's default), betas capped at max_beta."""
    f = lambda t: math.cos((t / num_steps + s) / (1 + s) * math.pi / 2) ** 2  # noqa: E731
    betas = torch.tensor([min(1 - f(k + 1) / f(k), max_beta) for k in range(num_steps)], dtype=torch.float64)
    return torch.cumprod(1 - betas, 0).float()


def ddim_timesteps(train_steps: int, sample_steps: int) -> torch.Tensor:
    """The `sample_steps` DDPM indices DDIM visits, descending and evenly spaced ("leading" spacing of
    diffusers' DDIMScheduler): [K - K/S, ..., K/S, 0]."""
    ratio = train_steps // sample_steps
    return (torch.arange(sample_steps) * ratio).flip(0)


def split_prediction(x: torch.Tensor, pred: torch.Tensor, ab: torch.Tensor, prediction: Prediction,
                     clip: float | None = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """(x0, eps) from the network output at noise level ab (broadcast to x); x0 clipped to +-clip."""
    sqrt_ab, sqrt_1m = ab.sqrt(), (1 - ab).sqrt()
    x0 = (x - sqrt_1m * pred) / sqrt_ab if prediction == "epsilon" else pred
    if clip is not None:
        x0 = x0.clamp(-clip, clip)
    return x0, (x - sqrt_ab * x0) / sqrt_1m


def ddim_step(x: torch.Tensor, pred: torch.Tensor, ab: torch.Tensor, ab_prev: torch.Tensor, prediction: Prediction,
              eta: float, min_std: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean, std) of x_prev given x at noise level ab; ab, ab_prev broadcast to x (ab_prev = 1 at the end)."""
    x0, eps = split_prediction(x, pred, ab, prediction)
    variance = (1 - ab_prev) / (1 - ab) * (1 - ab / ab_prev)
    sigma = eta * variance.clamp(min=0).sqrt()
    mean = ab_prev.sqrt() * x0 + (1 - ab_prev - sigma.square()).clamp(min=0).sqrt() * eps
    return mean, sigma.clamp(min=min_std).expand_as(mean)
