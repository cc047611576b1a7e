"""Off-policy losses against values worked out by hand (arithmetic in the comments)."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from embodied.algorithms.offpolicy_losses import (
    awr_weights,
    calibrate,
    chunked_td_target,
    cql_penalty,
    critic_loss,
    ensemble_min,
    expectile_loss,
    polyak_update,
    sac_actor_loss,
    soft_td_target,
    temperature_loss,
)


def test_soft_td_target():
    # gamma 0.9, alpha 0.2; soft next values: 2 - 0.2*0.5 = 1.9, 3 - 0.2*1 = 2.8, 4 + 0.2*1 = 4.2
    #   1 + 0.9 * 1.9 = 2.71;  terminated: 0.5;  -1 + 0.9 * 4.2 = 2.78
    reward, terminated = torch.tensor([1.0, 0.5, -1.0]), torch.tensor([False, True, False])
    next_q, next_log_prob = torch.tensor([2.0, 3.0, 4.0]), torch.tensor([0.5, 1.0, -1.0])
    assert_close(soft_td_target(reward, terminated, next_q, 0.9, next_log_prob, 0.2), torch.tensor([2.71, 0.5, 2.78]))
    # no entropy term (IQL, CQL backups): 1 + 0.9 * 2 = 2.8, 0.5, -1 + 0.9 * 4 = 2.6
    assert_close(soft_td_target(reward, terminated, next_q, 0.9), torch.tensor([2.8, 0.5, 2.6]))
    assert not soft_td_target(reward, terminated, next_q.requires_grad_(True), 0.9).requires_grad


def test_chunked_td_target_with_episode_ends_inside_the_window():
    # gamma 0.5, H = 3
    #   row 0: all 3 steps, 1 + 0.5*2 + 0.25*4 = 3, bootstrap 0.125 * 8 = 1      -> 4
    #   row 1: 2 steps then the episode terminated: 1 + 0.5*2 = 2, no bootstrap   -> 2
    #   row 2: 1 step then truncated (not terminated): 3 + 0.5 * 4 = 5            -> 5
    pad = 1e9  # padding must not leak into the target
    reward = torch.tensor([[1.0, 2.0, 4.0], [1.0, 2.0, pad], [3.0, pad, pad]])
    valid = torch.tensor([[True, True, True], [True, True, False], [True, False, False]])
    terminated = torch.tensor([False, True, False])
    next_value = torch.tensor([8.0, 8.0, 4.0])
    assert_close(chunked_td_target(reward, valid, terminated, next_value, 0.5), torch.tensor([4.0, 2.0, 5.0]))
    # a window of one step is the one-step target
    one = chunked_td_target(reward[:, :1], valid[:, :1], terminated, next_value, 0.5)
    assert_close(one, soft_td_target(reward[:, 0], terminated, next_value, 0.5))


def test_ensemble_min_all_members_and_random_subsets():
    q = torch.tensor([[3.0, 0.0], [1.0, 5.0], [2.0, 4.0], [6.0, 2.0]])  # [E=4, B=2]
    assert_close(ensemble_min(q), torch.tensor([1.0, 0.0]))
    assert_close(ensemble_min(q, 4), torch.tensor([1.0, 0.0]))
    # REDQ: min over one random pair per call, the same pair for the whole batch
    pairs = {(i, j): torch.minimum(q[i], q[j]) for i in range(4) for j in range(i + 1, 4)}
    gen = torch.Generator().manual_seed(0)
    seen = set()
    for _ in range(200):
        out = ensemble_min(q, 2, gen)
        match = [p for p, v in pairs.items() if torch.equal(v, out)]
        assert match, out
        seen.update(match)
    assert len(seen) == 6  # every pair gets drawn
    with pytest.raises(ValueError, match="num_min=5"):
        ensemble_min(q, 5)


def test_critic_loss_sums_members():
    # member 0 errors (1-2, 2-1) = (-1, 1), member 1 (3-2, 0-1) = (1, -1): mean squares 1 and 1
    #   0.5 * (1 + 1) = 1; d/dq = (q - y) / B
    q = torch.tensor([[1.0, 2.0], [3.0, 0.0]], requires_grad=True)
    loss = critic_loss(q, torch.tensor([2.0, 1.0]))
    loss.backward()
    assert_close(loss, torch.tensor(1.0))
    assert_close(q.grad, torch.tensor([[-0.5, 0.5], [0.5, -0.5]]))


def test_sac_actor_and_temperature_losses():
    # alpha 0.5: (0.5 * -1 - 1, 0.5 * 0.5 - 2) = (-1.5, -1.75), mean -1.625
    assert_close(sac_actor_loss(torch.tensor([1.0, 2.0]), torch.tensor([-1.0, 0.5]), 0.5), torch.tensor(-1.625))
    # entropy -log pi = (1, 3), mean 2, above the target -2: log pi + target = (-3, -5), mean -4
    #   loss = -log_alpha * -4 = 4 log 0.5; d/d log_alpha = 4 > 0, so a descent step lowers alpha
    log_alpha = torch.tensor(math.log(0.5), requires_grad=True)
    loss = temperature_loss(log_alpha, torch.tensor([-1.0, -3.0], requires_grad=True), target_entropy=-2.0)
    loss.backward()
    assert_close(loss, torch.tensor(4 * math.log(0.5)))
    assert_close(log_alpha.grad, torch.tensor(4.0))


def test_expectile_loss_hand_worked_and_its_minimizer():
    # tau 0.7: weights 0.7 (diff >= 0), 0.3 (diff < 0): (0.7*4 + 0.3*4 + 0.7*1) / 3 = 4.7 / 3
    diff = torch.tensor([2.0, -2.0, 1.0])
    assert_close(expectile_loss(diff, 0.7), torch.tensor(4.7 / 3))
    assert_close(expectile_loss(diff, 0.5), torch.tensor(0.5 * 9.0 / 3))  # half the mean square
    # the 0.7-expectile of the samples {0, 1}: 0.7 (v - 1) + 0.3 v = 0 -> v = 0.7, where the gradient vanishes
    v = torch.tensor(0.7, requires_grad=True)
    expectile_loss(torch.tensor([0.0, 1.0]) - v, 0.7).backward()
    assert abs(float(v.grad)) < 1e-6
    with pytest.raises(ValueError, match="expectile"):
        expectile_loss(diff, 1.0)


def test_awr_weights_are_clipped():
    # exp(3 * 0) = 1, exp(3 * 1) = 20.0855, exp(30) clipped to 100
    assert_close(awr_weights(torch.tensor([0.0, 1.0, 10.0]), 3.0), torch.tensor([1.0, math.exp(3.0), 100.0]))


def test_cql_penalty_hand_worked():
    # one member, one state, two sampled actions with Q 1 and 2 and densities 1 and 2:
    #   logsumexp(1 - 0, 2 - ln 2) = ln(e + e^2 / 2) = 1 + ln(1 + e / 2) = 1.8582975
    #   minus Q of the data's action 0.5 -> 1.3582975
    q_data = torch.tensor([[0.5]])
    q_sampled = torch.tensor([[[1.0, 2.0]]])
    log_density = torch.tensor([[0.0, math.log(2.0)]])
    assert_close(cql_penalty(q_data, q_sampled, log_density), torch.tensor([1.3582975]))
    # temperature 2: 2 ln(e^0.5 + e / sqrt 2) - 0.5 = 2.0455999
    assert_close(cql_penalty(q_data, q_sampled, log_density, 2.0), torch.tensor([2.0455999]))
    # a tiny temperature tends to the max: max(1, 2 - ln 2) - 0.5 = 1.5 - ln 2 = 0.8068528
    assert_close(cql_penalty(q_data, q_sampled, log_density, 1e-3), torch.tensor([2.0 - math.log(2.0) - 0.5]),
                 atol=1e-3, rtol=0)


def test_cql_penalty_gradient_pushes_sampled_down_and_data_up():
    q_data = torch.tensor([[0.0, 0.0]], requires_grad=True)
    q_sampled = torch.zeros(1, 2, 4, requires_grad=True)
    cql_penalty(q_data, q_sampled, torch.zeros(2, 4)).sum().backward()
    # d/dq_data = -1/B; d/dq_sampled = softmax weights 1/4, over B
    assert_close(q_data.grad, torch.full((1, 2), -0.5))
    assert_close(q_sampled.grad, torch.full((1, 2, 4), 0.25 / 2))


def test_calibrate_lower_bounds_policy_values_by_mc_return():
    q = torch.tensor([[[1.0, 5.0], [-3.0, 0.0]]], requires_grad=True)  # [E=1, B=2, K=2]
    out = calibrate(q, torch.tensor([2.0, -1.0]))
    assert_close(out, torch.tensor([[[2.0, 5.0], [-1.0, 0.0]]]))
    out.sum().backward()
    assert_close(q.grad, torch.tensor([[[0.0, 1.0], [0.0, 1.0]]]))  # raised entries get no gradient


def test_polyak_update():
    target, source = [torch.tensor([0.0, 10.0])], [torch.tensor([1.0, 0.0])]
    polyak_update(target, source, 0.1)  # 0.9 * 0 + 0.1 * 1 = 0.1; 0.9 * 10 + 0 = 9
    assert_close(target[0], torch.tensor([0.1, 9.0]))
