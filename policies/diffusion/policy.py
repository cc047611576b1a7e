"""Diffusion policy (Chi et al. 2023) over action chunks, fine-tunable by PPO through its DDIM chain.

    policy = DiffusionPolicy(DiffusionPolicy.Config(), observation_spec, action_spec)
    policy.fit_normalizers(demos); loss = policy.bc_loss(batch)     # DDPM training
    out = policy.act(obs)           # DDIM, eta > 0: chain [N, S + 1, H, A] in out.extras, exact log-prob
    out = policy.act(obs, deterministic=True)    # DDIM with eta = 0 from x_K = 0: a fixed map of obs

Training is DDPM's (Ho et al. 2020): noise a normalized chunk to a random step k
of `train_steps` and regress the noise (or the clean chunk). Sampling is DDIM
over `sample_steps` of them. With `sampler: consistency` the policy acts with a
one-step student distilled from the DDIM sampler (policies/diffusion/distill.py):
one network call instead of `sample_steps`, for deployment; its action has no
tractable likelihood, so RL fine-tunes the DDIM chain and distils again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import torch

from embodied import keys
from embodied.config import check
from embodied.specs import Spec
from policies.common.chunk_policy import ChunkPolicy, ChunkPolicyConfig
from policies.common.nets import ChunkDenoiser, gaussian_entropy, gaussian_log_prob
from policies.diffusion.schedule import cosine_alpha_bars, ddim_step, ddim_timesteps


@dataclass(frozen=True)
class DiffusionConfig(ChunkPolicyConfig):
    train_steps: int = 100  # DDPM steps K (Diffusion Policy's num_train_timesteps, Chi et al. 2023)
    sample_steps: int = 10  # DDIM steps S at inference (Diffusion Policy's 10-16 DDIM steps on real robots)
    prediction: Literal["epsilon", "sample"] = "epsilon"  # what the denoiser regresses (Diffusion Policy: epsilon)
    eta: float = 1.0  # DDIM stochasticity of act(deterministic=False); DPPO fine-tunes with eta = 1
    min_std: float = 0.1  # floor of each step's std when sampling and scoring (DPPO min_sampling_denoising_std)
    sampler: Literal["ddim", "consistency"] = "ddim"  # consistency: act with the distilled one-step student

    def __post_init__(self):
        super().__post_init__()
        check(self.sample_steps >= 1 and self.train_steps % self.sample_steps == 0,
              f"policy.sample_steps={self.sample_steps} must divide policy.train_steps={self.train_steps}")
        check(self.prediction in ("epsilon", "sample"), f"policy.prediction={self.prediction!r}: 'epsilon' or 'sample'")
        check(self.sampler in ("ddim", "consistency"), f"policy.sampler={self.sampler!r}: 'ddim' or 'consistency'")
        check(0 < self.eta <= 1, f"policy.eta={self.eta} must be in (0, 1]: eta = 0 has no likelihood")
        check(self.min_std > 0, f"policy.min_std={self.min_std} must be > 0")


class DiffusionPolicy(ChunkPolicy):
    Config = DiffusionConfig

    def __init__(self, config: DiffusionConfig, observation_spec: dict[str, Spec], action_spec: Spec):
        super().__init__(config, observation_spec, action_spec)
        h, a, c = config.horizon, self.action_dim, self.encoder.dim
        self.denoiser = ChunkDenoiser(h, a, c, config.width, config.blocks, config.time_dim)
        self.student = ChunkDenoiser(h, a, c, config.width, config.blocks, config.time_dim)
        alpha_bars = cosine_alpha_bars(config.train_steps)
        steps = ddim_timesteps(config.train_steps, config.sample_steps)
        prev = torch.cat([alpha_bars[steps[1:]], torch.ones(1)])  # alpha_bar after the last step is 1 (set_alpha_to_one)
        self.register_buffer("alpha_bars", alpha_bars, persistent=False)
        self.register_buffer("steps", steps, persistent=False)
        self.register_buffer("ab", alpha_bars[steps], persistent=False)
        self.register_buffer("ab_prev", prev, persistent=False)

    # --- sampling -----------------------------------------------------------------------
    def _step(self, x: torch.Tensor, i: torch.Tensor | int, cond: torch.Tensor, eta: float):
        """(mean, std) of DDIM step i (0..S-1) from x [B, H, A]; i an int or [B] indices."""
        cfg = self.config
        k = self.steps[i]
        pred = self.denoiser(x, k.expand(x.shape[0]) if k.dim() == 0 else k, cond)
        view = (-1, 1, 1)
        ab, ab_prev = self.ab[i], self.ab_prev[i]
        if ab.dim():
            ab, ab_prev = ab.view(view), ab_prev.view(view)
        return ddim_step(x, pred, ab, ab_prev, cfg.prediction, eta, cfg.min_std)

    def sample(self, cond: torch.Tensor, deterministic: bool) -> tuple[torch.Tensor, torch.Tensor, dict[str, Any]]:
        cfg, b = self.config, cond.shape[0]
        shape = (b, cfg.horizon, self.action_dim)
        x = cond.new_zeros(shape) if deterministic else torch.randn(shape, device=cond.device)
        if cfg.sampler == "consistency":
            return self.one_step(x, cond), cond.new_zeros(b), {}
        if deterministic:
            for i in range(cfg.sample_steps):
                x, _ = self._step(x, i, cond, eta=0.0)
            return x, cond.new_zeros(b), {}
        chain, log_probs = [x], []
        for i in range(cfg.sample_steps):
            mean, std = self._step(x, i, cond, cfg.eta)
            x = mean + std * torch.randn_like(mean)
            log_probs.append(gaussian_log_prob(x, mean, std).sum((1, 2)))
            chain.append(x)
        return x, self._per_chain(torch.stack(log_probs, -1)), {"chain": torch.stack(chain, 1)}

    def one_step(self, x: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        """The distilled student: noise x_K [B, H, A] -> chunk in one call (time input: S steps remain)."""
        n = torch.full((x.shape[0],), self.config.sample_steps, device=x.device)
        return self.student(x, n, cond).clamp(-1.0, 1.0)

    # --- scoring and training -----------------------------------------------------------
    def chain_log_prob(self, cond: torch.Tensor, extras: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        chain = extras["chain"]  # [B, S + 1, H, A]
        b, s = chain.shape[0], self.config.sample_steps
        if chain.shape[1] != s + 1:
            raise ValueError(f"chain has {chain.shape[1] - 1} steps, policy.sample_steps={s}")
        x = chain[:, :-1].reshape(b * s, *chain.shape[2:])
        i = torch.arange(s, device=chain.device).repeat(b)
        mean, std = self._step(x, i, cond.repeat_interleave(s, 0), self.config.eta)
        nxt = chain[:, 1:].reshape_as(x)
        log_prob = gaussian_log_prob(nxt, mean, std).view(b, s, -1).sum(-1)
        return self._per_chain(log_prob), self._per_chain(gaussian_entropy(std).view(b, s, -1).sum(-1))

    def denoising_loss(self, cond: torch.Tensor, chunk: torch.Tensor) -> torch.Tensor:
        k = torch.randint(0, self.config.train_steps, (chunk.shape[0],), device=chunk.device)
        ab = self.alpha_bars[k].view(-1, 1, 1)
        noise = torch.randn_like(chunk)
        noisy = ab.sqrt() * chunk + (1 - ab).sqrt() * noise
        pred = self.denoiser(noisy, k, cond)
        target = noise if self.config.prediction == "epsilon" else chunk
        return (pred - target).square()

    def distill_student(self, source, env, updates: int, batch_size: int, lr: float, generator: torch.Generator,
                        seed: int) -> dict[str, float]:
        """The pipeline's `bc.distill_updates`: consistency-distil the one-step student (policies/diffusion/distill.py)
        on the data's observations plus those the DDIM sampler itself visits in `env` (one episode per env)."""
        from policies.diffusion.distill import distill, teacher_observations

        visited = teacher_observations(self, env, seed=seed)
        observations = torch.cat([source.columns().select(keys.OBS), visited])
        return {**distill(self, observations, updates, batch_size, lr, generator), "distill_rows": observations.batch_size[0]}

    @torch.no_grad()
    def teacher_trajectory(self, x: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        """Deterministic DDIM (eta = 0) from x_K [B, H, A]: every point [B, S + 1, H, A]."""
        points = [x]
        for i in range(self.config.sample_steps):
            x, _ = self._step(x, i, cond, eta=0.0)
            points.append(x)
        return torch.stack(points, 1)
