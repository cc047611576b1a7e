"""Losses against values worked out by hand (arithmetic in the comments)."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from embodied.algorithms.losses import (
    aggregate,
    approx_kl,
    clipped_surrogate,
    entropy_loss,
    grpo_loss,
    hl_gauss_loss,
    hl_gauss_targets,
    hl_gauss_value,
    kl_estimate,
    masked_mean,
    ppo_loss,
    truncated_importance_weight,
    value_loss,
)

# ---------------------------------------------------------------- clipped surrogate
# Six entries, clip = 0.2 (range [0.8, 1.2]); old_log_prob = 0 so ratio = exp(log_prob).
#   A   ratio  -A*r   -A*clip(r)  loss = max   clipped?  d loss / d log_prob = -A*r unless clipped
#  +1   1.1   -1.1      -1.1       -1.1         no        -1.1
#  +1   1.5   -1.5      -1.2       -1.2         yes        0
#  +1   0.5   -0.5      -0.8       -0.5         no        -0.5
#  -1   0.5    0.5       0.8        0.8         yes        0
#  -1   1.5    1.5       1.2        1.5         no         1.5
#  -1   0.9    0.9       0.9        0.9         no         0.9
ADV = torch.tensor([1.0, 1.0, 1.0, -1.0, -1.0, -1.0])
RATIO = torch.tensor([1.1, 1.5, 0.5, 0.5, 1.5, 0.9])


def surrogate(ratio=RATIO, advantage=ADV, **kwargs):
    log_prob = ratio.log().requires_grad_(True)
    loss, metrics = clipped_surrogate(log_prob, torch.zeros_like(log_prob), advantage, **kwargs)
    loss.backward()
    return loss, metrics, log_prob.grad


def test_clipped_surrogate_inside_and_outside_the_clip_range():
    loss, metrics, grad = surrogate(clip=0.2)
    # mean of losses: (-1.1 - 1.2 - 0.5 + 0.8 + 1.5 + 0.9) / 6 = 0.4 / 6
    assert_close(loss, torch.tensor(0.4 / 6))
    # gradient of the mean: per-entry gradient / 6, exactly 0 where clipped
    assert_close(grad, torch.tensor([-1.1, 0.0, -0.5, 0.0, 1.5, 0.9]) / 6)
    assert grad[1] == 0 and grad[3] == 0
    assert_close(metrics["clip_fraction"], torch.tensor(2 / 6))
    # (1.1 + 1.5 + 0.5 + 0.5 + 1.5 + 0.9) / 6 = 1
    assert_close(metrics["ratio_mean"], torch.tensor(1.0))
    # k3 of KL(old || new) = mean((r - 1) - log r):
    #   1.1: 0.1 - 0.0953102 = 0.0046898    1.5: 0.5 - 0.4054651 = 0.0945349
    #   0.5: -0.5 + 0.6931472 = 0.1931472   0.9: -0.1 + 0.1053605 = 0.0053605
    #   sum = 0.0046898 + 2*0.0945349 + 2*0.1931472 + 0.0053605 = 0.5854145, / 6 = 0.0975691
    assert_close(metrics["approx_kl"], torch.tensor(0.0975691))
    assert all(not m.requires_grad and m.dim() == 0 for m in metrics.values())


def test_dual_clip_bounds_negative_advantages():
    # c = 3:
    #   A=-1, r=5: PPO loss max(5, 1.2) = 5 > bound 3 -> 3, gradient 0
    #   A=-2, r=2: PPO loss max(4, 2.4) = 4 < bound 6 -> 4, gradient -A*r = 4
    #   A=+1, r=5: PPO loss max(-5, -1.2) = -1.2 (A > 0: no dual clip), gradient 0
    ratio, advantage = torch.tensor([5.0, 2.0, 5.0]), torch.tensor([-1.0, -2.0, 1.0])
    loss, metrics, grad = surrogate(ratio, advantage, clip=0.2, dual_clip=3.0)
    assert_close(loss, torch.tensor((3.0 + 4.0 - 1.2) / 3))
    assert_close(grad, torch.tensor([0.0, 4.0, 0.0]) / 3)
    assert_close(metrics["dual_clip_fraction"], torch.tensor(1 / 3))
    # without the dual clip the first entry keeps its unbounded loss of 5
    loss, _, _ = surrogate(ratio, advantage, clip=0.2)
    assert_close(loss, torch.tensor((5.0 + 4.0 - 1.2) / 3))
    with pytest.raises(ValueError, match="dual_clip"):
        surrogate(ratio, advantage, dual_clip=1.0)


def test_per_sequence_advantage_broadcasts_over_tokens():
    log_prob = torch.tensor([[0.1, -0.2, 0.3], [0.0, 0.2, -0.1]])
    advantage = torch.tensor([1.0, -2.0])
    a, _ = clipped_surrogate(log_prob, torch.zeros_like(log_prob), advantage)
    b, _ = clipped_surrogate(log_prob, torch.zeros_like(log_prob), advantage[:, None].expand(2, 3))
    assert_close(a, b)


# ---------------------------------------------------------------- aggregation
# A right-padded batch: row 0 has 3 real tokens (1, 2, 3), row 1 has 1 (4), row 2 none.
MASK = torch.tensor([[True, True, True, False], [True, False, False, False], [False, False, False, False]])


def padded_loss(pad: float) -> torch.Tensor:
    real = torch.tensor([[1.0, 2.0, 3.0, 0.0], [4.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    return torch.where(MASK, real, pad).requires_grad_(True)


@pytest.mark.parametrize(
    "mode, expected, grad_row0, grad_row1",
    [
        # (1 + 2 + 3 + 4) / 4 real tokens = 2.5; every real token weighs 1/4
        ("token-mean", 2.5, 1 / 4, 1 / 4),
        # row means 6/3 = 2 and 4/1 = 4, mean over the 2 non-empty rows = 3;
        # weights 1/(2*3) in row 0, 1/(2*1) in row 1
        ("seq-mean-token-mean", 3.0, 1 / 6, 1 / 2),
        # row sums 6 and 4, mean over the 2 non-empty rows = 5; weights 1/2
        ("seq-mean-token-sum", 5.0, 1 / 2, 1 / 2),
    ],
)
def test_aggregate_modes_ignore_padding(mode, expected, grad_row0, grad_row1):
    for pad in (0.0, 1e9, -7.0):
        loss = padded_loss(pad)
        value = aggregate(loss, MASK, mode)
        value.backward()
        assert_close(value, torch.tensor(expected))
        expected_grad = torch.zeros(3, 4)
        expected_grad[0, :3] = grad_row0
        expected_grad[1, 0] = grad_row1
        assert_close(loss.grad, expected_grad)
        assert (loss.grad[~MASK] == 0).all()


def test_aggregate_without_mask_and_one_dimensional():
    loss = torch.tensor([[1.0, 2.0], [3.0, 6.0]])
    assert_close(aggregate(loss, None, "token-mean"), torch.tensor(3.0))  # 12 / 4
    assert_close(aggregate(loss, None, "seq-mean-token-mean"), torch.tensor(3.0))  # (1.5 + 4.5) / 2
    assert_close(aggregate(loss, None, "seq-mean-token-sum"), torch.tensor(6.0))  # (3 + 9) / 2
    # a 1-D loss is one token per sequence: every mode is the plain mean, 2
    for mode in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum"):
        assert_close(aggregate(torch.tensor([1.0, 2.0, 3.0]), None, mode), torch.tensor(2.0))
    with pytest.raises(ValueError, match="token-mean"):
        aggregate(loss, None, "sum")


def test_masked_mean():
    x = torch.tensor([[1.0, 2.0, 1e9], [3.0, 1e9, 1e9]])
    mask = torch.tensor([[True, True, False], [True, False, False]])
    assert_close(masked_mean(x, mask), torch.tensor(2.0))  # (1 + 2 + 3) / 3
    assert_close(masked_mean(x, mask, dim=-1), torch.tensor([1.5, 3.0]))
    assert_close(masked_mean(x, torch.zeros_like(mask)), torch.tensor(0.0))  # nothing real: 0, not NaN
    assert_close(masked_mean(torch.tensor([1.0, 3.0])), torch.tensor(2.0))
    # padding is selected away, not multiplied by 0: inf or NaN there cannot reach the value
    bad = torch.tensor([[1.0, 2.0, float("inf")], [3.0, float("nan"), -float("inf")]])
    assert_close(masked_mean(bad, mask), torch.tensor(2.0))


# ---------------------------------------------------------------- value loss
def test_value_loss_plain_and_clipped():
    value = torch.tensor([1.0, 2.0, 0.0], requires_grad=True)
    old_value = torch.tensor([0.5, 2.5, 0.0])
    ret = torch.tensor([2.0, 1.0, 0.3])
    # unclipped squared errors: (1-2)^2 = 1, (2-1)^2 = 1, (0-0.3)^2 = 0.09
    # 0.5 * mean = 0.5 * 2.09 / 3 = 0.348333
    assert_close(value_loss(value, old_value, ret), torch.tensor(0.5 * 2.09 / 3))
    # clip 0.2: clipped values 0.5 + 0.2 = 0.7, 2.5 - 0.2 = 2.3, 0 + 0 = 0
    #   clipped errors (0.7-2)^2 = 1.69, (2.3-1)^2 = 1.69, 0.09; max with unclipped: 1.69, 1.69, 0.09
    #   0.5 * 3.47 / 3 = 0.578333
    loss = value_loss(value, old_value, ret, clip=0.2)
    assert_close(loss, torch.tensor(0.5 * 3.47 / 3))
    loss.backward()
    # entries 0 and 1 take the clipped branch, which is flat in value; entry 2: 0.5 * 2 * (0 - 0.3) / 3
    assert_close(value.grad, torch.tensor([0.0, 0.0, -0.1]))


# ---------------------------------------------------------------- HL-Gauss
def test_hl_gauss_targets_hand_worked():
    # 2 bins on [0, 2], edges 0, 1, 2, sigma = 1. erf(1/sqrt2) = 0.6826895, erf(2/sqrt2) = 0.9544997
    # target 1: cdf terms erf((e - 1)/sqrt2) = -0.6826895, 0, 0.6826895 -> equal halves
    # target 0: erf(e/sqrt2) = 0, 0.6826895, 0.9544997; bins 0.6826895, 0.2718102; Z = 0.9544997
    #           -> 0.7152331, 0.2847669
    probs = hl_gauss_targets(torch.tensor([1.0, 0.0]), 0.0, 2.0, 2, sigma=1.0)
    assert_close(probs, torch.tensor([[0.5, 0.5], [0.7152331, 0.2847669]]))


def test_hl_gauss_targets_sum_to_one_and_mean_matches_interior_targets():
    target = torch.tensor([[-3.3, 0.0], [1.7, 4.25]])
    probs = hl_gauss_targets(target, -10.0, 10.0, 41)  # default sigma = 0.75 * 20/41
    assert probs.shape == (2, 2, 41)
    assert_close(probs.sum(-1), torch.ones(2, 2))
    assert (probs >= 0).all()
    # targets many sigmas from the edges: the mean over bin centers is the target
    assert_close(hl_gauss_value(probs.log(), -10.0, 10.0), target, atol=1e-4, rtol=0)


def test_hl_gauss_default_sigma_and_clamp():
    width = 2.0 / 4  # 4 bins on [0, 2]
    t = torch.tensor([0.3, 1.2])
    assert_close(hl_gauss_targets(t, 0.0, 2.0, 4), hl_gauss_targets(t, 0.0, 2.0, 4, sigma=0.75 * width))
    # out-of-range targets are clamped to the support's ends
    outside = hl_gauss_targets(torch.tensor([-5.0, 100.0]), 0.0, 2.0, 4)
    edges = hl_gauss_targets(torch.tensor([0.0, 2.0]), 0.0, 2.0, 4)
    assert_close(outside, edges)


def test_hl_gauss_value_of_one_hot_logits():
    # 4 bins on [0, 4]: centers 0.5, 1.5, 2.5, 3.5; all mass on bin 2 -> 2.5
    logits = torch.tensor([[0.0, 0.0, 100.0, 0.0], [100.0, 0.0, 0.0, 0.0]])
    assert_close(hl_gauss_value(logits, 0.0, 4.0), torch.tensor([2.5, 0.5]))


def test_hl_gauss_loss_is_minimized_at_the_target_distribution():
    target = torch.tensor([0.7, -1.3])
    probs = hl_gauss_targets(target, -2.0, 2.0, 16)
    # log p, with far-tail bins that underflowed to 0 given a finite (negligible) logit
    best = probs.clamp_min(1e-30).log().requires_grad_(True)
    loss = hl_gauss_loss(best, target, -2.0, 2.0)
    # cross-entropy of p with itself is the entropy of p
    entropy = -torch.special.xlogy(probs, probs).sum(-1).mean()
    assert_close(loss, entropy)
    loss.backward()
    assert_close(best.grad, torch.zeros_like(best), atol=1e-6, rtol=0)  # softmax - p = 0
    g = torch.Generator().manual_seed(0)
    for _ in range(5):
        other = best.detach() + 0.3 * torch.randn(best.shape, generator=g)
        assert hl_gauss_loss(other, target, -2.0, 2.0) > loss


def test_hl_gauss_loss_mask():
    logits = torch.randn(3, 8, generator=torch.Generator().manual_seed(0))
    target = torch.tensor([0.1, -0.5, 1e9])
    mask = torch.tensor([True, True, False])
    assert_close(hl_gauss_loss(logits, target, -1.0, 1.0, mask=mask), hl_gauss_loss(logits[:2], target[:2], -1.0, 1.0))


# ---------------------------------------------------------------- KL estimators
def test_kl_estimators_hand_worked():
    # log q = 0, log p = log 2: log r = log 2 = 0.6931472
    #   k1 = -log r = -0.6931472; k2 = (log r)^2 / 2 = 0.2402265; k3 = (2 - 1) - 0.6931472 = 0.3068528
    log_q, log_p = torch.tensor([0.0]), torch.tensor([math.log(2.0)])
    assert_close(kl_estimate(log_q, log_p, "k1"), torch.tensor([-0.6931472]))
    assert_close(kl_estimate(log_q, log_p, "k2"), torch.tensor([0.2402265]))
    assert_close(kl_estimate(log_q, log_p, "k3"), torch.tensor([0.3068528]))
    with pytest.raises(ValueError, match="k3"):
        kl_estimate(log_q, log_p, "k4")


def test_kl_k3_nonnegative_and_zero_when_equal():
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(1000, generator=g), torch.randn(1000, generator=g)
    assert (kl_estimate(a, b, "k3") >= 0).all()
    for kind in ("k1", "k2", "k3"):
        assert (kl_estimate(a, a, kind) == 0).all()


def test_kl_estimators_match_true_kl_of_gaussians():
    # q = N(0, 1), p = N(0.5, 1.2^2):
    # KL(q || p) = log(1.2) + (1 + 0.5^2) / (2 * 1.44) - 0.5 = 0.1823216 + 0.4340278 - 0.5 = 0.1163494
    q = torch.distributions.Normal(0.0, 1.0)
    p = torch.distributions.Normal(0.5, 1.2)
    x = torch.randn(200_000, generator=torch.Generator().manual_seed(0))  # samples from q
    for kind in ("k1", "k3"):  # the unbiased ones (k2 is biased)
        estimate = approx_kl(q.log_prob(x), p.log_prob(x), kind=kind)
        assert_close(estimate, torch.tensor(0.1163494), atol=4e-3, rtol=0)


def test_kl_estimators_match_true_kl_of_categoricals():
    # q = [0.5, 0.3, 0.2], p = [0.2, 0.3, 0.5]:
    # KL(q || p) = 0.5 ln 2.5 + 0.3 ln 1 + 0.2 ln 0.4 = 0.3 * 0.9162907 = 0.2748872
    q = torch.tensor([0.5, 0.3, 0.2])
    p = torch.tensor([0.2, 0.3, 0.5])
    x = torch.multinomial(q, 200_000, replacement=True, generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(x, dtype=torch.bool)
    for kind in ("k1", "k3"):
        estimate = approx_kl(q.log()[x], p.log()[x], mask, kind=kind)
        assert_close(estimate, torch.tensor(0.2748872), atol=5e-3, rtol=0)


# ---------------------------------------------------------------- other terms
def test_truncated_importance_weight():
    # behavior 0.5, 0.5, 0.25; target 0.25, 1.0, 1.0 -> ratios 0.5, 2, 4; cap 2 -> 0.5, 2, 2
    behavior = torch.tensor([0.5, 0.5, 0.25]).log()
    target = torch.tensor([0.25, 1.0, 1.0]).log().requires_grad_(True)
    weight = truncated_importance_weight(behavior, target, cap=2.0)
    assert_close(weight, torch.tensor([0.5, 2.0, 2.0]))
    assert not weight.requires_grad


def test_entropy_loss():
    entropy = torch.tensor([[1.0, 2.0, 1e9], [3.0, 1e9, 1e9]])
    mask = torch.tensor([[True, True, False], [True, False, False]])
    assert_close(entropy_loss(entropy, mask), torch.tensor(-2.0))  # -(1 + 2 + 3) / 3
    assert_close(entropy_loss(torch.tensor([1.0, 2.0])), torch.tensor(-1.5))


def test_ppo_loss_composes_the_terms():
    log_prob = RATIO.log()
    value = torch.tensor([1.0, 2.0, 0.0])
    old_value = torch.tensor([0.5, 2.5, 0.0])
    ret = torch.tensor([2.0, 1.0, 0.3])
    entropy = torch.full((6,), 0.5)
    kwargs = dict(clip=0.2, dual_clip=None, value_clip=None, value_coef=0.5, entropy_coef=0.01, agg="token-mean")
    loss, metrics = ppo_loss(log_prob, torch.zeros(6), ADV, value, old_value, ret, entropy, **kwargs)
    # policy 0.4/6 = 0.0666667 (clipped-surrogate test) + 0.5 * value 0.3483333 (value-loss test)
    # - 0.01 * entropy 0.5 = 0.0666667 + 0.1741667 - 0.005 = 0.2358333
    assert_close(loss, torch.tensor(0.2358333))
    assert_close(metrics["policy_loss"], torch.tensor(0.4 / 6))
    assert_close(metrics["value_loss"], torch.tensor(0.5 * 2.09 / 3))
    assert_close(metrics["entropy"], torch.tensor(0.5))
    # critic-free: no value term
    loss, metrics = ppo_loss(log_prob, torch.zeros(6), ADV, None, None, None, entropy, **kwargs)
    assert_close(loss, torch.tensor(0.4 / 6 - 0.005))
    assert "value_loss" not in metrics


def test_ppo_loss_per_sequence_value_with_token_mask():
    # values [B] next to per-token log-probs [B, L]: the value mask is "row has a real token"
    log_prob = torch.zeros(3, 2)
    value, ret = torch.tensor([1.0, 2.0, 1e9]), torch.tensor([0.0, 0.0, 0.0])
    mask = torch.tensor([[True, False], [True, True], [False, False]])
    kwargs = dict(clip=0.2, dual_clip=None, value_clip=None, value_coef=1.0, entropy_coef=0.0, agg="token-mean")
    _, metrics = ppo_loss(log_prob, log_prob, torch.zeros(3), value, value, ret, None, mask, **kwargs)
    assert_close(metrics["value_loss"], torch.tensor(0.5 * (1.0 + 4.0) / 2))


def test_grpo_loss_kl_term():
    # ratio 1 everywhere, so the policy term is -mean(A) over real tokens:
    #   A per sequence [1, -2], row 0 has 2 real tokens, row 1 has 1: -(1 + 1 - 2) / 3 = 0
    # ref_log_prob = log 2 above the policy: k3 = (2 - 1) - log 2 = 0.3068528 per token
    log_prob = torch.zeros(2, 3)
    mask = torch.tensor([[True, True, False], [True, False, False]])
    advantage = torch.tensor([1.0, -2.0])
    ref = torch.full((2, 3), math.log(2.0))
    loss, metrics = grpo_loss(log_prob, log_prob, advantage, mask, clip=0.2, ref_log_prob=ref, kl_coef=0.1, agg="token-mean")
    assert_close(metrics["policy_loss"], torch.tensor(0.0))
    assert_close(metrics["kl"], torch.tensor(0.3068528))
    assert_close(loss, torch.tensor(0.1 * 0.3068528))
    # no KL without a coefficient; a coefficient without reference log-probs is an error
    loss, metrics = grpo_loss(log_prob, log_prob, advantage, mask, clip=0.2, agg="token-mean")
    assert "kl" not in metrics and loss == 0
    with pytest.raises(ValueError, match="ref_log_prob"):
        grpo_loss(log_prob, log_prob, advantage, mask, clip=0.2, kl_coef=0.1, agg="token-mean")
