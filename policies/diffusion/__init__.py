"""Diffusion policy over action chunks: DDPM training, DDIM sampling, PPO over the denoising chain,
one-step consistency distillation."""

from policies.diffusion.policy import DiffusionConfig, DiffusionPolicy

__all__ = ["DiffusionConfig", "DiffusionPolicy"]
