"""MLP Gaussian actor-critic, with an optional privileged-observation (asymmetric) critic and camera input.

The actor sees `obs["state"]`; with `asymmetric_critic` the critic also sees
`obs["privileged"]` (simulator-only quantities such as randomized mass, or the goal
that a pixel policy must find in its images), as in asymmetric actor-critic
(Pinto et al. 2018). With `images` the actor also reads every `images/<camera>`
through a small CNN per camera (policies/common/nets.py); the critic reads the same
features unless it is asymmetric, where the privileged state stands in for them
(cheaper, and the value needs no perception). States are normalized by running
statistics the policy carries (and saves), updated through `observe`.

The critic outputs one scalar value (trained by squared error) or, with
`critic_bins` > 0, HL-Gauss logits over [critic_v_min, critic_v_max] (Farebrother
et al. 2024, "Stop Regressing"): `act` and `value` give the scalar value (the mean
bin value, what GAE reads) and `evaluate` gives the prediction `critic_head` trains
(the value [N], or the logits [N, bins]).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import torch
from tensordict import TensorDict
from torch import nn

from embodied import keys
from embodied.algorithms.losses import CriticHead
from embodied.config import check
from embodied.policy import ActOutput, Policy
from embodied.specs import Spec
from policies.common.nets import CameraEncoder

_ACTIVATIONS = {"elu": nn.ELU, "tanh": nn.Tanh, "relu": nn.ReLU, "silu": nn.SiLU}
_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


@dataclass(frozen=True)
class MLPConfig:
    actor_hidden: tuple[int, ...] = (64, 64)  # hidden widths of the actor
    critic_hidden: tuple[int, ...] = (64, 64)  # hidden widths of the critic
    activation: Literal["elu", "tanh", "relu", "silu"] = "elu"  # ELU as in rsl_rl's defaults
    init_std: float = 0.5  # initial action std; actions live in [-1, 1]
    asymmetric_critic: bool = False  # critic also sees obs["privileged"]
    normalize_obs: bool = True  # running mean/std input normalization (rsl_rl EmpiricalNormalization)
    # stop updating those statistics once this many samples are in (rsl_rl EmpiricalNormalization's `until`);
    # 1 keeps the first batch's (e.g. the demonstrations'); null = never stop
    normalize_until: int | None = None
    images: bool = False  # the actor also reads each images/<camera> through a CNN (nets.ImageEncoder)
    image_features: int = 64  # CNN output width per camera (nets.ObsEncoder's default)
    image_channels: tuple[int, int, int] = (32, 64, 64)  # widths of the three stride-2 convolutions (nets.ImageEncoder)
    # keypoints (Levine et al. 2016) rather than average pooling: a reaching policy needs where things are
    image_pool: Literal["avg", "spatial_softmax"] = "spatial_softmax"
    # critic output: 0 = one scalar value trained by squared error (rsl_rl, CleanRL); >= 2 = HL-Gauss logits over this
    # many bins on [critic_v_min, critic_v_max] (Farebrother et al. 2024),
    # e.g. 51 (C51's atom count, Bellemare et al. 2017)
    critic_bins: int = 0
    critic_v_min: float | None = None  # lowest return the HL-Gauss critic represents (targets are clamped to the range)
    critic_v_max: float | None = None  # highest return the HL-Gauss critic represents

    def __post_init__(self):
        check(len(self.actor_hidden) > 0 and all(w > 0 for w in self.actor_hidden), "policy.actor_hidden needs positive widths")
        check(len(self.critic_hidden) > 0 and all(w > 0 for w in self.critic_hidden), "policy.critic_hidden needs positive widths")
        check(self.init_std > 0, f"policy.init_std={self.init_std} must be > 0")
        check(self.normalize_until is None or self.normalize_until >= 1, "policy.normalize_until must be >= 1 or null")
        check(self.image_features > 0, f"policy.image_features={self.image_features} must be > 0")
        check(len(self.image_channels) == 3 and all(c > 0 for c in self.image_channels),
              f"policy.image_channels={self.image_channels} needs three positive widths")
        check(self.image_pool in ("avg", "spatial_softmax"),
              f"policy.image_pool={self.image_pool!r}; valid choices: avg, spatial_softmax")
        CriticHead(self.critic_bins, self.critic_v_min, self.critic_v_max)  # validates the critic_* keys


class RunningNorm(nn.Module):
    """Running mean/variance of inputs [*, D] (Chan et al. parallel update), applied as (x - mean) / std;
    frozen once `until` samples are in (None: never)."""

    def __init__(self, dim: int, eps: float = 1e-2, until: int | None = None):
        super().__init__()
        self.eps, self.until = eps, until
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("var", torch.ones(dim))
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean) * torch.rsqrt(self.var + self.eps)

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        if self.until is not None and self.count >= self.until:
            return
        x = x.reshape(-1, x.shape[-1])
        n = x.shape[0]
        var, mean = torch.var_mean(x, dim=0, correction=0)
        total = self.count + n
        w = (n / total).to(x.dtype)
        delta = mean - self.mean
        self.mean += w * delta
        self.var.mul_(1 - w).add_(w * var + w * (1 - w) * delta.square())
        self.count.copy_(total)


def mlp(sizes: list[int], activation: str, out_gain: float) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        linear = nn.Linear(sizes[i], sizes[i + 1])
        last = i == len(sizes) - 2
        # orthogonal init, small last layer (Andrychowicz et al. 2021, "What Matters in On-Policy RL")
        nn.init.orthogonal_(linear.weight, out_gain if last else math.sqrt(2))
        nn.init.zeros_(linear.bias)
        layers.append(linear)
        if not last:
            act = _ACTIVATIONS[activation]
            layers.append(act() if act is nn.Tanh else act(inplace=True))  # in place: one allocation less per layer
    return nn.Sequential(*layers)


class MLPPolicy(Policy):
    """Diagonal Gaussian actor and value critic over `obs["state"]` (and `privileged`, `images/<camera>`)."""

    Config = MLPConfig

    def __init__(self, config: MLPConfig, observation_spec: dict[str, Spec], action_spec: Spec):
        super().__init__()
        self.config = config
        if keys.STATE not in observation_spec:
            raise ValueError(f"MLPPolicy needs a 'state' observation; the env gives {sorted(observation_spec)}")
        if config.asymmetric_critic and keys.PRIVILEGED not in observation_spec:
            raise ValueError("policy.asymmetric_critic=true needs a 'privileged' observation, which this env lacks")
        self.image_encoder = None
        if config.images:
            self.image_encoder = CameraEncoder(
                observation_spec, config.image_features, channels=tuple(config.image_channels), pool=config.image_pool
            )
            if not self.image_encoder.cameras:
                raise ValueError(f"policy.images=true needs images/<camera> observations; the env gives "
                                 f"{sorted(observation_spec)} (set env.cameras)")
        obs_dim = observation_spec[keys.STATE].shape[0]
        priv_dim = observation_spec[keys.PRIVILEGED].shape[0] if config.asymmetric_critic else 0
        image_dim = self.image_encoder.dim if self.image_encoder is not None else 0
        act_dim = action_spec.shape[0]
        self.actor = mlp([obs_dim + image_dim, *config.actor_hidden, act_dim], config.activation, out_gain=0.01)
        critic_dim = obs_dim + (priv_dim if config.asymmetric_critic else image_dim)
        self.critic_head = CriticHead(config.critic_bins, config.critic_v_min, config.critic_v_max)
        critic_sizes = [critic_dim, *config.critic_hidden, self.critic_head.outputs]
        self.critic = mlp(critic_sizes, config.activation, out_gain=1.0)
        self.log_std = nn.Parameter(torch.full((act_dim,), math.log(config.init_std)))
        until = config.normalize_until
        self.state_norm = RunningNorm(obs_dim, until=until) if config.normalize_obs else nn.Identity()
        self.priv_norm = RunningNorm(priv_dim, until=until) if config.normalize_obs and priv_dim else nn.Identity()

    def _encode(self, obs: TensorDict, images: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(normalized state [B, S], image features [B, F] or None)."""
        state = self.state_norm(obs[keys.STATE])
        return state, (self.image_encoder(obs) if images and self.image_encoder is not None else None)

    @staticmethod
    def _actor_input(state: torch.Tensor, features: torch.Tensor | None) -> torch.Tensor:
        return state if features is None else torch.cat([state, features], -1)

    def _critic_input(self, obs: TensorDict, state: torch.Tensor, features: torch.Tensor | None) -> torch.Tensor:
        if not self.config.asymmetric_critic:
            return self._actor_input(state, features)
        return torch.cat([state, self.priv_norm(obs[keys.PRIVILEGED])], dim=-1)

    def act(self, obs: TensorDict, deterministic: bool = False) -> ActOutput:
        state, features = self._encode(obs)
        mean = self.actor(self._actor_input(state, features))
        value = self.critic_head.value(self._critic_prediction(obs, state, features))
        if deterministic:
            return ActOutput(mean, torch.zeros_like(value), value, {})
        std = self.log_std.exp()
        noise = torch.randn_like(mean)
        action = torch.addcmul(mean, noise, std)
        log_prob = -(0.5 * noise.square() + self.log_std + _LOG_SQRT_2PI).sum(-1)
        return ActOutput(action, log_prob, value, {})

    def evaluate(self, obs: TensorDict, action: torch.Tensor, extras: dict[str, Any] | None = None):
        """log-prob [N], entropy [N], and the critic's prediction: the value [N], or with critic_bins > 0
        its HL-Gauss logits [N, bins] (`critic_head.value` reads them, `critic_head.loss` trains them)."""
        state, features = self._encode(obs)
        mean = self.actor(self._actor_input(state, features))
        prediction = self._critic_prediction(obs, state, features)
        z = (action - mean) * torch.exp(-self.log_std)
        log_prob = -(0.5 * z.square() + self.log_std + _LOG_SQRT_2PI).sum(-1)
        entropy = (self.log_std + 0.5 + _LOG_SQRT_2PI).sum().expand_as(log_prob)
        return log_prob, entropy, prediction

    def value(self, obs: TensorDict) -> torch.Tensor:
        state, features = self._encode(obs, images=not self.config.asymmetric_critic)  # privileged: no CNN pass
        return self.critic_head.value(self._critic_prediction(obs, state, features))

    def _critic_prediction(self, obs: TensorDict, state: torch.Tensor, features: torch.Tensor | None) -> torch.Tensor:
        return self.critic_head.prediction(self.critic(self._critic_input(obs, state, features)))

    def bc_loss(self, batch: TensorDict) -> torch.Tensor:
        """Negative log-likelihood of the demonstrated actions."""
        log_prob, _, _ = self.evaluate(batch[keys.OBS], batch[keys.ACTION])
        return -log_prob.mean()

    def observe(self, obs: TensorDict) -> None:
        if self.config.normalize_obs:
            self.state_norm.update(obs[keys.STATE])
            if self.config.asymmetric_critic:
                self.priv_norm.update(obs[keys.PRIVILEGED])
