"""GRPO: group-relative policy optimization (Shao et al. 2024, DeepSeekMath, Sec. 4.1).

No critic: each prompt (or task instance) is rolled out G times, and a sample's
advantage is its reward relative to the others in its group. The same update trains
a language model on token sequences, a VLA on action-token sequences, and any
policy whose `evaluate` returns one log-prob per action.

    algo = GRPO(GRPO.Config(), policy)
    metrics = algo.update(batch)   # batch: TensorDict, batch_size [B]

batch entries (leading dim B = one sequence / episode each):
    obs       whatever `policy.evaluate` takes
    action    the sampled actions, e.g. tokens [B, L]
    log_prob  [B] or [B, L]  log-probs at sampling time (the "old" policy)
    reward    [B]            one scalar per sequence / episode
    group     [B] int64      which samples share a prompt (minibatches keep a group's rows together)
    mask      [B, L] bool    optional, True on real tokens (right padding is False)
    extras    optional, handed to `policy.evaluate`
    ref_log_prob  optional, like log_prob: reference log-probs for the KL term;
                  computed with the reference policy when absent
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Literal

import torch
from tensordict import TensorDict

from embodied import keys
from embodied.algorithms.advantages import group_relative_advantages, leave_one_out_advantages
from embodied.algorithms.ppo import decoupled
from embodied.algorithms.losses import AGG_MODES, NonFiniteLossError, Agg, KLKind, entropy_loss, grpo_loss, masked_mean
from embodied.config import check
from embodied.policy import Policy



@dataclass(frozen=True)
class GRPOConfig:
    lr: float = 1e-6  # DeepSeekMath Sec. 4.2 trains its 7B policy at 1e-6
    clip: float = 0.2  # ratio clip epsilon: PPO (Schulman et al. 2017), veRL clip_ratio
    dual_clip: float | None = 3.0  # veRL clip_ratio_c (Ye et al. 2020 use c = 3); None = off
    kl_coef: float = 0.0  # no KL term, as DAPO and SimpleVLA-RL (DeepSeekMath used 0.04)
    kl_kind: KLKind = "k3"  # DeepSeekMath eq. 4, veRL low_var_kl
    entropy_coef: float = 0.0  # entropy bonus against early collapse (veRL actor.entropy_coeff, default 0)
    epochs: int = 1  # veRL ppo_epochs (DeepSeekMath: a single update per rollout)
    minibatches: int = 4  # veRL train_batch_size 1024 / ppo_mini_batch_size 256
    max_grad_norm: float = 1.0  # veRL actor grad_clip, TRL max_grad_norm
    agg: Agg = "token-mean"  # veRL default loss_agg_mode (DAPO Sec. 3.3)
    scale_by_std: bool = True  # GRPO; False = Dr. GRPO (Liu et al. 2025)
    eps: float = 1e-6  # added to the group std, veRL compute_grpo_outcome_advantage
    group_size: int = 8  # samples per prompt or initial state (SimpleVLA-RL: 8 per task; veRL rollout.n)
    # group-relative (GRPO) or leave-one-out (RLOO: reward minus the mean of the group's others, Ahmadian et al.
    # 2024, "Back to Basics"); veRL's algorithm.adv_estimator grpo / rloo
    advantage: Literal["grpo", "rloo"] = "grpo"
    # data collected with older weights (cluster.max_staleness > 0): the cap of the per-token weight
    # proximal/behaviour (embodied/algorithms/ppo.py decoupled; Yao et al. 2025's truncated importance ratio, cap 2)
    behaviour_cap: float = 2.0

    def __post_init__(self):
        check(self.lr > 0, f"algo.lr={self.lr} must be > 0")
        check(0 < self.clip < 1, f"algo.clip={self.clip} must be in (0, 1)")
        check(self.dual_clip is None or self.dual_clip > 1, f"algo.dual_clip={self.dual_clip} must be > 1 or null")
        check(self.kl_coef >= 0, f"algo.kl_coef={self.kl_coef} must be >= 0")
        check(self.entropy_coef >= 0, f"algo.entropy_coef={self.entropy_coef} must be >= 0")
        check(self.kl_kind in ("k1", "k2", "k3"), f"algo.kl_kind={self.kl_kind!r} must be k1, k2 or k3")
        check(self.epochs >= 1 and self.minibatches >= 1, "algo.epochs and algo.minibatches must be >= 1")
        check(self.max_grad_norm > 0, f"algo.max_grad_norm={self.max_grad_norm} must be > 0")
        check(self.agg in AGG_MODES, f"algo.agg={self.agg!r} must be one of {', '.join(AGG_MODES)}")
        check(self.eps >= 0, f"algo.eps={self.eps} must be >= 0")
        check(self.group_size >= 2, f"algo.group_size={self.group_size} must be >= 2 (advantages compare a group)")
        check(self.advantage in ("grpo", "rloo"), f"algo.advantage={self.advantage!r} must be grpo or rloo")


class GRPO:
    Config = GRPOConfig
    needs_group_rollouts = True  # trains from groups sharing an initial state, not from Collector rollouts

    def __init__(self, config: GRPOConfig, policy: Policy, reference: Policy | None = None):
        """`reference`: the frozen policy of the KL term, used only when kl_coef > 0 and
        the batch has no ref_log_prob; by default a copy of `policy` as given here."""
        self.config = config
        self.device = next(policy.parameters()).device
        self.policy = policy
        self.reference = None
        if config.kl_coef > 0:
            reference = copy.deepcopy(policy) if reference is None else reference
            self.reference = reference.to(self.device).eval().requires_grad_(False)
        self.params = [p for p in policy.parameters() if p.requires_grad]
        self.optimizer = torch.optim.Adam(self.params, lr=config.lr)

    def update(self, batch: TensorDict) -> dict[str, float]:
        """Epochs x minibatches of clipped steps on one group rollout; returns mean metrics."""
        missing = [k for k in (keys.OBS, keys.ACTION, keys.LOG_PROB, keys.REWARD, keys.GROUP) if k not in batch.keys()]
        if missing:
            raise KeyError(f"GRPO.update: batch lacks {missing}; it has {sorted(batch.keys())}")
        cfg = self.config
        batch = batch.to(self.device)
        if cfg.advantage == "rloo":
            advantage = leave_one_out_advantages(batch[keys.REWARD], batch[keys.GROUP])
        else:
            advantage = group_relative_advantages(batch[keys.REWARD], batch[keys.GROUP], cfg.eps, cfg.scale_by_std)
        if keys.STALENESS in batch.keys():  # collected with older weights (cluster.max_staleness): decoupled
            batch = batch.clone(False)
            batch[keys.LOG_PROB], advantage = decoupled(self.policy, batch, advantage, batch[keys.STALENESS],
                                                        cfg.behaviour_cap, cfg.minibatches)
        totals: dict[str, torch.Tensor] = {}
        steps = 0
        for _ in range(cfg.epochs):
            for index in group_order(batch[keys.GROUP]).chunk(cfg.minibatches):
                for name, value in self._step(batch[index], advantage[index]).items():
                    totals[name] = totals.get(name, 0.0) + value
                steps += 1
        metrics = {name: total / steps for name, total in totals.items()}
        metrics["reward_mean"] = batch[keys.REWARD].float().mean()
        metrics["advantage_abs_mean"] = advantage.abs().mean()
        # one host sync for the whole update
        return dict(zip(metrics, torch.stack([v.float() for v in metrics.values()]).tolist()))

    def _step(self, batch: TensorDict, advantage: torch.Tensor) -> dict[str, torch.Tensor]:
        cfg = self.config
        extras = batch.get(keys.EXTRAS, None)
        mask = batch.get(keys.MASK, None)
        log_prob, entropy, _ = self.policy.evaluate(batch[keys.OBS], batch[keys.ACTION], extras)
        if mask is not None and log_prob.dim() == mask.dim() + 1:  # a step scored per action token [B, T, K]
            mask = mask.unsqueeze(-1).expand_as(log_prob)  # (the VLA's token_ratios, as PPO's _step)
        if mask is not None and mask.shape != log_prob.shape:
            raise ValueError(f"mask {tuple(mask.shape)} must match per-token log_prob {tuple(log_prob.shape)}")
        ref_log_prob = batch.get(keys.REF_LOG_PROB, None)
        if cfg.kl_coef > 0 and ref_log_prob is None:
            with torch.no_grad():
                ref_log_prob, _, _ = self.reference.evaluate(batch[keys.OBS], batch[keys.ACTION], extras)
        loss, metrics = grpo_loss(
            log_prob,
            batch[keys.LOG_PROB],
            advantage,
            mask,
            clip=cfg.clip,
            dual_clip=cfg.dual_clip,
            ref_log_prob=ref_log_prob,
            kl_coef=cfg.kl_coef,
            kl_kind=cfg.kl_kind,
            agg=cfg.agg,
        )
        if cfg.entropy_coef > 0:
            loss = loss + cfg.entropy_coef * entropy_loss(entropy, mask, cfg.agg)
        if not torch.isfinite(loss):
            raise NonFiniteLossError(f"GRPO loss became {loss.item()}")
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        metrics["grad_norm"] = torch.nn.utils.clip_grad_norm_(self.params, cfg.max_grad_norm)
        self.optimizer.step()
        metrics["loss"] = loss.detach()
        if entropy is not None:
            metrics["entropy"] = masked_mean(entropy.detach(), mask)
        return metrics

    def state_dict(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])


def group_order(group: torch.Tensor) -> torch.Tensor:
    """A random order of the rows [B] that keeps each group's rows together (the groups shuffled), so that equal
    minibatch chunks hold whole groups (but where a chunk boundary splits one): a policy can then run a group's
    shared prompt once (LMPolicy's share_prefix). veRL's minibatches are likewise consecutive slices of a batch laid
    out prompt by prompt. No host sync."""
    ids, rows = group.sort(stable=True)
    dense = torch.cat([ids.new_zeros(1), (ids[1:] != ids[:-1]).long()]).cumsum(0)  # 0, 0, 1, 1, ...: group number
    rank = torch.randperm(len(group), device=group.device)[dense]  # one distinct random rank per group
    return rows[rank.argsort(stable=True)]
