"""Tanh-squashed Gaussian actor with a Q-ensemble critic: the policy of SAC, RLPD, IQL and Cal-QL.

    policy = SACPolicy(SACPolicy.Config(), observation_spec, action_spec)
    action, log_prob = policy.sample(state)          # reparameterized, for actor losses
    q = policy.q(state, action)                      # [E, B], one row per ensemble member
    pred = policy.q_prediction(state, action)        # what the critic loss reads: q, or logits [E, B, bins]

The actor sees `obs["state"]` and outputs a = tanh(u), u ~ N(mu(s), sigma(s))
(Haarnoja et al. 2018, Appendix C), scaled into the action spec's box.
With `horizon` H > 1 the actor's action is a chunk of H actions and the critic scores
the chunk, Q(s, a_t..a_{t+H-1}): Q-chunking (Li, Zhou and Levine 2025, "Reinforcement
Learning with Action Chunking"), trained by chunked TD on windows of H steps
(`chunked_td_target`). `sample`, `log_prob`, `q` and `mean_action` work on flattened
chunks [B, H * A] (`action_dim` = H * A; `chunk()` flattens a window's [B, H, A]);
`act` returns the chunk's first action for the env (receding horizon, as the diffusion
and flow policies act) and the chunk in `extras["chunk"]` for `evaluate`. The critic is an ensemble of E Q-networks evaluated as one batched
matmul per layer; with `layer_norm` each hidden layer is Dense -> LayerNorm ->
activation, as in RLPD (Ball et al. 2023, Sec. 4.1; ikostrikov/rlpd `MLP`).
With `critic_bins` > 0 each member outputs HL-Gauss logits over [critic_v_min,
critic_v_max] (Farebrother et al. 2024) and `q` is their mean bin value; the
policy's `critic_head` (embodied/algorithms/losses.py `CriticHead`) says how to
read and train them, so the algorithms never branch on it.
The policy holds no target networks and no optimizer: those belong to the
algorithm, so the same weights move between BC, offline and online stages.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.nn.functional as F
from tensordict import TensorDict
from torch import nn

from embodied import keys
from embodied.algorithms.losses import CriticHead
from embodied.config import check
from embodied.policy import ActOutput, Policy
from embodied.specs import Spec

_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)
_LOG_2 = math.log(2.0)
_ACTIVATIONS = {"relu": F.relu, "elu": F.elu, "silu": F.silu, "tanh": torch.tanh}
# |a| of a dataset action is clipped below 1 before atanh: expert actions sit exactly on the
# bounds, where atanh is infinite (CORL's IQL/Cal-QL clip actions the same way).
_ACTION_EPS = 1e-3


@dataclass(frozen=True)
class SACPolicyConfig:
    actor_hidden: tuple[int, ...] = (256, 256)  # SAC paper Table 1: 2 hidden layers of 256
    critic_hidden: tuple[int, ...] = (256, 256)  # same for each Q-network
    num_critics: int = 2  # ensemble size E: 2 = clipped double Q (SAC); RLPD uses 10
    layer_norm: bool = False  # LayerNorm after each critic hidden layer (RLPD: true)
    activation: Literal["relu", "elu", "silu", "tanh"] = "relu"  # SAC and RLPD use ReLU
    log_std_min: float = -5.0  # CleanRL's SAC bounds on log sigma (SB3 uses -20)
    log_std_max: float = 2.0
    # critic output: 0 = one scalar Q trained by squared error (SAC); >= 2 = HL-Gauss logits over this many bins
    # on [critic_v_min, critic_v_max] (Farebrother et al. 2024),
    # e.g. 51 (C51's atom count, Bellemare et al. 2017)
    critic_bins: int = 0
    critic_v_min: float | None = None  # lowest Q the HL-Gauss critic represents (targets are clamped to the range)
    critic_v_max: float | None = None  # highest Q the HL-Gauss critic represents
    # actions per chunk the actor emits and the critic scores (Q-chunking); the env executes the first.
    # 1 = plain SAC; Li, Zhou and Levine 2025 use H = 5 on OGBench manipulation
    horizon: int = 1

    def __post_init__(self):
        check(len(self.actor_hidden) > 0 and all(w > 0 for w in self.actor_hidden), "policy.actor_hidden needs positive widths")
        check(len(self.critic_hidden) > 0 and all(w > 0 for w in self.critic_hidden), "policy.critic_hidden needs positive widths")
        check(self.num_critics >= 1, f"policy.num_critics={self.num_critics} must be >= 1")
        check(self.log_std_min < self.log_std_max, "policy.log_std_min must be < policy.log_std_max")
        check(self.horizon >= 1, f"policy.horizon={self.horizon} must be >= 1")
        critic_head(self)  # validates critic_bins / critic_v_min / critic_v_max


def critic_head(config: SACPolicyConfig) -> CriticHead:
    return CriticHead(config.critic_bins, config.critic_v_min, config.critic_v_max)


def _uniform_(tensor: torch.Tensor, fan_in: int) -> None:
    # torch.nn.Linear's default initialisation (also SB3's for SAC): U(-1/sqrt(fan_in), 1/sqrt(fan_in))
    bound = 1.0 / math.sqrt(fan_in)
    nn.init.uniform_(tensor, -bound, bound)


class EnsembleMLP(nn.Module):
    """E independent MLPs evaluated together: input [B, D] (shared) or [E, B, D] -> [E, B, out]."""

    def __init__(self, members: int, sizes: list[int], activation: str, layer_norm: bool):
        super().__init__()
        self.members, self.activation, self.layer_norm = members, _ACTIVATIONS[activation], layer_norm
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        self.ln_weights = nn.ParameterList()
        self.ln_biases = nn.ParameterList()
        for i in range(len(sizes) - 1):
            w = torch.empty(members, sizes[i], sizes[i + 1])
            b = torch.empty(members, 1, sizes[i + 1])
            _uniform_(w, sizes[i])
            _uniform_(b, sizes[i])
            self.weights.append(nn.Parameter(w))
            self.biases.append(nn.Parameter(b))
            if layer_norm and i < len(sizes) - 2:
                self.ln_weights.append(nn.Parameter(torch.ones(members, 1, sizes[i + 1])))
                self.ln_biases.append(nn.Parameter(torch.zeros(members, 1, sizes[i + 1])))

    def forward(self, x: torch.Tensor, detach_params: bool = False) -> torch.Tensor:
        """detach_params: gradients flow to the input only (an actor loss through a fixed critic)."""
        if x.dim() == 2:
            x = x.unsqueeze(0).expand(self.members, *x.shape)
        last = len(self.weights) - 1
        for i, (w, b) in enumerate(zip(self.weights, self.biases)):
            if detach_params:
                w, b = w.detach(), b.detach()
            x = torch.baddbmm(b, x, w)
            if i < last:
                if self.layer_norm:
                    g, beta = self.ln_weights[i], self.ln_biases[i]
                    if detach_params:
                        g, beta = g.detach(), beta.detach()
                    x = torch.addcmul(beta, F.layer_norm(x, x.shape[-1:]), g)
                x = self.activation(x)
        return x


class SACPolicy(Policy):
    """Tanh-Gaussian actor over `obs["state"]` and an ensemble of Q(s, a) critics."""

    Config = SACPolicyConfig

    def __init__(self, config: SACPolicyConfig, observation_spec: dict[str, Spec], action_spec: Spec):
        super().__init__()
        self.config = config
        if keys.STATE not in observation_spec:
            raise ValueError(f"SACPolicy needs a 'state' observation; the env gives {sorted(observation_spec)}")
        if len(action_spec.shape) != 1:
            raise ValueError(f"SACPolicy needs a flat action spec [A]; got shape {action_spec.shape}")
        if action_spec.low is None or action_spec.high is None:
            raise ValueError("SACPolicy squashes actions into the action spec's bounds; this env's actions are unbounded")
        obs_dim, self.env_action_dim = observation_spec[keys.STATE].shape[0], action_spec.shape[0]
        act_dim = config.horizon * self.env_action_dim  # what actor and critic act in: the flattened chunk
        self.state_dim, self.action_dim = obs_dim, act_dim
        # a = center + scale * tanh(u): the box [low, high] of the spec
        self.register_buffer("action_scale", torch.full((act_dim,), (action_spec.high - action_spec.low) / 2.0))
        self.register_buffer("action_center", torch.full((act_dim,), (action_spec.high + action_spec.low) / 2.0))
        act = _ACTIVATIONS[config.activation]
        layers: list[nn.Module] = []
        sizes = [obs_dim, *config.actor_hidden]
        for i in range(len(sizes) - 1):
            layers += [nn.Linear(sizes[i], sizes[i + 1]), nn.ReLU() if act is F.relu else _Activation(config.activation)]
        self.actor_trunk = nn.Sequential(*layers)
        self.actor_head = nn.Linear(sizes[-1], 2 * act_dim)  # mean and log sigma
        self.critic_head = critic_head(config)
        sizes = [obs_dim + act_dim, *config.critic_hidden, self.critic_head.outputs]
        self.critic = EnsembleMLP(config.num_critics, sizes, config.activation, config.layer_norm)

    # --- building blocks the algorithms call ------------------------------------------------
    def actor_params(self) -> list[nn.Parameter]:
        return [*self.actor_trunk.parameters(), *self.actor_head.parameters()]

    def critic_params(self) -> list[nn.Parameter]:
        return list(self.critic.parameters())

    def distribution(self, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and log sigma [B, A] of the pre-tanh Gaussian."""
        mean, log_std = self.actor_head(self.actor_trunk(state)).chunk(2, dim=-1)
        return mean, log_std.clamp(self.config.log_std_min, self.config.log_std_max)

    def sample(self, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """a = tanh(mu + sigma * eps) with its log-probability [B] (reparameterized)."""
        mean, log_std = self.distribution(state)
        noise = torch.randn_like(mean)
        u = torch.addcmul(mean, noise, log_std.exp())
        return self._squash(u), self._log_prob(noise, log_std, u)

    def mean_action(self, state: torch.Tensor) -> torch.Tensor:
        """tanh(mu(s)) in the action box: the deterministic action [B, A]."""
        return self._squash(self.distribution(state)[0])

    def chunk(self, action: torch.Tensor) -> torch.Tensor:
        """A window's actions [B, H, A] (or already flat [B, H * A]) -> the flat chunk [B, H * A] actor and critic
        read; a window shorter or longer than `horizon` is an error naming both."""
        if action.dim() == 3:
            action = action.flatten(1)
        if action.shape[-1] != self.action_dim:
            raise ValueError(f"action of shape {tuple(action.shape)}: this policy acts in chunks of policy.horizon="
                             f"{self.config.horizon} actions of {self.env_action_dim} ([B, {self.config.horizon}, "
                             f"{self.env_action_dim}] windows); sample the data with horizon={self.config.horizon}")
        return action

    def log_prob(self, state: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """log pi(a|s) [B] of given actions or chunks (clipped just inside the bounds first)."""
        mean, log_std = self.distribution(state)
        y = (self.chunk(action) - self.action_center) / self.action_scale
        u = torch.atanh(y.clamp(-1.0 + _ACTION_EPS, 1.0 - _ACTION_EPS))
        return self._log_prob((u - mean) * torch.exp(-log_std), log_std, u)

    def _squash(self, u: torch.Tensor) -> torch.Tensor:
        return torch.addcmul(self.action_center, torch.tanh(u), self.action_scale)

    def _log_prob(self, z: torch.Tensor, log_std: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        return _squashed_log_prob(z, log_std, u) - self.action_scale.log().sum()

    def q_prediction(self, state: torch.Tensor, action: torch.Tensor, detach_params: bool = False) -> torch.Tensor:
        """The critic's prediction for every member: Q [E, B], or HL-Gauss logits [E, B, bins]
        (`critic_head.value` reads it, `critic_head.loss` trains it). state [B, D] or [E, B, D], action [B, A]
        or [E, B, A] (A = H * env actions; a window [B, H, A_env] is flattened)."""
        if action.dim() == 3 and action.shape[-1] == self.env_action_dim != self.action_dim:
            action = self.chunk(action)
        if state.dim() == action.dim():
            x = torch.cat([state, action], dim=-1)
        else:
            x = torch.cat([state.unsqueeze(0).expand(action.shape[0], *state.shape), action], dim=-1)
        return self.critic_head.prediction(self.critic(x, detach_params))

    def q(self, state: torch.Tensor, action: torch.Tensor, detach_params: bool = False) -> torch.Tensor:
        """Q of every ensemble member, [E, B] (state [B, D] or [E, B, D], action likewise)."""
        return self.critic_head.value(self.q_prediction(state, action, detach_params))

    # --- the Policy contract ----------------------------------------------------------------
    def act(self, obs: TensorDict, deterministic: bool = False) -> ActOutput:
        state = obs[keys.STATE]
        value = self.value(obs)
        if deterministic:
            action, log_prob = self.mean_action(state), torch.zeros_like(value)
        else:
            action, log_prob = self.sample(state)
        if self.config.horizon == 1:
            return ActOutput(action, log_prob, value, {})
        return ActOutput(action[:, : self.env_action_dim], log_prob, value, {"chunk": action})

    def evaluate(self, obs: TensorDict, action: torch.Tensor, extras: dict[str, Any] | None = None):
        """log-prob, a one-sample entropy estimate (-log pi of `action`), and value; with horizon > 1 the
        chunk `act` sampled (`extras["chunk"]`) is scored, `action` being its first row."""
        if self.config.horizon > 1:
            if extras is None or "chunk" not in extras:
                raise ValueError("SACPolicy.evaluate with policy.horizon > 1 scores the chunk act() sampled: pass "
                                 "act()'s extras (the Collector stores them under batch['extras'])")
            action = extras["chunk"]
        log_prob = self.log_prob(obs[keys.STATE], action)
        return log_prob, -log_prob, self.value(obs)

    def value(self, obs: TensorDict) -> torch.Tensor:
        """min over the ensemble of Q(s, tanh(mu(s))): the critic's estimate of the greedy action's value."""
        state = obs[keys.STATE]
        return self.q(state, self.mean_action(state)).amin(0)

    def bc_loss(self, batch: TensorDict) -> torch.Tensor:
        """Negative log-likelihood of the demonstrated actions (chunks [B, H, A] with horizon > 1; padding past an
        episode's end repeats its last action, as the window sampler pads)."""
        return -self.log_prob(batch[keys.OBS][keys.STATE], batch[keys.ACTION]).mean()


class _Activation(nn.Module):
    def __init__(self, name: str):
        super().__init__()
        self.fn = _ACTIVATIONS[name]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x)


def _squashed_log_prob(z: torch.Tensor, log_std: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """log N(u; mu, sigma) - log |d tanh(u)/du|, summed over action dims; z = (u - mu) / sigma.

    log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u)), the overflow-free form
    (SAC paper eq. 21; TF-Agents / CleanRL use the same identity).
    """
    gaussian = -(0.5 * z.square() + log_std + _LOG_SQRT_2PI)
    jacobian = 2.0 * (_LOG_2 - u - F.softplus(-2.0 * u))
    return (gaussian - jacobian).sum(-1)
