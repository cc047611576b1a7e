"""Advantage estimators against values worked out by hand (arithmetic in the comments)."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from embodied.algorithms.advantages import (
    discounted_returns,
    gae,
    group_relative_advantages,
    leave_one_out_advantages,
    normalize,
    token_gae,
)

GAMMA, LAM = 0.9, 0.5  # gamma * lam = 0.45

# T = 3. Three columns (N = 3) run the same rewards and values through three cases:
#   col 0: the episode continues past t = 2
#   col 1: terminated at t = 1 (the next state is absorbing: no bootstrap)
#   col 2: truncated at t = 1 (time limit: bootstrap from V(final_obs) = 3.0)
# next_value[1] differs between cases: for termination it is ignored, for
# truncation it is V(final_obs), not value[2] (which belongs to the next episode).
REWARD = torch.tensor([1.0, 0.0, 2.0])
VALUE = torch.tensor([0.5, 1.0, 1.5])


def columns(*cols: list[float]) -> torch.Tensor:
    return torch.tensor(cols).T  # [T, N]


def gae_inputs():
    reward = columns(REWARD.tolist(), REWARD.tolist(), REWARD.tolist())
    value = columns(VALUE.tolist(), VALUE.tolist(), VALUE.tolist())
    next_value = columns([1.0, 1.5, 2.0], [1.0, 7.0, 2.0], [1.0, 3.0, 2.0])
    terminated = columns([0, 0, 0], [0, 1, 0], [0, 0, 0]).bool()
    done = columns([0, 0, 0], [0, 1, 0], [0, 1, 0]).bool()
    return reward, value, next_value, terminated, done


def test_gae_continuing_terminated_truncated():
    advantage, ret = gae(*gae_inputs(), gamma=GAMMA, lam=LAM)
    # continuing: delta = r + 0.9 * V' - V
    #   delta0 = 1 + 0.9*1.0 - 0.5 = 1.4, delta1 = 0 + 0.9*1.5 - 1.0 = 0.35, delta2 = 2 + 0.9*2.0 - 1.5 = 2.3
    #   A2 = 2.3; A1 = 0.35 + 0.45*2.3 = 1.385; A0 = 1.4 + 0.45*1.385 = 2.02325
    # terminated at t=1: delta1 = 0 + 0 - 1.0 = -1.0, and the trace is cut after t=1
    #   A2 = 2.3; A1 = -1.0; A0 = 1.4 + 0.45*(-1.0) = 0.95
    # truncated at t=1: delta1 = 0 + 0.9*3.0 - 1.0 = 1.7 (bootstrapped), trace cut
    #   A2 = 2.3; A1 = 1.7; A0 = 1.4 + 0.45*1.7 = 2.165
    expected = columns([2.02325, 1.385, 2.3], [0.95, -1.0, 2.3], [2.165, 1.7, 2.3])
    assert_close(advantage, expected)
    # ret = A + V: col0 [2.52325, 2.385, 3.8], col1 [1.45, 0.0, 3.8], col2 [2.665, 2.7, 3.8]
    assert_close(ret, columns([2.52325, 2.385, 3.8], [1.45, 0.0, 3.8], [2.665, 2.7, 3.8]))


def test_gae_trailing_batch_dims():
    inputs = [x[..., None].expand(-1, -1, 2) for x in gae_inputs()]  # [T, N, 2]
    advantage, _ = gae(*inputs, gamma=GAMMA, lam=LAM)
    assert advantage.shape == (3, 3, 2)
    assert_close(advantage[..., 0], advantage[..., 1])
    assert_close(advantage[:, 0, 0], torch.tensor([2.02325, 1.385, 2.3]))


def test_gae_lambda_zero_is_td_error():
    advantage, _ = gae(*gae_inputs(), gamma=GAMMA, lam=0.0)
    # delta per column, as in the test above
    assert_close(advantage, columns([1.4, 0.35, 2.3], [1.4, -1.0, 2.3], [1.4, 1.7, 2.3]))


def test_gae_lambda_one_is_discounted_return_minus_value():
    # With no truncation, GAE(lam=1) telescopes to the Monte Carlo return that
    # bootstraps from next_value at the end of the rollout, minus V.
    g = torch.Generator().manual_seed(0)
    T, N = 6, 5
    reward, value, next_value = (torch.randn(T, N, generator=g) for _ in range(3))
    next_value[:-1] = value[1:]  # a consistent rollout: V' is the next step's V
    terminated = torch.rand(T, N, generator=g) < 0.3
    advantage, _ = gae(reward, value, next_value, terminated, terminated, gamma=0.97, lam=1.0)
    returns = discounted_returns(reward, terminated, 0.97, last_value=next_value[-1])
    assert_close(advantage, returns - value)


def test_discounted_returns():
    done = torch.tensor([0.0, 0.0, 0.0])
    # G2 = 2; G1 = 0 + 0.9*2 = 1.8; G0 = 1 + 0.9*1.8 = 2.62
    assert_close(discounted_returns(REWARD, done, GAMMA), torch.tensor([2.62, 1.8, 2.0]))
    # done at t=1 cuts the sum: G2 = 2; G1 = 0; G0 = 1 + 0.9*0 = 1
    assert_close(discounted_returns(REWARD, torch.tensor([0.0, 1.0, 0.0]), GAMMA), torch.tensor([1.0, 0.0, 2.0]))
    # bootstrap 10: G2 = 2 + 0.9*10 = 11; G1 = 0.9*11 = 9.9; G0 = 1 + 0.9*9.9 = 9.91
    assert_close(discounted_returns(REWARD, done, GAMMA, torch.tensor(10.0)), torch.tensor([9.91, 9.9, 11.0]))


# Three groups, interleaved, of sizes 3, 2 and 1, with non-contiguous ids:
#   group 7 at indices 0, 2, 4: rewards 1, 0, 1
#   group 9 at indices 1, 5:    rewards 3, 4
#   group 2 at index 3:         reward 5 (a singleton)
GROUP = torch.tensor([7, 9, 7, 2, 7, 9])
GROUP_REWARD = torch.tensor([1.0, 3.0, 0.0, 5.0, 1.0, 4.0])


def test_group_relative_advantages():
    advantage = group_relative_advantages(GROUP_REWARD, GROUP, eps=0.0)
    # group 7: mean 2/3, deviations 1/3, -2/3, 1/3; unbiased var = (1/9 + 4/9 + 1/9) / 2 = 1/3
    #          std = 1/sqrt(3) -> A = 1/sqrt(3), -2/sqrt(3), 1/sqrt(3)
    # group 9: mean 3.5, deviations -0.5, 0.5; unbiased var = 0.5 / 1 = 0.5, std = 1/sqrt(2)
    #          -> A = -1/sqrt(2), 1/sqrt(2)
    # group 2: a singleton -> 0
    s3, s2 = 1 / math.sqrt(3), 1 / math.sqrt(2)
    assert_close(advantage, torch.tensor([s3, -s2, -2 * s3, 0.0, s3, s2]))


def test_group_relative_advantages_without_std_is_dr_grpo():
    advantage = group_relative_advantages(GROUP_REWARD, GROUP, scale_by_std=False)
    # reward - group mean: 1 - 2/3, 3 - 3.5, 0 - 2/3, 5 - 5, 1 - 2/3, 4 - 3.5
    assert_close(advantage, torch.tensor([1 / 3, -0.5, -2 / 3, 0.0, 1 / 3, 0.5]))


def test_group_relative_advantages_equal_rewards_give_zero():
    advantage = group_relative_advantages(torch.tensor([2.0, 2.0, 2.0, 0.0, 1.0]), torch.tensor([0, 0, 0, 1, 1]))
    # group 0 all equal: 0 / (0 + eps) = 0; group 1: +-0.5 / (1/sqrt(2) + 1e-6)
    assert_close(advantage, torch.tensor([0.0, 0.0, 0.0, -0.70710, 0.70710]), atol=1e-4, rtol=0)


def test_leave_one_out_advantages():
    advantage = leave_one_out_advantages(GROUP_REWARD, GROUP)
    # group 7: 1 - (0 + 1)/2 = 0.5; 0 - (1 + 1)/2 = -1; 1 - (1 + 0)/2 = 0.5
    # group 9: 3 - 4 = -1; 4 - 3 = 1
    # group 2: singleton -> 0
    assert_close(advantage, torch.tensor([0.5, -1.0, -1.0, 0.0, 0.5, 1.0]))


def test_normalize_masked():
    x = torch.tensor([[1.0, 2.0, 1e9], [3.0, 1e9, 1e9]])
    mask = torch.tensor([[True, True, False], [True, False, False]])
    # real entries 1, 2, 3: mean 2, unbiased std sqrt((1 + 0 + 1) / 2) = 1 -> -1, 0, 1; padding -> 0
    assert_close(normalize(x, mask), torch.tensor([[-1.0, 0.0, 0.0], [1.0, 0.0, 0.0]]))
    assert_close(normalize(torch.tensor([1.0, 2.0, 3.0])), torch.tensor([-1.0, 0.0, 1.0]))


# --- GAE over a language agent's tokens ----------------------------------------------------------------------
# two episodes of model tokens (1) between prompt/env tokens (0), right padded; reward paid at the last model token
TOKEN_MASK = torch.tensor([[0, 1, 1, 0, 0, 1, 0, 0],
                           [0, 0, 1, 0, 1, 1, 1, 0]], dtype=torch.bool)
TOKEN_VALUE = torch.tensor([[9.0, 0.1, 0.2, 9.0, 9.0, 0.3, 9.0, 9.0],
                            [9.0, 9.0, 0.5, 9.0, 0.4, 0.3, 0.2, 9.0]])  # 9 = what the critic says off the mask
TOKEN_REWARD = torch.tensor([1.0, -0.5])


def test_token_gae_lambda_one_is_the_return_minus_value_at_every_model_token():
    advantage, ret = token_gae(TOKEN_REWARD, TOKEN_VALUE, TOKEN_MASK, gamma=1.0, lam=1.0)
    expected = torch.where(TOKEN_MASK, TOKEN_REWARD[:, None] - TOKEN_VALUE, 0.0)
    assert torch.allclose(advantage, expected) and torch.allclose(ret, torch.where(TOKEN_MASK, TOKEN_REWARD[:, None], 0.0))


def test_token_gae_lambda_zero_bootstraps_from_the_next_model_token_across_env_tokens():
    """The env's tokens are not steps: the TD error at a model token uses the value of the next model token (the
    9s between them never enter), and the last model token's target is the reward."""
    advantage, _ = token_gae(TOKEN_REWARD, TOKEN_VALUE, TOKEN_MASK, gamma=0.9, lam=0.0)
    expected = torch.zeros(2, 8)
    expected[0, [1, 2, 5]] = torch.tensor([0.9 * 0.2 - 0.1, 0.9 * 0.3 - 0.2, 1.0 - 0.3])
    expected[1, [2, 4, 5, 6]] = torch.tensor([0.9 * 0.4 - 0.5, 0.9 * 0.3 - 0.4, 0.9 * 0.2 - 0.3, -0.5 - 0.2])
    assert torch.allclose(advantage, expected)


def test_token_gae_a_row_without_model_tokens_gets_nothing():
    mask = TOKEN_MASK.clone()
    mask[1] = False
    advantage, ret = token_gae(TOKEN_REWARD, TOKEN_VALUE, mask, gamma=1.0, lam=0.95)
    assert (advantage[1] == 0).all() and (ret[1] == 0).all() and advantage[0, 5] == pytest.approx(1.0 - 0.3)
