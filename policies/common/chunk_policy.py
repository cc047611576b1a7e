"""The shared body of the generative policies: a denoising chain over an action chunk, conditioned
on the encoded observation, with a value critic for PPO.

    policy.fit_normalizers(dataset)           # dataset: TensorDict [M] with obs and action [M, H, A]
    out = policy.act(obs)                     # out.action [N, A]: the chunk's first action
    out.extras["chain"]                       # [N, S + 1, H, A] the normalized denoising chain
    log_prob, entropy, value = policy.evaluate(obs, out.action, out.extras)

Action chunks. The policy predicts a chunk of `horizon` actions [B, H, A] and the
env executes its first action; the policy re-plans at the next step (receding
horizon). The MDP action is the whole denoising chain of which the executed
action is a deterministic function, so the log-probability PPO needs is the
chain's exact log-likelihood and it does not matter that the env ignores the
chunk's tail (DPPO, Ren et al. 2024, Sec. 4, treats the denoising steps as
steps of an inner MDP the same way). Executing the chunk open-loop over H env
steps would instead need a wrapper that sums H rewards and stops at episode
ends inside the chunk, which the batched auto-resetting VecEnv cannot do
without stepping finished envs into their next episode.

`evaluate` scores the chain stored in `extras`; its `action` argument is that
chain's first action and is not needed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from tensordict import TensorDict

from embodied import keys
from embodied.config import check
from embodied.policy import ActOutput, Policy
from embodied.specs import Spec
from policies.common.nets import ObsEncoder, value_mlp
from policies.common.normalizer import Normalizer


def chunk_and_mask(batch: TensorDict, horizon: int, action_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """BC targets: batch["action"] [B, H, A] chunks (with batch["mask"] [B, H] if padded) or single
    actions [B, A] (then repeated over H with only the first row in the mask) -> (chunk, mask)."""
    action = batch[keys.ACTION]
    if action.dim() == 2:
        mask = torch.zeros(action.shape[0], horizon, device=action.device)
        mask[:, 0] = 1.0
        action = action.unsqueeze(1).expand(-1, horizon, -1)  # rows past the first are masked out of the loss
    else:
        mask = batch.get(keys.MASK, None)
        mask = torch.ones(action.shape[:2], device=action.device) if mask is None else mask.float()
    if action.shape[1:] != (horizon, action_dim):
        raise ValueError(f"bc batch action has shape {tuple(action.shape)}; this policy wants "
                         f"[B, {horizon}, {action_dim}] chunks (policy.horizon={horizon}) or [B, {action_dim}]")
    return action, mask


@dataclass(frozen=True)
class ChunkPolicyConfig:
    horizon: int = 4  # actions per predicted chunk (Diffusion Policy's prediction horizon, Chi et al. 2023, shortened)
    width: int = 128  # hidden width of the denoiser MLP: DPPO's DiffusionMLP (Ren et al. 2024) uses 256-1024 on
    # MuJoCo tasks; 128 fits our low-dimensional tasks (RESULTS.md) and keeps CPU latency low
    blocks: int = 2  # residual blocks of the denoiser
    time_dim: int = 32  # size of the sinusoidal time embedding
    critic_hidden: tuple[int, ...] = (256, 256)  # value MLP widths (DPPO's critic: 256 x 3)
    image_features: int = 64  # CNN features per camera, for envs with images/<cam> observations
    # PPO ratio per denoising step (DPPO, Ren et al. 2024, eq. 5): log_prob [N, S], each step's ratio
    # clipped on its own, instead of the chain's joint log-prob [N] whose ratio moves S times as fast
    step_ratios: bool = False

    def __post_init__(self):
        check(self.horizon >= 1, f"policy.horizon={self.horizon} must be >= 1")
        check(self.width >= 1 and self.blocks >= 0 and self.time_dim >= 2, "policy.width/blocks/time_dim must be positive")
        check(all(w > 0 for w in self.critic_hidden), "policy.critic_hidden needs positive widths")


class ChunkPolicy(Policy):
    """Subclasses implement `sample`, `chain_log_prob` and `denoising_loss` on normalized chunks."""

    def __init__(self, config: ChunkPolicyConfig, observation_spec: dict[str, Spec], action_spec: Spec):
        super().__init__()
        if len(action_spec.shape) != 1:
            raise ValueError(f"{type(self).__name__} needs a flat action spec [A], got {action_spec.shape}")
        self.config = config
        self.action_dim = action_spec.shape[0]
        self.low, self.high = action_spec.low, action_spec.high
        self.encoder = ObsEncoder(observation_spec, config.image_features)
        offset = scale = None
        if self.low is not None and self.high is not None:  # until fitted: the spec's box onto [-1, 1]
            offset = torch.full((self.action_dim,), (self.high + self.low) / 2)
            scale = torch.full((self.action_dim,), 2.0 / (self.high - self.low))
        self.action_norm = Normalizer(self.action_dim, offset, scale)
        self.critic = value_mlp(self.encoder.dim, config.critic_hidden)

    # --- what a subclass provides (all on normalized chunks [B, H, A]) ------------------
    def sample(self, cond: torch.Tensor, deterministic: bool) -> tuple[torch.Tensor, torch.Tensor, dict[str, Any]]:
        """(chunk [B, H, A], log_prob of the chain ([B], or [B, S] with step_ratios), extras) from cond [B, C]."""
        raise NotImplementedError

    def chain_log_prob(self, cond: torch.Tensor, extras: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """(log_prob, entropy) [B] (or [B, S] with step_ratios) of the chain in extras under the current weights."""
        raise NotImplementedError

    def denoising_loss(self, cond: torch.Tensor, chunk: torch.Tensor) -> torch.Tensor:
        """Per-element training loss [B, H, A] for clean chunks."""
        raise NotImplementedError

    # --- the Policy contract -----------------------------------------------------------
    def act(self, obs: TensorDict, deterministic: bool = False) -> ActOutput:
        cond = self.encoder(obs)
        chunk, log_prob, extras = self.sample(cond, deterministic)
        # deterministic acting is evaluation and deployment, which never read the value: skip the critic
        value = cond.new_zeros(cond.shape[0]) if deterministic else self.critic(cond).squeeze(-1)
        return ActOutput(self.first_action(chunk), log_prob, value, extras)

    def evaluate(self, obs: TensorDict, action: torch.Tensor, extras: dict[str, Any] | None = None):
        if extras is None or "chain" not in extras:
            raise ValueError(f"{type(self).__name__}.evaluate needs the denoising chain: pass act()'s extras "
                             "(the Collector stores them under batch['extras'])")
        cond = self.encoder(obs)
        log_prob, entropy = self.chain_log_prob(cond, extras)
        return log_prob, entropy, self.critic(cond).squeeze(-1)

    def value(self, obs: TensorDict) -> torch.Tensor:
        return self.critic(self.encoder(obs)).squeeze(-1)

    def bc_loss(self, batch: TensorDict) -> torch.Tensor:
        """Denoising loss on demonstrated chunks: batch[action] [B, H, A] (a [B, A] batch is a chunk
        whose first row alone is real); optional batch[mask] [B, H] marks the real rows.

        Per sample the loss is the squared norm over the chunk (Ho et al. 2020's L_simple
        is ||eps - eps_theta||^2), averaged over the batch.
        """
        chunk, mask = chunk_and_mask(batch, self.config.horizon, self.action_dim)
        per_element = self.denoising_loss(self.encoder(batch[keys.OBS]), self.action_norm(chunk))
        return (per_element * mask.unsqueeze(-1)).sum((1, 2)).mean()

    # --- helpers ------------------------------------------------------------------------
    def _per_chain(self, per_step: torch.Tensor) -> torch.Tensor:
        """[B, S] per denoising step -> what PPO scores: the same with step_ratios, else the chain's sum [B]."""
        return per_step if self.config.step_ratios else per_step.sum(-1)

    def first_action(self, chunk: torch.Tensor) -> torch.Tensor:
        """Normalized chunk [B, H, A] -> the env action [B, A] it executes, within the spec's bounds."""
        action = self.action_norm.inverse(chunk[:, 0])
        if self.low is not None or self.high is not None:
            action = action.clamp(self.low, self.high)
        return action

    @torch.no_grad()
    def fit_normalizers(self, dataset: TensorDict) -> None:
        """Fit the state (mean/std) and action (min/max onto [-1, 1]) normalizers on demonstrations."""
        self.encoder.state_norm.fit(dataset[keys.OBS, keys.STATE], "mean_std")
        self.action_norm.fit(dataset[keys.ACTION], "min_max")
