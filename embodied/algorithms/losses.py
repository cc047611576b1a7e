"""Policy-gradient, value and regularizer losses: pure functions of tensors.

Shapes: robot rollouts give `[T, N]` entries, token policies give `[B, L]` entries
with a bool `mask` (True = real token, False = padding). Padding never contributes
to a loss or its gradient: masked entries are selected away with `torch.where`, not
multiplied by 0, so any finite garbage there changes nothing. (Keep padding finite:
a NaN advantage would still turn its zero gradient into 0 * NaN in backward.)

Losses are returned as 0-dim tensors to minimize. Metrics are dicts of detached
0-dim tensors, so nothing here forces a host sync; the caller turns them into
floats once per update.
"""

from __future__ import annotations

import math
import typing
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F

from embodied.config import check


class NonFiniteLossError(FloatingPointError):
    """The loss became NaN or inf; weights were not updated with it."""


Agg = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"]
AGG_MODES: tuple[str, ...] = typing.get_args(Agg)
KLKind = Literal["k1", "k2", "k3"]

# exp() of a log-ratio beyond this overflows float32; veRL clamps at 20 too.
_MAX_LOG_RATIO = 20.0


def masked_mean(
    x: torch.Tensor, mask: torch.Tensor | None = None, dim: int | tuple[int, ...] | None = None
) -> torch.Tensor:
    """Mean of `x` over `dim` (all dims if None) counting only entries where `mask` is True.

    mask: bool, broadcastable to `x`. Where a slice has no real entry the mean is 0,
    not NaN.
    """
    if mask is None:
        return x.mean() if dim is None else x.mean(dim)
    mask = mask.expand_as(x)
    total = torch.where(mask, x, 0.0)
    count = mask.to(x.dtype)
    if dim is None:
        return total.sum() / count.sum().clamp(min=1.0)
    return total.sum(dim) / count.sum(dim).clamp(min=1.0)


def aggregate(loss: torch.Tensor, mask: torch.Tensor | None, mode: Agg) -> torch.Tensor:
    """Reduce a per-token loss `[..., L]` to a scalar; names follow veRL's `loss_agg_mode`
    (`verl/trainer/ppo/core_algos.py: agg_loss`).

    "token-mean":          sum over real tokens / number of real tokens. Every token
                           weighs the same (DAPO, Yu et al. 2025, Sec. 3.3).
    "seq-mean-token-mean": mean over sequences of each sequence's token mean
                           (the original GRPO objective, DeepSeekMath eq. 3).
    "seq-mean-token-sum":  mean over sequences of each sequence's token sum
                           (no length normalization; Dr. GRPO, Liu et al. 2025).

    The last dim is tokens, all leading dims are sequences; a 1-D `[B]` input is B
    sequences of one token. The seq-mean modes average over sequences that have at
    least one real token, so a fully padded row (e.g. a minibatch padded to a fixed
    size) changes nothing.
    """
    if loss.dim() == 1:
        loss = loss.unsqueeze(-1)
        mask = None if mask is None else mask.unsqueeze(-1)
    if mode == "token-mean":
        return masked_mean(loss, mask)
    if mode not in ("seq-mean-token-mean", "seq-mean-token-sum"):
        raise ValueError(f"unknown aggregation mode {mode!r}; valid: {', '.join(AGG_MODES)}")
    if mask is None:
        per_seq = loss.mean(-1) if mode == "seq-mean-token-mean" else loss.sum(-1)
        return per_seq.mean()
    mask = mask.expand_as(loss)
    if mode == "seq-mean-token-mean":
        per_seq = masked_mean(loss, mask, dim=-1)
    else:
        per_seq = torch.where(mask, loss, 0.0).sum(-1)
    return masked_mean(per_seq, mask.any(-1))


def _like(x: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """Append singleton dims so a per-sequence `[B]` tensor broadcasts over tokens `[B, L]`."""
    return x.reshape(x.shape + (1,) * (ref.dim() - x.dim()))


def kl_estimate(log_prob: torch.Tensor, old_log_prob: torch.Tensor, kind: KLKind = "k3") -> torch.Tensor:
    """Per-sample estimate of KL(q || p) for samples x ~ q; `[...]` in, `[...]` out.

    log_prob = log q(x) (the distribution the samples came from), old_log_prob =
    log p(x) (the other one, e.g. a reference or the pre-update policy). With
    r = p(x) / q(x), Schulman's estimators ("Approximating KL Divergence", 2020):

        k1 = -log r               unbiased, high variance, can be negative
        k2 = (log r)^2 / 2        biased, low variance, >= 0
        k3 = (r - 1) - log r      unbiased, low variance, >= 0

    GRPO's penalty (DeepSeekMath eq. 4, veRL "low_var_kl") is k3 with q = the policy
    and p = the reference: `kl_estimate(new_log_prob, ref_log_prob)`. Unlike veRL
    this does not clamp the result; the ratio is only clamped to e^+-20.
    """
    log_r = (old_log_prob - log_prob).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)
    if kind == "k1":
        return -log_r
    if kind == "k2":
        return 0.5 * log_r.square()
    if kind == "k3":
        return torch.expm1(log_r) - log_r
    raise ValueError(f"unknown KL estimator {kind!r}; valid: k1, k2, k3")


def approx_kl(
    log_prob: torch.Tensor, old_log_prob: torch.Tensor, mask: torch.Tensor | None = None, kind: KLKind = "k3"
) -> torch.Tensor:
    """Masked mean of `kl_estimate`: a scalar estimate of KL(q || p), samples x ~ q,
    log_prob = log q(x), old_log_prob = log p(x)."""
    return masked_mean(kl_estimate(log_prob, old_log_prob, kind), mask)


def truncated_importance_weight(
    log_prob_behavior: torch.Tensor, log_prob_target: torch.Tensor, cap: float
) -> torch.Tensor:
    """`min(pi_target / mu_behavior, cap)`, detached, `[...]`.

    The truncated ratio rho-bar of V-trace (Espeholt et al. 2018, IMPALA, eq. 1, where
    cap = 1) and of truncated importance sampling between a rollout engine and the
    trainer (Yao et al. 2025, "Your Efficient RL Framework Secretly Brings You
    Off-Policy RL Training", cap = 2). It multiplies a loss as a constant weight.
    """
    log_ratio = (log_prob_target - log_prob_behavior).detach().clamp(max=math.log(cap))
    return log_ratio.exp()


def clipped_surrogate(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantage: torch.Tensor,
    clip: float = 0.2,
    dual_clip: float | None = None,
    mask: torch.Tensor | None = None,
    agg: Agg = "token-mean",
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO's clipped objective as a loss (Schulman et al. 2017, eq. 7, negated).

        loss = max(-A r, -A clip(r, 1 - clip, 1 + clip)),  r = exp(log_prob - old_log_prob)

    With `dual_clip = c > 1` (Ye et al. 2020, "Mastering Complex Control in MOBA
    Games with Deep RL", AAAI 2020) the loss of A < 0 entries is further bounded by
    -c A, so one huge ratio on a bad action cannot dominate the update.

    log_prob, old_log_prob: `[...]` (e.g. `[T, N]` or `[B, L]`); advantage: same
    shape or per-sequence `[B]` (broadcast over tokens). old_log_prob and advantage
    are constants (detached here). Where a clip is active the gradient is exactly 0.
    Metrics: clip_fraction (entries whose gradient the clip removed),
    dual_clip_fraction, ratio_mean, approx_kl (k3 estimate of KL(old || new),
    samples are from old, as CleanRL logs it).
    """
    old_log_prob = old_log_prob.detach()
    advantage = _like(advantage.detach(), log_prob)
    log_ratio = (log_prob - old_log_prob).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)
    ratio = log_ratio.exp()
    unclipped = -advantage * ratio
    clipped = -advantage * ratio.clamp(1.0 - clip, 1.0 + clip)
    loss = torch.maximum(unclipped, clipped)
    metrics = {}
    with torch.no_grad():
        metrics["clip_fraction"] = masked_mean((clipped > unclipped).to(ratio.dtype), mask)
    if dual_clip is not None:
        if dual_clip <= 1.0:
            raise ValueError(f"dual_clip={dual_clip} must be > 1 (Ye et al. 2020 use 3)")
        bound = -dual_clip * advantage
        dual = (advantage < 0) & (loss > bound)
        loss = torch.where(dual, bound, loss)
        metrics["dual_clip_fraction"] = masked_mean(dual.to(ratio.dtype), mask)
    with torch.no_grad():
        metrics["ratio_mean"] = masked_mean(ratio, mask)
        metrics["approx_kl"] = approx_kl(old_log_prob, log_prob, mask)
    return aggregate(loss, mask, agg), metrics


def value_loss(
    value: torch.Tensor,
    old_value: torch.Tensor,
    ret: torch.Tensor,
    clip: float | None = None,
    mask: torch.Tensor | None = None,
    head: CriticHead | None = None,
) -> torch.Tensor:
    """Value loss: `head.loss(value, ret)` (squared error `0.5 * (value - ret)^2` by default), masked mean.

    value / old_value / ret: `[...]`; with an HL-Gauss `head` value is its logits `[..., bins]`.
    The 0.5 follows CleanRL (`v_loss = 0.5 * ...`) and OpenAI baselines' ppo2, so a
    value_coef of 0.5 means what it means there (rsl_rl drops the 0.5 and uses
    value_loss_coef = 1.0, i.e. twice this). With `clip` (squared error only), the PPO2
    pessimistic form: the larger of the unclipped error and the error of `old_value +
    clip(value - old_value, -clip, clip)`, so the critic cannot profit from moving further
    than `clip` from its rollout-time estimate.
    """
    head = SCALAR_CRITIC if head is None else head
    loss = head.loss(value, ret)
    if clip is not None:
        if head.bins:
            raise ValueError("value clipping bounds a squared error; an HL-Gauss critic's cross-entropy has no "
                             "clipped form (set algo.value_clip=null)")
        old_value = old_value.detach()
        clipped_value = old_value + (value - old_value).clamp(-clip, clip)
        loss = torch.maximum(loss, head.loss(clipped_value, ret))
    return masked_mean(loss, mask)


def _hl_gauss_edges(v_min: float, v_max: float, num_bins: int, like: torch.Tensor) -> torch.Tensor:
    # num_bins bins of equal width between num_bins + 1 edges, as in the paper's code.
    return torch.linspace(v_min, v_max, num_bins + 1, dtype=like.dtype, device=like.device)


def hl_gauss_targets(
    target: torch.Tensor, v_min: float, v_max: float, num_bins: int, sigma: float | None = None
) -> torch.Tensor:
    """HL-Gauss target distribution (Farebrother et al. 2024, "Stop Regressing", Sec. 3.1,
    reference code in Appendix A): `[...]` scalar targets -> `[..., num_bins]` probs.

    p_i = (Phi((e_{i+1} - y) / sigma) - Phi((e_i - y) / sigma)) / Z: the Gaussian
    N(y, sigma^2) integrated over each bin [e_i, e_{i+1}] via erf differences and
    renormalized to the support. Targets outside [v_min, v_max] are clamped first.
    sigma defaults to 0.75 bin widths, the sigma/bin-width ratio the paper
    recommends (mass spread over roughly six bins).
    """
    width = (v_max - v_min) / num_bins
    sigma = 0.75 * width if sigma is None else sigma
    target = target.detach().clamp(v_min, v_max)
    edges = _hl_gauss_edges(v_min, v_max, num_bins, target)
    cdf = torch.special.erf((edges - target.unsqueeze(-1)) / (math.sqrt(2.0) * sigma))
    probs = cdf[..., 1:] - cdf[..., :-1]
    return probs / (cdf[..., -1:] - cdf[..., :1])


def hl_gauss_value(logits: torch.Tensor, v_min: float, v_max: float) -> torch.Tensor:
    """Scalar value `[...]` of categorical logits `[..., K]`: the mean over bin centers."""
    edges = _hl_gauss_edges(v_min, v_max, logits.shape[-1], logits)
    centers = 0.5 * (edges[1:] + edges[:-1])
    return (logits.softmax(-1) * centers).sum(-1)


def hl_gauss_loss(
    logits: torch.Tensor,
    target: torch.Tensor,
    v_min: float,
    v_max: float,
    sigma: float | None = None,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Cross-entropy between `logits` `[..., K]` and the HL-Gauss target of `target` `[...]`.

    Masked mean over `[...]`. Minimized (at the entropy of the target) when
    softmax(logits) equals the target distribution. sigma: see `hl_gauss_targets`.
    """
    return masked_mean(_hl_gauss_cross_entropy(logits, target, v_min, v_max, sigma), mask)


def _hl_gauss_cross_entropy(
    logits: torch.Tensor, target: torch.Tensor, v_min: float, v_max: float, sigma: float | None = None
) -> torch.Tensor:
    """Per-entry cross-entropy `[...]` of logits `[..., K]` against the HL-Gauss target of `target` `[...]`."""
    probs = hl_gauss_targets(target, v_min, v_max, logits.shape[-1], sigma)
    return -(probs * F.log_softmax(logits, dim=-1)).sum(-1)


@dataclass(frozen=True)
class CriticHead:
    """How a critic's output is read as a value and trained toward a scalar target; the policy owns it
    (it sets the critic's output width), the algorithms call `value` wherever they read a Q or V and
    `loss` for the critic's loss, so MSE and HL-Gauss critics share every other line.

    bins = 0: one output, the value itself; loss `0.5 * (v - y)^2` (the 0.5 as in CleanRL and SB3).
    bins >= 2: logits over `bins` equal bins on [v_min, v_max], read as the mean of the bin centers
    (`hl_gauss_value`) and trained by the HL-Gauss cross-entropy (`hl_gauss_loss`, Farebrother et al.
    2024, "Stop Regressing"), sigma 0.75 bin widths (the paper's recommended ratio). Targets outside
    [v_min, v_max] are clamped to it, so the range must cover the returns. Built from the policy keys
    `policy.critic_bins`, `policy.critic_v_min`, `policy.critic_v_max`, which its errors name.

    Prediction shapes: `[...]` for bins = 0, `[..., bins]` otherwise (`prediction` makes one from
    a network output `[..., outputs]`).
    """

    bins: int = 0
    v_min: float | None = None
    v_max: float | None = None

    def __post_init__(self):
        if self.bins == 0:
            check(self.v_min is None and self.v_max is None,
                  f"policy.critic_v_min={self.v_min} / policy.critic_v_max={self.v_max} bound an HL-Gauss critic: "
                  "set policy.critic_bins >= 2 too, or leave them null")
            return
        check(self.bins >= 2, f"policy.critic_bins={self.bins} must be 0 (a scalar critic trained by squared "
                              "error) or >= 2 (HL-Gauss bins, e.g. 51)")
        check(self.v_min is not None and self.v_max is not None,
              f"policy.critic_bins={self.bins} needs policy.critic_v_min and policy.critic_v_max, "
              "the range of returns the critic predicts")
        check(math.isfinite(self.v_min) and math.isfinite(self.v_max) and self.v_min < self.v_max,
              f"policy.critic_v_min={self.v_min} must be < policy.critic_v_max={self.v_max} (both finite)")

    @property
    def outputs(self) -> int:
        """Width of the critic network's last layer."""
        return self.bins or 1

    def prediction(self, out: torch.Tensor) -> torch.Tensor:
        """A network output `[..., outputs]` as the prediction `value` and `loss` read."""
        return out if self.bins else out.squeeze(-1)

    def value(self, prediction: torch.Tensor) -> torch.Tensor:
        """The scalar value `[...]` of a prediction."""
        return hl_gauss_value(prediction, self.v_min, self.v_max) if self.bins else prediction

    def loss(self, prediction: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Per-entry loss `[...]` of a prediction against a (detached) scalar target `[...]`."""
        if not self.bins:
            return 0.5 * (prediction - target.detach()).square()
        return _hl_gauss_cross_entropy(prediction, target, self.v_min, self.v_max)


SCALAR_CRITIC = CriticHead()  # the default: a scalar critic trained by squared error


def entropy_loss(entropy: torch.Tensor, mask: torch.Tensor | None = None, agg: Agg = "token-mean") -> torch.Tensor:
    """Negative mean entropy, aggregated like the policy loss; minimizing it raises entropy."""
    return -aggregate(entropy, mask, agg)


def ppo_loss(
    new_log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantage: torch.Tensor,
    value: torch.Tensor | None,
    old_value: torch.Tensor | None,
    ret: torch.Tensor | None,
    entropy: torch.Tensor | None,
    mask: torch.Tensor | None = None,
    *,
    clip: float,
    dual_clip: float | None,
    value_clip: float | None,
    value_coef: float,
    entropy_coef: float,
    agg: Agg,
    critic_head: CriticHead | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """`policy_loss + value_coef * value_loss - entropy_coef * entropy`, and metrics.

    new_log_prob, old_log_prob: `[T, N]` or `[B, L]`; advantage: the same or `[B]`;
    mask: bool like new_log_prob or None. value / old_value / ret: like
    new_log_prob (per-token critic) or `[B]` (one value per sequence, then masked by
    "sequence has a real token"); pass value=None for a critic-free update. With an
    HL-Gauss `critic_head`, value is its logits (one more trailing dim) and old_value unused.
    entropy: like new_log_prob, or None (policies without a tractable entropy).
    Defaults live in the algorithm's Config, not here.
    """
    loss, metrics = clipped_surrogate(new_log_prob, old_log_prob, advantage, clip, dual_clip, mask, agg)
    metrics["policy_loss"] = loss.detach()
    if value is not None:
        value_mask = mask
        value_dims = value.dim() - (1 if critic_head is not None and critic_head.bins else 0)
        if mask is not None and value_dims < mask.dim():
            value_mask = mask.any(-1)
        v_loss = value_loss(value, old_value, ret, value_clip, value_mask, critic_head)
        loss = loss + value_coef * v_loss
        metrics["value_loss"] = v_loss.detach()
    if entropy is not None:
        e_loss = entropy_loss(entropy, mask, agg)
        if entropy_coef:
            loss = loss + entropy_coef * e_loss
        metrics["entropy"] = -e_loss.detach()
    return loss, metrics


def grpo_loss(
    new_log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantage: torch.Tensor,
    mask: torch.Tensor | None,
    *,
    clip: float,
    dual_clip: float | None = None,
    ref_log_prob: torch.Tensor | None = None,
    kl_coef: float = 0.0,
    kl_kind: KLKind = "k3",
    agg: Agg,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """GRPO's objective as a loss (Shao et al. 2024, DeepSeekMath eq. 3), and metrics.

    The clipped surrogate on group-relative advantages plus, with kl_coef > 0, the
    KL(policy || reference) penalty inside the loss (not in the reward), estimated
    with `kl_estimate(new_log_prob, ref_log_prob, kl_kind)` per token (k3 = eq. 4).
    new_log_prob, old_log_prob, ref_log_prob: `[B, L]` per token (or `[B]` per
    sequence); advantage: `[B]` (broadcast over tokens) or `[B, L]`; mask: `[B, L]`.
    """
    loss, metrics = clipped_surrogate(new_log_prob, old_log_prob, advantage, clip, dual_clip, mask, agg)
    metrics["policy_loss"] = loss.detach()
    if kl_coef > 0.0:
        if ref_log_prob is None:
            raise ValueError("grpo_loss: kl_coef > 0 needs ref_log_prob (log-probs of the reference policy)")
        kl = aggregate(kl_estimate(new_log_prob, ref_log_prob.detach(), kl_kind), mask, agg)
        loss = loss + kl_coef * kl
        metrics["kl"] = kl.detach()
    return loss, metrics
