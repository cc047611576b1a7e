"""Advantage estimators: pure functions of tensors, shared by the robot and language paths.

Robot rollouts are time-major `[T, ...]` (usually `[T, N]`); the group estimators
work on one scalar reward per sequence or episode, `[B]`. Nothing here keeps state,
and advantages are returned detached: they are regression targets and weights,
never something to differentiate through.
"""

from __future__ import annotations

import torch


@torch.no_grad()
def gae(
    reward: torch.Tensor,
    value: torch.Tensor,
    next_value: torch.Tensor,
    terminated: torch.Tensor,
    done: torch.Tensor,
    gamma: float,
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized advantage estimation (Schulman et al. 2016, "High-Dimensional
    Continuous Control Using GAE", eq. 16), returns `(advantage, ret)`, both `[T, ...]`.

        delta_t = r_t + gamma * next_value_t * (1 - terminated_t) - value_t
        A_t     = delta_t + gamma * lam * (1 - done_t) * A_{t+1}
        ret_t   = A_t + value_t

    reward, value, next_value, terminated, done: `[T, ...]`, any trailing batch dims.
    `next_value_t` is V of the true next state; on a truncated step it is
    V(final_obs), not V of the auto-reset observation. So a time limit still
    bootstraps (`terminated` is False) while `done` (terminated | truncated) stops
    the trace from leaking into the next episode.
    """
    dtype = reward.dtype
    delta = reward + gamma * next_value * (1.0 - terminated.to(dtype)) - value
    # gamma * lam * (1 - done), built once so the loop below allocates nothing.
    carry = (1.0 - done.to(dtype)).mul_(gamma * lam)
    advantage = torch.empty_like(delta)
    advantage[-1] = delta[-1]
    for t in range(delta.shape[0] - 2, -1, -1):
        # advantage[t] = delta[t] + carry[t] * advantage[t + 1], written in place.
        torch.addcmul(delta[t], carry[t], advantage[t + 1], out=advantage[t])
    return advantage, advantage + value


@torch.no_grad()
def discounted_returns(
    reward: torch.Tensor, done: torch.Tensor, gamma: float, last_value: torch.Tensor | None = None
) -> torch.Tensor:
    """Monte Carlo returns `G_t = r_t + gamma * (1 - done_t) * G_{t+1}`, `[T, ...]`.

    `G_T` is `last_value` (`[...]`, V of the state after the last step) or 0. No
    special case for truncation: use `gae` when time limits must bootstrap.
    """
    carry = (1.0 - done.to(reward.dtype)).mul_(gamma)
    ret = torch.empty_like(reward)
    ret[-1] = reward[-1] if last_value is None else reward[-1] + carry[-1] * last_value
    for t in range(reward.shape[0] - 2, -1, -1):
        torch.addcmul(reward[t], carry[t], ret[t + 1], out=ret[t])
    return ret


@torch.no_grad()
def token_gae(
    reward: torch.Tensor, value: torch.Tensor, mask: torch.Tensor, gamma: float, lam: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE over the model's tokens of multi-turn sequences, `(advantage, ret)` `[B, L]` (0 off the mask).

    reward: `[B]` the episode's return, paid at its last model token (an outcome reward, as veRL's critic PPO);
    value: `[B, L]` the critic per token; mask: `[B, L]` True on the model's tokens. The env's and tools' tokens
    between two replies are not steps: the trace runs from one model token to the next across them (veRL's
    multi-turn GAE skips non-response positions the same way). Each row's model tokens are packed to the left
    and handed to `gae` as one episode (time-major), so the recursion is the robots' own.
    """
    order = torch.sort(mask.to(torch.int8), dim=1, descending=True, stable=True).indices  # model tokens first
    packed = mask.gather(1, order)  # [B, L]: True then False per row
    count = packed.sum(1)  # model tokens per row
    steps = int(count.max()) if count.numel() else 0
    if steps == 0:
        return torch.zeros_like(value), torch.zeros_like(value)
    order, packed = order[:, :steps], packed[:, :steps]
    v = torch.where(packed, value.gather(1, order), 0.0)
    last = torch.arange(steps, device=mask.device) == (count - 1).clamp(min=0)[:, None]  # [B, steps]
    r = torch.where(last, reward[:, None].to(v.dtype), 0.0)
    next_v = torch.cat([v[:, 1:], v.new_zeros(len(v), 1)], 1)
    end = (last | ~packed).float()  # the episode ends at its last model token; padding steps carry nothing
    advantage, _ = gae(r.T, v.T, next_v.T, end.T, end.T, gamma, lam)
    advantage = torch.where(packed, advantage.T, 0.0)
    out = torch.zeros_like(value).scatter_(1, order, advantage)
    return out, torch.where(mask, out + value, 0.0)


def _group_index(group: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Dense index `[B]` in 0..G-1 for arbitrary int ids, and the group sizes `[G]`."""
    _, index, counts = torch.unique(group, return_inverse=True, return_counts=True)
    return index, counts


def _group_sum(x: torch.Tensor, index: torch.Tensor, num_groups: int) -> torch.Tensor:
    return torch.zeros(num_groups, dtype=x.dtype, device=x.device).index_add_(0, index, x)


@torch.no_grad()
def group_relative_advantages(
    reward: torch.Tensor, group: torch.Tensor, eps: float = 1e-6, scale_by_std: bool = True
) -> torch.Tensor:
    """GRPO outcome advantages (Shao et al. 2024, DeepSeekMath, Sec. 4.1.2), `[B]`.

        A_i = (r_i - mean_g(r)) / (std_g(r) + eps)    scale_by_std=True  (GRPO)
        A_i =  r_i - mean_g(r)                        scale_by_std=False (Dr. GRPO,
                                                      Liu et al. 2025, "Understanding
                                                      R1-Zero-Like Training")

    reward: `[B]` one scalar per sequence/episode; group: `[B]` int64 ids (any
    values, any order, groups may differ in size). std is the unbiased (Bessel,
    n - 1) estimate: TRL's GRPOTrainer (`rewards.view(-1, G).std(dim=1)`) and veRL's
    `compute_grpo_outcome_advantage` (`torch.std`) both use it, so advantages and
    tuned hyperparameters carry over. eps = 1e-6 follows veRL (TRL uses 1e-4).

    A group of one has no baseline to compare against and gets advantage 0 (veRL
    instead passes its raw reward through, as if the baseline were 0); a group whose
    rewards are all equal also gets 0, so it contributes no gradient.
    """
    index, counts = _group_index(group)
    counts = counts.to(reward.dtype)
    mean = _group_sum(reward, index, len(counts)) / counts
    centered = reward - mean[index]
    if not scale_by_std:
        return centered
    var = _group_sum(centered.square(), index, len(counts)) / (counts - 1.0).clamp(min=1.0)
    std = var.sqrt()[index]
    # std == 0 (a singleton, or all rewards equal) means centered == 0: keep it 0 even if eps == 0
    return torch.where(std > 0, centered / (std + eps), torch.zeros_like(centered))


@torch.no_grad()
def leave_one_out_advantages(reward: torch.Tensor, group: torch.Tensor) -> torch.Tensor:
    """RLOO advantages (Ahmadian et al. 2024, "Back to Basics"; after Kool et al.
    2019, "Buy 4 REINFORCE Samples, Get a Baseline for Free!"), `[B]`: `A_i = r_i - mean_{j != i, j in g(i)} r_j`.

    reward: `[B]`; group: `[B]` int64 ids. The baseline excludes the sample itself,
    so it is unbiased. Groups of size 1 have no other sample and get 0.
    """
    index, counts = _group_index(group)
    n = counts.to(reward.dtype)[index]
    total = _group_sum(reward, index, len(counts))[index]
    # r_i - (S - r_i) / (n - 1) == (n r_i - S) / (n - 1)
    advantage = (n * reward - total) / (n - 1.0).clamp(min=1.0)
    return torch.where(n > 1, advantage, torch.zeros_like(advantage))


@torch.no_grad()
def normalize(x: torch.Tensor, mask: torch.Tensor | None = None, eps: float = 1e-8) -> torch.Tensor:
    """Whiten `x` (any shape) to zero mean, unit std over the entries where `mask` is True.

    Unbiased std, as CleanRL (`advantages.std()`), rsl_rl and veRL's `masked_whiten`
    use. Entries outside the mask come back as 0, so padding never leaks garbage.
    """
    if mask is None:
        mask = torch.ones_like(x, dtype=torch.bool)
    mask = mask.expand_as(x)
    n = mask.sum().to(x.dtype)
    mean = torch.where(mask, x, 0.0).sum() / n.clamp(min=1.0)
    centered = torch.where(mask, x - mean, 0.0)
    std = (centered.square().sum() / (n - 1.0).clamp(min=1.0)).sqrt()
    return centered / (std + eps)
