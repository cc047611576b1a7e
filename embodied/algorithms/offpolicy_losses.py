"""Off-policy and offline RL losses: pure functions of tensors (SAC, RLPD, IQL, CQL/Cal-QL, chunked TD).

Shapes: a batch of B transitions gives `[B]` entries; a critic ensemble of E
members gives `[E, B]`; K sampled actions per state give `[E, B, K]`; an action
chunk or n-step window of H steps gives `[B, H]` rewards. Targets and weights are
returned detached (they are regression targets, never differentiated through).
Losses are 0-dim tensors to minimize.
"""

from __future__ import annotations

import torch

from embodied.algorithms.losses import SCALAR_CRITIC, CriticHead


@torch.no_grad()
def soft_td_target(
    reward: torch.Tensor,
    terminated: torch.Tensor,
    next_q: torch.Tensor,
    gamma: float,
    next_log_prob: torch.Tensor | None = None,
    alpha: float | torch.Tensor = 0.0,
) -> torch.Tensor:
    """`y = r + gamma * (1 - terminated) * (next_q - alpha * next_log_prob)`, `[B]`.

    The soft Bellman backup of SAC (Haarnoja et al. 2018, "Soft Actor-Critic
    Algorithms and Applications", eq. 3 with the entropy term of eq. 2) with
    next_q = Q_target(s', a'), a' ~ pi(.|s'). With alpha = 0 (or no log-prob) it is
    the plain one-step TD target that IQL uses with next_q = V(s'). A time limit
    (truncation) is not a termination: it still bootstraps.
    """
    soft = next_q if next_log_prob is None else next_q - alpha * next_log_prob
    return reward + gamma * (1.0 - terminated.to(reward.dtype)) * soft


@torch.no_grad()
def chunked_td_target(
    reward: torch.Tensor, valid: torch.Tensor, terminated: torch.Tensor, next_value: torch.Tensor, gamma: float
) -> torch.Tensor:
    """TD target of an action chunk (or n-step window) of H steps, `[B]`.

        y = sum_{i<h} gamma^i r_i + gamma^h (1 - terminated) V(s_{t+h})

    reward [B, H]; valid [B, H] bool, True for the h steps the window really took
    (a prefix: an episode that ends inside the window pads the rest); terminated
    [B]: the episode terminated within the window; next_value [B]: V (or Q of the
    next chunk) at the state after the last valid step. This is the chunked
    backup of CO-RFT (Huang et al. 2025, "CO-RFT: Efficient Fine-Tuning of VLA
    Models through Chunked Offline RL") and Q-chunking (Li, Zhou and Levine 2025,
    "Reinforcement Learning with Action Chunking"): one Bellman step per chunk,
    so value propagates H times faster than one-step TD.
    """
    dtype = reward.dtype
    horizon = reward.shape[-1]
    discount = gamma ** torch.arange(horizon, dtype=dtype, device=reward.device)  # [H]
    valid_f = valid.to(dtype)
    rewards = (torch.where(valid, reward, 0.0) * discount).sum(-1)
    steps = valid_f.sum(-1)  # h, the number of steps actually taken
    return rewards + torch.pow(gamma, steps) * (1.0 - terminated.to(dtype)) * next_value


def ensemble_min(q: torch.Tensor, num_min: int | None = None, generator: torch.Generator | None = None) -> torch.Tensor:
    """Min over `num_min` randomly chosen members of a critic ensemble `q` [E, ...] -> [...].

    num_min = None or E: the min over all members, clipped double Q when E = 2
    (Fujimoto et al. 2018, TD3). num_min < E: REDQ's in-target minimization over
    a random subset, one subset per call (Chen et al. 2021, "Randomized Ensembled
    Double Q-Learning", Alg. 1 line 5), which RLPD uses with E = 10, num_min = 2
    (Ball et al. 2023, "Efficient Online RL with Offline Data", Sec. 4.2).
    """
    members = q.shape[0]
    if num_min is None or num_min == members:
        return q.amin(0)
    if not 1 <= num_min <= members:
        raise ValueError(f"num_min={num_min} must be in [1, {members}] (the ensemble size)")
    idx = torch.randperm(members, generator=generator, device=generator.device if generator else "cpu")[:num_min]
    return q.index_select(0, idx.to(q.device)).amin(0)


def critic_loss(prediction: torch.Tensor, target: torch.Tensor, head: CriticHead | None = None) -> torch.Tensor:
    """`sum over members of mean_b head.loss(prediction_e, y)` for an ensemble's prediction [E, B]
    (or HL-Gauss logits [E, B, bins]) and target [B] (detached); the default head's loss is
    `0.5 * (Q_e - y)^2`.

    Summing over members (not averaging) gives each member the same gradient as
    if it were trained alone, as SB3's and CleanRL's SAC do with two critics.
    """
    head = SCALAR_CRITIC if head is None else head
    return head.loss(prediction, target).mean(-1).sum()


def sac_actor_loss(q: torch.Tensor, log_prob: torch.Tensor, alpha: float | torch.Tensor) -> torch.Tensor:
    """`mean(alpha * log pi(a|s) - Q(s, a))`, a ~ pi reparameterized (Haarnoja et al. 2018, eq. 7)."""
    return (alpha * log_prob - q).mean()


def temperature_loss(log_alpha: torch.Tensor, log_prob: torch.Tensor, target_entropy: float) -> torch.Tensor:
    """`-mean(log_alpha * (log pi(a|s) + target_entropy))` (Haarnoja et al. 2018, eq. 18).

    Written in log_alpha, as SB3 and CleanRL do, so alpha stays positive. Its
    gradient raises alpha while the policy's entropy (-log pi) is below target.
    """
    return -(log_alpha * (log_prob.detach() + target_entropy)).mean()


def expectile_loss(diff: torch.Tensor, expectile: float) -> torch.Tensor:
    """`mean(|tau - 1(diff < 0)| * diff^2)`, diff = Q(s, a) - V(s) (Kostrikov et al. 2021, IQL eq. 5).

    tau = 0.5 is half the squared error; tau -> 1 makes V an upper expectile of
    Q over the data's actions, an in-sample max. IQL uses tau = 0.7 on MuJoCo
    locomotion and 0.9 on AntMaze.
    """
    if not 0.0 < expectile < 1.0:
        raise ValueError(f"expectile={expectile} must be in (0, 1)")
    weight = torch.where(diff < 0, 1.0 - expectile, expectile)
    return (weight * diff.square()).mean()


@torch.no_grad()
def awr_weights(advantage: torch.Tensor, beta: float, max_weight: float = 100.0) -> torch.Tensor:
    """`min(exp(beta * A), max_weight)`, the advantage-weighted regression weights of IQL's
    policy extraction (Kostrikov et al. 2021, eq. 7; the reference code clips at 100).
    IQL uses beta (its inverse temperature) = 3 on locomotion, 10 on AntMaze."""
    return torch.exp(beta * advantage).clamp(max=max_weight)


def cql_penalty(
    q_data: torch.Tensor, q_sampled: torch.Tensor, log_density: torch.Tensor, temperature: float = 1.0
) -> torch.Tensor:
    """CQL's conservative term per member, `[E]`: `T * logsumexp_k((Q(s, a_k) - log mu(a_k)) / T) - Q(s, a_data)`,
    averaged over the batch.

    q_data [E, B]: Q of the dataset actions; q_sampled [E, B, K]: Q of K actions
    drawn from proposal distributions mu (uniform, and the policy at s and s');
    log_density [B, K] (or broadcastable): log mu(a_k). Subtracting log mu is the
    importance-sampled estimate of log integral exp(Q(s, a)) da of CQL(H) (Kumar et
    al. 2020, "Conservative Q-Learning for Offline RL", Appendix F; the official
    code's `cql_cat_q` and `cql_temp`). Minimizing it pushes Q down on actions the
    proposals like and up on the data's.
    """
    soft_max = temperature * torch.logsumexp((q_sampled - log_density) / temperature, dim=-1)  # [E, B]
    return (soft_max - q_data).mean(-1)


def calibrate(q_policy: torch.Tensor, lower_bound: torch.Tensor) -> torch.Tensor:
    """Cal-QL's calibration: `max(Q(s, a ~ pi), V_mu(s))`, q_policy [E, B, K], lower_bound [B].

    Nakamoto et al. 2023 ("Cal-QL: Calibrated Offline RL Pre-Training for
    Efficient Online Fine-Tuning", Sec. 5, eq. 5.1): the CQL term only pushes down
    policy-action values that lie above the Monte Carlo return of the behaviour
    policy, so the learned Q stays on the scale of real returns and online
    fine-tuning does not start by "unlearning" an overly pessimistic critic.
    """
    return torch.maximum(q_policy, lower_bound.detach()[:, None])


@torch.no_grad()
def polyak_update(target: list[torch.Tensor], source: list[torch.Tensor], tau: float) -> None:
    """`target <- (1 - tau) * target + tau * source`, in place (Lillicrap et al. 2016; SAC's tau = 0.005)."""
    torch._foreach_lerp_(target, source, tau)
