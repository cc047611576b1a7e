"""Flow-matching policy over action chunks with the two exact-likelihood samplers of pi_RL
(Chen et al. 2025, "pi_RL: Online RL Fine-tuning for Flow-based VLA Models", arXiv 2510.25889).

    policy = FlowPolicy(FlowPolicy.Config(noise_method="flow_noise"), observation_spec, action_spec)
    loss = policy.bc_loss(batch)            # conditional flow matching
    out = policy.act(obs)                   # stochastic chain in out.extras, exact log-prob
    out = policy.act(obs, deterministic=True)   # Euler ODE from x_1 = 0

Conventions (pi0's): x_t = t * noise + (1 - t) * action, velocity v = noise - action,
integrated from t = 1 to t = 0 over S Euler steps at t_i = 1 - i / S. At step i
(t = t_i, delta = t_i - t_{i+1}), with a_hat = x - t v and e_hat = x + (1 - t) v:

- ODE:        x' = x - delta v  (= (1 - t') a_hat + t' e_hat, t' = t - delta)
- Flow-Noise: x' ~ N(x - delta v, sigma_theta^2); sigma_theta from a learned noise head,
              bounded to [noise_min, noise_max]; every step stochastic, so the chain's
              joint log-probability is the sum over its S Gaussian steps.
- Flow-SDE:   the ODE turned into an SDE with the same marginals (Flow-GRPO, Liu et al. 2025,
              eq. 9): sigma_t = a sqrt(t / (1 - t)),
              x' ~ N((1 - t') a_hat + (t' - sigma_t^2 delta / (2 t)) e_hat, delta sigma_t^2).
              One step per rollout, drawn uniformly, is stochastic; the rest follow the ODE.
              The stored chain and the step index make that step's log-probability exact,
              with the chain point before it treated as state (pi_RL's two-layer MDP).

The velocity network's training objective is conditional flow matching (Lipman et al. 2023):
|| v_theta(x_t, t) - (noise - action) ||^2 with t ~ U(0, 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import nn

from embodied.config import check
from embodied.specs import Spec
from policies.common.chunk_policy import ChunkPolicy, ChunkPolicyConfig
from policies.common.nets import ChunkDenoiser, gaussian_entropy, gaussian_log_prob


@dataclass(frozen=True)
class FlowConfig(ChunkPolicyConfig):
    sample_steps: int = 10  # Euler steps S (pi0 integrates its flow in 10 steps, Black et al. 2024)
    noise_method: Literal["flow_noise", "flow_sde"] = "flow_noise"  # pi_RL's two likelihood methods
    noise_min: float = 0.08  # Flow-Noise std bounds, normalized action units (ReinFlow's
    noise_max: float = 0.16  # min/max_logprob_denoising_std, Zhang et al. 2025)
    noise_level: float = 0.5  # Flow-SDE's a in sigma_t = a sqrt(t / (1 - t)) (RLinf's pi_RL noise_level)

    def __post_init__(self):
        super().__post_init__()
        check(self.sample_steps >= 1, f"policy.sample_steps={self.sample_steps} must be >= 1")
        check(self.noise_method in ("flow_noise", "flow_sde"),
              f"policy.noise_method={self.noise_method!r}; valid choices: 'flow_noise', 'flow_sde'")
        check(0 < self.noise_min <= self.noise_max, "policy.noise_min must be in (0, policy.noise_max]")
        check(self.noise_level > 0, f"policy.noise_level={self.noise_level} must be > 0")
        check(not (self.step_ratios and self.noise_method == "flow_sde"),
              "policy.step_ratios applies to noise_method 'flow_noise': flow_sde has one stochastic step")


class FlowPolicy(ChunkPolicy):
    Config = FlowConfig

    def __init__(self, config: FlowConfig, observation_spec: dict[str, Spec], action_spec: Spec):
        super().__init__(config, observation_spec, action_spec)
        h, a = config.horizon, self.action_dim
        self.velocity = ChunkDenoiser(h, a, self.encoder.dim, config.width, config.blocks, config.time_dim)
        self.noise_head = nn.Linear(config.width, h * a)  # Flow-Noise: reads the velocity net's last features
        nn.init.zeros_(self.noise_head.weight)
        nn.init.zeros_(self.noise_head.bias)  # starts at the middle of [noise_min, noise_max]
        s = config.sample_steps
        times = torch.cat([torch.linspace(1.0, 1.0 / s, s), torch.zeros(1)])
        self.register_buffer("times", times, persistent=False)
        # Flow-SDE sigma_i = a sqrt(t / (1 - t)); at t = 1 the denominator uses t_1 (as RLinf does)
        denom = 1 - torch.where(times == 1.0, times[1], times)
        self.register_buffer("sde_sigma", config.noise_level * (times / denom).sqrt()[:-1], persistent=False)

    # --- one step ---------------------------------------------------------------------
    def _step(self, x: torch.Tensor, i: torch.Tensor, cond: torch.Tensor, method: str):
        """(mean, std) of step i [B] from x [B, H, A]; method: "ode", "flow_noise" or "flow_sde"."""
        features = self.velocity.features(x, self.times[i], cond)
        return self._moments(x, self.velocity.out(features).view_as(x), features, i, method)

    def _moments(self, x, v, features, i, method):
        t = self.times[i].view(-1, 1, 1)
        delta = t - self.times[i + 1].view(-1, 1, 1)
        if method == "ode":
            return x - delta * v, torch.zeros_like(x)
        if method == "flow_noise":
            cfg = self.config
            gate = torch.sigmoid(self.noise_head(features)).view_as(x)
            return x - delta * v, cfg.noise_min + (cfg.noise_max - cfg.noise_min) * gate
        sigma = self.sde_sigma[i].view(-1, 1, 1)
        a_hat, e_hat = x - t * v, x + (1 - t) * v
        t_next = t - delta
        mean = (1 - t_next) * a_hat + (t_next - sigma.square() * delta / (2 * t)) * e_hat
        return mean, (delta.sqrt() * sigma).expand_as(x)

    # --- sampling and scoring -----------------------------------------------------------
    def sample(self, cond: torch.Tensor, deterministic: bool) -> tuple[torch.Tensor, torch.Tensor, dict[str, Any]]:
        cfg, b = self.config, cond.shape[0]
        shape = (b, cfg.horizon, self.action_dim)
        x = cond.new_zeros(shape) if deterministic else torch.randn(shape, device=cond.device)
        if deterministic:
            for i in range(cfg.sample_steps):
                x, _ = self._step(x, torch.full((b,), i, device=cond.device), cond, "ode")
            return x, cond.new_zeros(b), {}
        log_probs = []
        sde = cfg.noise_method == "flow_sde"
        index = torch.randint(0, cfg.sample_steps, (b,), device=cond.device)  # Flow-SDE: the stochastic step
        chain = [x]
        for i in range(cfg.sample_steps):
            step = torch.full((b,), i, device=cond.device)
            features = self.velocity.features(x, self.times[step], cond)
            v = self.velocity.out(features).view_as(x)
            mean, std = self._moments(x, v, features, step, cfg.noise_method)
            if sde:  # one SDE step per sample; the other rows of the batch take the ODE step
                ode_mean = self._moments(x, v, features, step, "ode")[0]
                live = (index == i).view(-1, 1, 1)
                mean, std = torch.where(live, mean, ode_mean), torch.where(live, std, 0.0)
            x = mean + std * torch.randn_like(mean)
            if sde:
                log_probs.append(torch.where(live.view(-1), gaussian_log_prob(x, mean, std.clamp(min=1e-12)).sum((1, 2)), 0.0))
            else:
                log_probs.append(gaussian_log_prob(x, mean, std).sum((1, 2)))
            chain.append(x)
        extras = {"chain": torch.stack(chain, 1)}
        if sde:
            extras["index"] = index
        return x, self._per_chain(torch.stack(log_probs, -1)), extras

    def chain_log_prob(self, cond: torch.Tensor, extras: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        chain, cfg = extras["chain"], self.config
        b, s = chain.shape[0], cfg.sample_steps
        if chain.shape[1] != s + 1:
            raise ValueError(f"chain has {chain.shape[1] - 1} steps, policy.sample_steps={s}")
        if cfg.noise_method == "flow_sde":
            if "index" not in extras:
                raise ValueError("flow_sde needs extras['index'], the stochastic step of each chain")
            i = extras["index"].long()
            rows = torch.arange(b, device=chain.device)
            mean, std = self._step(chain[rows, i], i, cond, "flow_sde")
            log_prob = gaussian_log_prob(chain[rows, i + 1], mean, std).sum((1, 2))
            return log_prob, gaussian_entropy(std).sum((1, 2))
        x = chain[:, :-1].reshape(b * s, *chain.shape[2:])
        i = torch.arange(s, device=chain.device).repeat(b)
        mean, std = self._step(x, i, cond.repeat_interleave(s, 0), "flow_noise")
        log_prob = gaussian_log_prob(chain[:, 1:].reshape_as(x), mean, std).view(b, s, -1).sum(-1)
        return self._per_chain(log_prob), self._per_chain(gaussian_entropy(std).view(b, s, -1).sum(-1))

    def denoising_loss(self, cond: torch.Tensor, chunk: torch.Tensor) -> torch.Tensor:
        # low-discrepancy times: one per stratum of [0, 1) from a shared random offset, a lower-variance
        # estimate of the same expected loss (Kingma et al. 2021, "Variational Diffusion Models", Sec. 5.1)
        b = chunk.shape[0]
        t = (torch.rand((), device=chunk.device) + torch.arange(b, device=chunk.device)) / b
        t = t[torch.randperm(b, device=chunk.device)]
        noise = torch.randn_like(chunk)
        tt = t.view(-1, 1, 1)
        x_t = tt * noise + (1 - tt) * chunk
        return (self.velocity(x_t, t, cond) - (noise - chunk)).square()
