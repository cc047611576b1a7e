"""SAC (Haarnoja et al. 2018) and RLPD (Ball et al. 2023), composed from the off-policy core.

    algo = SAC(config, policy)
    metrics = algo.update(batch)            # batch: TensorDict [B] of transitions
    metrics = algo.update(batch, update_actor=False)   # critic only (high update-to-data ratios)

Transitions hold `obs`, `action`, `reward`, `next_obs`, `terminated` (a time
limit is not a termination). The policy is an actor-critic with a Q ensemble
(`policies/sac_mlp.py`): it provides `sample`, `log_prob`, `q`, `q_prediction`,
`critic`, `critic_head`, `actor_params` and `critic_params`. The critic loss and
every Q read go through `critic_head` (a scalar MSE critic or HL-Gauss logits,
the policy's `critic_bins`). Target critics, optimizers and the
temperature live here, so the same policy weights can be trained by BC, IQL,
Cal-QL and SAC in turn.

RLPD is SAC with a 10-member LayerNorm critic ensemble (a policy setting), a
min over 2 random members in the target, the actor trained on the ensemble
mean, and an update-to-data ratio of 20 (`utd_ratio`, read by the training
loop), sampling offline and online data 50/50 (the loop's `offline_fraction`).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Literal

import torch
from tensordict import TensorDict

from embodied import keys
from embodied.algorithms.losses import NonFiniteLossError
from embodied.algorithms.offpolicy_losses import (
    chunked_td_target,
    critic_loss,
    ensemble_min,
    polyak_update,
    sac_actor_loss,
    soft_td_target,
    temperature_loss,
)
from embodied.config import check
from embodied.data.replay import SOURCE
from embodied.policy import Policy

ACTOR_CRITIC_API = ("sample", "log_prob", "q", "q_prediction", "critic", "critic_head", "actor_params",
                    "critic_params")


@dataclass(frozen=True)
class SACConfig:
    lr: float = 3e-4  # critic and temperature Adam step (SAC paper Table 1; RLPD the same)
    actor_lr: float | None = None  # actor Adam step; None = lr
    gamma: float = 0.99  # SAC paper Table 1
    tau: float = 0.005  # target-critic Polyak rate (SAC paper Table 1)
    batch_size: int = 256  # transitions per gradient step (SAC paper Table 1)
    utd_ratio: float = 1.0  # gradient steps per collected transition (SAC 1; RLPD 20); the actor steps once per round(utd) of them
    init_alpha: float = 1.0  # initial temperature (SB3 'auto' and RLPD start at 1.0)
    learn_alpha: bool = True  # tune alpha toward target_entropy (Haarnoja et al. 2018, "Applications", Sec. 5)
    target_entropy: float | None = None  # None = -dim(A) (SAC paper); RLPD uses -dim(A)/2
    num_min: int | None = None  # ensemble members in the target's min; None = all (RLPD: 2 of 10)
    actor_q: Literal["min", "mean"] = "min"  # how the actor loss pools the ensemble (SB3: min; RLPD: mean)
    backup_entropy: bool = True  # subtract alpha * log pi in the target (SAC: yes; CQL/Cal-QL code: no)
    max_grad_norm: float | None = None  # gradient clipping; None = off (as in SAC, RLPD)
    # behaviour cloning in the actor loss on the demonstration rows of each batch (the first source of a
    # MixedSampler: the pipeline's offline data), weighted in units of the batch's mean |Q| as in TD3+BC
    # (Fujimoto & Gu 2021: alpha 2.5 there = bc_weight 0.4 here); 0 = off
    bc_weight: float = 0.0
    bc_decay_updates: int = 0  # actor steps over which bc_weight decays linearly to 0; 0 = constant
    bc_q_filter: bool = False  # clone only where Q(s, a_demo) > Q(s, pi(s)) (Q-filter, Nair et al. 2018)

    def __post_init__(self):
        check(self.lr > 0 and (self.actor_lr is None or self.actor_lr > 0), "algo.lr and algo.actor_lr must be > 0")
        check(0 < self.gamma <= 1, f"algo.gamma={self.gamma} must be in (0, 1]")
        check(0 < self.tau <= 1, f"algo.tau={self.tau} must be in (0, 1]")
        check(self.batch_size >= 1 and self.utd_ratio > 0, "algo.batch_size must be >= 1 and algo.utd_ratio > 0")
        check(self.init_alpha > 0, f"algo.init_alpha={self.init_alpha} must be > 0")
        check(self.num_min is None or self.num_min >= 1, f"algo.num_min={self.num_min} must be >= 1 or null")
        check(self.actor_q in ("min", "mean"), f"algo.actor_q={self.actor_q!r} must be 'min' or 'mean'")
        check(self.bc_weight >= 0 and self.bc_decay_updates >= 0, "algo.bc_weight and algo.bc_decay_updates must be >= 0")


@dataclass(frozen=True)
class RLPDConfig(SACConfig):
    """RLPD's settings (Ball et al. 2023, Table 3 and ikostrikov/rlpd `SACLearner`); pair with
    policy=sac_mlp policy.num_critics=10 policy.layer_norm=true."""

    utd_ratio: float = 20.0
    num_min: int | None = 2
    actor_q: Literal["min", "mean"] = "mean"
    target_entropy: float | None = None  # None = -dim(A)/2 for RLPD (its SACLearner default)


def check_actor_critic(policy: Policy, algo: str) -> None:
    missing = [name for name in ACTOR_CRITIC_API if not hasattr(policy, name)]
    if missing:
        raise ValueError(
            f"algo={algo} trains an actor-critic policy with a Q ensemble (policy=sac_mlp); "
            f"{type(policy).__name__} lacks {', '.join(missing)}"
        )


def transition(batch: TensorDict) -> tuple[torch.Tensor, ...]:
    """(state, action, reward, next_state, terminated) of a transition batch [B]; a window of H steps
    (action [B, H, A], reward [B, H]) gives its chunk flattened [B, H * A] and its rewards [B, H]."""
    action = batch[keys.ACTION]
    return (batch[keys.OBS][keys.STATE], action.flatten(1) if action.dim() == 3 else action, batch[keys.REWARD],
            batch[keys.NEXT_OBS][keys.STATE], batch[keys.TERMINATED])


def backup(batch: TensorDict, next_value: torch.Tensor, gamma: float) -> torch.Tensor:
    """The TD target of a batch: one-step, or chunked TD over a window's H rewards (Q-chunking / CO-RFT)."""
    reward, terminated = batch[keys.REWARD], batch[keys.TERMINATED]
    if reward.dim() == 2:
        return chunked_td_target(reward, batch[keys.MASK], terminated, next_value, gamma)
    return soft_td_target(reward, terminated, next_value, gamma)


def finite(loss: torch.Tensor, name: str) -> None:
    if not torch.isfinite(loss):
        raise NonFiniteLossError(f"{name} loss became {loss.item()}")


class SAC:
    Config = SACConfig
    needs_replay = True  # trained from transitions sampled from replay, not from fresh rollouts

    def __init__(self, config: SACConfig, policy: Policy):
        check_actor_critic(policy, type(self).__name__.lower())
        self.config, self.policy = config, policy
        device = next(policy.parameters()).device
        self.target_critic = copy.deepcopy(policy.critic).requires_grad_(False)
        # fused Adam: one kernel per step instead of a dozen foreach ops, ~2x faster on CPU (benchmarks/bench_sac.py)
        self.actor_optimizer = torch.optim.Adam(policy.actor_params(), lr=config.actor_lr or config.lr, fused=True)
        self.critic_optimizer = torch.optim.Adam(policy.critic_params(), lr=config.lr, fused=True)
        self.log_alpha = torch.tensor(float(config.init_alpha), device=device).log().requires_grad_(True)
        self.alpha_optimizer = torch.optim.Adam([self.log_alpha], lr=config.lr, fused=True)
        action_dim = policy.action_dim
        default_entropy = -action_dim / 2 if isinstance(config, RLPDConfig) else -float(action_dim)
        self.target_entropy = default_entropy if config.target_entropy is None else config.target_entropy
        self._critic_params = policy.critic_params()
        self._target_params = list(self.target_critic.parameters())
        self.actor_steps = 0

    @property
    def alpha(self) -> torch.Tensor:
        return self.log_alpha.detach().exp()

    def update(self, batch: TensorDict, update_actor: bool = True) -> dict[str, torch.Tensor]:
        """One critic step (and, with update_actor, one actor and temperature step) on a batch [B]."""
        metrics = self.critic_step(batch)
        if update_actor:
            demos = batch[SOURCE] == 0 if self.bc_weight() > 0 and SOURCE in batch.keys() else None
            state, action = transition(batch)[:2]
            metrics.update(self.actor_step(state, action, demos))
        return metrics

    def bc_weight(self) -> float:
        cfg = self.config
        if cfg.bc_decay_updates == 0:
            return cfg.bc_weight
        return cfg.bc_weight * max(0.0, 1.0 - self.actor_steps / cfg.bc_decay_updates)

    def td_target(self, batch: TensorDict) -> torch.Tensor:
        cfg, policy = self.config, self.policy
        next_state = batch[keys.NEXT_OBS][keys.STATE]
        with torch.no_grad():
            next_action, next_log_prob = policy.sample(next_state)
            next_value = ensemble_min(self.target_q(next_state, next_action), cfg.num_min)
            if cfg.backup_entropy:  # soft value of the next state (SAC eq. 3)
                next_value = next_value - self.alpha * next_log_prob
            return backup(batch, next_value, cfg.gamma)

    def target_q(self, state: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        head = self.policy.critic_head
        return head.value(head.prediction(self.target_critic(torch.cat([state, action], -1))))

    def critic_step(self, batch: TensorDict) -> dict[str, torch.Tensor]:
        state, action = transition(batch)[:2]
        target = self.td_target(batch)
        head = self.policy.critic_head
        prediction = self.policy.q_prediction(state, action)
        q = head.value(prediction)
        loss = critic_loss(prediction, target, head)
        extra_loss, metrics = self.critic_regularizer(batch, q)
        if extra_loss is not None:
            loss = loss + extra_loss
        finite(loss, "critic")
        self._step(self.critic_optimizer, loss, self._critic_params)
        polyak_update(self._target_params, self._critic_params, self.config.tau)
        metrics.update({"critic_loss": loss.detach(), "q": q.detach().mean(), "target": target.mean()})
        return metrics

    def critic_regularizer(self, batch: TensorDict, q: torch.Tensor) -> tuple[torch.Tensor | None, dict]:
        """An extra critic loss term (Cal-QL's conservative penalty); none for SAC."""
        return None, {}

    def actor_step(self, state: torch.Tensor, demo_action: torch.Tensor | None = None,
                   demos: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """One actor (and temperature) step; with `demos` (bool [B]) and bc_weight > 0 the rows where
        it is true also pull the policy's mean action toward `demo_action`."""
        cfg, policy = self.config, self.policy
        action, log_prob = policy.sample(state)
        q = policy.q(state, action, detach_params=True)  # gradients reach the actor only
        q = q.amin(0) if cfg.actor_q == "min" else q.mean(0)
        alpha = self.alpha
        loss = sac_actor_loss(q, log_prob, alpha)
        metrics = {"entropy": -log_prob.detach().mean(), "alpha": alpha}
        if demos is not None and bool(demos.any()):
            bc, kept = self.bc_term(state[demos], demo_action[demos])
            weight = self.bc_weight() * q.detach().abs().mean()
            loss = loss + weight * bc
            metrics.update({"bc_mse": bc.detach(), "bc_kept": kept})
        finite(loss, "actor")
        self._step(self.actor_optimizer, loss, None)
        self.actor_steps += 1
        metrics["actor_loss"] = loss.detach()
        if cfg.learn_alpha:
            a_loss = temperature_loss(self.log_alpha, log_prob, self.target_entropy)
            self._step(self.alpha_optimizer, a_loss, None)
        return metrics

    def bc_term(self, state: torch.Tensor, demo_action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean squared error between the policy's mean action and the demonstrated one over the demo
        rows (those the Q-filter keeps, when on), and the fraction kept."""
        mean_action = self.policy.mean_action(state)
        error = (mean_action - demo_action).square().sum(-1)
        if not self.config.bc_q_filter:
            return error.mean(), torch.ones(())
        with torch.no_grad():
            q_demo = self.policy.q(state, demo_action).amin(0)
            q_policy = self.policy.q(state, mean_action).amin(0)
            keep = (q_demo > q_policy).float()
        return (error * keep).sum() / keep.sum().clamp(min=1.0), keep.mean()

    def _step(self, optimizer: torch.optim.Optimizer, loss: torch.Tensor, params: list | None) -> None:
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self.config.max_grad_norm is not None:
            group = params if params is not None else [p for g in optimizer.param_groups for p in g["params"]]
            torch.nn.utils.clip_grad_norm_(group, self.config.max_grad_norm, foreach=True)
        optimizer.step()

    def state_dict(self) -> dict:
        return {
            "target_critic": self.target_critic.state_dict(), "log_alpha": self.log_alpha.detach().clone(),
            "actor_optimizer": self.actor_optimizer.state_dict(), "critic_optimizer": self.critic_optimizer.state_dict(),
            "alpha_optimizer": self.alpha_optimizer.state_dict(), "actor_steps": self.actor_steps,
        }

    def load_state_dict(self, state: dict) -> None:
        self.target_critic.load_state_dict(state["target_critic"])
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        self.actor_steps = int(state.get("actor_steps", 0))
        for name in ("actor_optimizer", "critic_optimizer", "alpha_optimizer"):
            getattr(self, name).load_state_dict(state[name])


class RLPD(SAC):
    Config = RLPDConfig
