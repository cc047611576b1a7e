"""SAC, RLPD, IQL and Cal-QL agents on problems whose answers are known in closed form."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from tensordict import TensorDict
from torch.testing import assert_close

from embodied import keys, registry
from embodied.algorithms.calql import CalQL, CalQLConfig
from embodied.algorithms.iql import IQL, IQLConfig
from embodied.algorithms.sac import RLPD, SAC, SACConfig
from embodied.config import ConfigError
from embodied.data.replay import SOURCE
from embodied.specs import Spec
from policies.sac_mlp import SACPolicy, SACPolicyConfig

SMALL = SACPolicyConfig(actor_hidden=(32, 32), critic_hidden=(32, 32))


def make_policy(state_dim=2, action_dim=1, config=SMALL, low=-1.0, high=1.0):
    return SACPolicy(config, {keys.STATE: Spec((state_dim,))}, Spec((action_dim,), torch.float32, low, high))


def batch(state, action, reward, next_state=None, terminated=None, **extra):
    n = state.shape[0]
    next_state = torch.zeros_like(state) if next_state is None else next_state
    terminated = torch.ones(n, dtype=torch.bool) if terminated is None else terminated
    return TensorDict({keys.OBS: {keys.STATE: state}, keys.NEXT_OBS: {keys.STATE: next_state}, keys.ACTION: action,
                       keys.REWARD: reward, keys.TERMINATED: terminated, **extra}, batch_size=[n])


def test_squashed_gaussian_log_prob_matches_torch_distributions():
    torch.manual_seed(0)
    policy = make_policy(3, 2, low=-2.0, high=2.0)
    state = torch.randn(64, 3)
    action, log_prob = policy.sample(state)
    mean, log_std = policy.distribution(state)
    reference = torch.distributions.TransformedDistribution(
        torch.distributions.Normal(mean, log_std.exp()),
        [torch.distributions.TanhTransform(), torch.distributions.AffineTransform(0.0, 2.0)],
    )
    assert (action.abs() < 2.0).all()
    assert_close(log_prob, reference.log_prob(action).sum(-1), atol=1e-3, rtol=1e-4)
    assert_close(policy.log_prob(state, action), log_prob, atol=1e-3, rtol=1e-4)


def test_ensemble_members_are_independent_mlps_and_detach_params_blocks_weight_grads():
    torch.manual_seed(0)
    policy = make_policy(config=SACPolicyConfig(critic_hidden=(8,), num_critics=3, layer_norm=True))
    state, action = torch.randn(5, 2), torch.rand(5, 1)
    q = policy.q(state, action)
    assert q.shape == (3, 5)
    critic = policy.critic
    for e in range(3):  # member e by hand: Dense -> LayerNorm -> ReLU -> Dense
        x = torch.cat([state, action], -1) @ critic.weights[0][e] + critic.biases[0][e]
        x = torch.nn.functional.layer_norm(x, (8,)) * critic.ln_weights[0][e] + critic.ln_biases[0][e]
        x = x.relu() @ critic.weights[1][e] + critic.biases[1][e]
        assert_close(q[e], x.squeeze(-1))
    action.requires_grad_(True)
    policy.q(state, action, detach_params=True).sum().backward()
    assert action.grad is not None and all(p.grad is None for p in policy.critic_params())


def test_sac_update_moves_target_by_polyak_and_learns_a_bandit():
    """One-step episodes, reward -(a - s)^2: the greedy action must learn to track the state."""
    torch.manual_seed(0)
    policy = make_policy(1, 1)
    algo = SAC(SACConfig(lr=5e-3, tau=0.5, batch_size=128), policy)
    before = [p.clone() for p in algo.target_critic.parameters()]
    state = torch.rand(128, 1) * 1.6 - 0.8
    action = torch.rand(128, 1) * 2 - 1
    algo.update(batch(state, action, -(action - state).square().squeeze(-1)))
    for old, target, online in zip(before, algo.target_critic.parameters(), policy.critic_params()):
        assert_close(target, 0.5 * old + 0.5 * online)  # tau 0.5: halfway to the freshly stepped critic
    for _ in range(200):
        state = torch.rand(128, 1) * 1.6 - 0.8
        action = torch.rand(128, 1) * 2 - 1
        metrics = algo.update(batch(state, action, -(action - state).square().squeeze(-1)))
    probe = torch.linspace(-0.6, 0.6, 7)[:, None]
    greedy = policy.act(TensorDict({keys.STATE: probe}, [7]), deterministic=True).action
    assert (greedy - probe).abs().max() < 0.15, greedy.squeeze(-1)
    assert {"critic_loss", "actor_loss", "alpha", "entropy"} <= set(metrics)


def test_rlpd_defaults_and_actor_only_every_call_with_update_actor():
    policy = make_policy(config=SACPolicyConfig(critic_hidden=(16,), actor_hidden=(16,), num_critics=10, layer_norm=True))
    algo = registry.build("algo", "rlpd", {}, policy=policy)
    assert isinstance(algo, RLPD) and algo.config.utd_ratio == 20 and algo.config.num_min == 2
    assert algo.target_entropy == -0.5  # -dim(A) / 2
    actor_before = [p.clone() for p in policy.actor_params()]
    state = torch.randn(32, 2)
    metrics = algo.update(batch(state, torch.rand(32, 1), torch.zeros(32)), update_actor=False)
    assert "actor_loss" not in metrics
    assert all(torch.equal(a, b) for a, b in zip(actor_before, policy.actor_params()))


def test_sac_state_dict_roundtrip_continues_identically():
    torch.manual_seed(0)
    data = batch(torch.randn(64, 2), torch.rand(64, 1) * 2 - 1, torch.randn(64))
    policy_a = make_policy()
    a = SAC(SACConfig(batch_size=64), policy_a)
    a.update(data)
    policy_b = make_policy()
    policy_b.load_state_dict(policy_a.state_dict())
    b = SAC(SACConfig(batch_size=64), policy_b)
    b.load_state_dict(copy.deepcopy(a.state_dict()))  # as from disk: Adam's load would share a's live tensors
    torch.manual_seed(1)
    a.update(data)
    torch.manual_seed(1)
    b.update(data)
    for (name, pa), pb in zip(policy_a.state_dict().items(), policy_b.state_dict().values()):
        assert torch.equal(pa, pb), name


def test_iql_on_a_two_action_dataset_recovers_expectile_q_and_the_better_action():
    """Data: a = +0.5 pays 1, a = -0.5 pays 0, one step. Q -> 1 and 0, V -> the 0.7-expectile of
    {0, 1} with equal weight = 0.7 (see test_expectile_loss), and AWR weighs +0.5 by exp(3 * 0.3) = 2.46
    against exp(3 * -0.7) = 0.12: the fitted mean is about (2.46 - 0.12) * 0.5 / 2.58 = 0.45."""
    torch.manual_seed(0)
    policy = make_policy(1, 1)
    algo = IQL(IQLConfig(lr=5e-3, tau=0.1, batch_size=128, value_hidden=(32, 32)), policy)
    state = torch.rand(128, 1)
    action = torch.where(torch.arange(128)[:, None] % 2 == 0, 0.5, -0.5)
    reward = (action.squeeze(-1) > 0).float()
    for _ in range(250):
        metrics = algo.update(batch(state, action, reward))
    q = policy.q(state, action).mean(0)
    assert_close(q, reward, atol=0.1, rtol=0)
    assert_close(algo.value_net(state).mean(), torch.tensor(0.7), atol=0.08, rtol=0)
    mean = policy.act(TensorDict({keys.STATE: state}, [128]), deterministic=True).action
    assert (mean > 0).all() and 0.35 < mean.mean() < 0.55, mean.squeeze(-1)
    assert metrics["awr_weight"] > 0


def test_iql_chunked_windows_back_up_the_window_return():
    """Windows of 2 steps paying 1 each, then termination, gamma 0.5: Q -> 1 + 0.5 = 1.5."""
    torch.manual_seed(0)
    policy = make_policy(1, 1)
    algo = IQL(IQLConfig(lr=5e-3, gamma=0.5, tau=0.1, batch_size=64, value_hidden=(16,)), policy)
    state, action = torch.rand(64, 1), torch.rand(64, 1) * 2 - 1
    data = batch(state, action, torch.ones(64, 2), **{keys.MASK: torch.ones(64, 2, dtype=torch.bool)})
    for _ in range(150):
        algo.update(data)
    assert_close(policy.q(state, action).mean(), torch.tensor(1.5), atol=0.1, rtol=0)


def test_calql_pushes_unseen_actions_below_the_data_and_calibration_bounds_them():
    """Data: only a = 0, paying 0, one step. CQL makes Q of other actions lower than Q(s, 0); Cal-QL
    with a Monte Carlo return of +5 keeps policy-action values from being pushed below 5."""
    torch.manual_seed(0)
    state, action = torch.rand(64, 1), torch.zeros(64, 1)
    far = torch.full((64, 1), 0.9)
    results = {}
    for calibrated in (False, True):
        torch.manual_seed(0)
        policy = make_policy(1, 1)
        algo = CalQL(CalQLConfig(lr=5e-3, batch_size=64, num_samples=3, calibrated=calibrated), policy)
        data = batch(state, action, torch.zeros(64), **{keys.MC_RETURN: torch.full((64,), 5.0)})
        for _ in range(150):
            metrics = algo.update(data)
        results[calibrated] = policy.q(state, far).mean(0).mean().item(), policy.q(state, action).mean().item()
        assert math.isfinite(metrics["cql_penalty"])
    q_far, q_data = results[False]
    assert q_far < q_data - 0.5, results  # plain CQL: conservative away from the data
    q_far_cal, _ = results[True]
    assert q_far_cal > q_far + 0.5, results  # calibrated: not pushed down below the MC return as far


def test_calql_without_mc_return_and_bad_configs_fail_clearly():
    policy = make_policy()
    algo = CalQL(CalQLConfig(batch_size=8), policy)
    with pytest.raises(KeyError, match="mc_return"):
        algo.update(batch(torch.randn(8, 2), torch.zeros(8, 1), torch.zeros(8)))
    with pytest.raises(ConfigError, match="cql_alpha"):
        registry.build("algo", "calql", {"cql_alpha": -1.0}, policy=policy)
    with pytest.raises(ConfigError, match="utd_ratio"):
        registry.build("algo", "sac", {"utd_ratio": 0}, policy=policy)
    mlp = registry.build("policy", "mlp", {}, observation_spec={keys.STATE: Spec((2,))},
                         action_spec=Spec((1,), torch.float32, -1.0, 1.0))
    with pytest.raises(ValueError, match="sac_mlp"):
        registry.build("algo", "sac", {}, policy=mlp)


def mixed(state, action, reward, source):
    return batch(state, action, reward, **{SOURCE: source})


def test_bc_term_clones_only_the_demo_rows_and_decays_linearly():
    """Flat Q (every action costs 1): only the BC term shapes the mean action. Demo rows (source 0)
    show +0.6, online rows (source 1) -0.6; the policy must go to +0.6."""
    torch.manual_seed(0)
    policy = make_policy(1, 1)
    algo = SAC(SACConfig(lr=3e-3, batch_size=64, bc_weight=1.0, bc_decay_updates=400, learn_alpha=False,
                         init_alpha=1e-3), policy)
    source = torch.arange(64) % 2
    action = torch.where(source == 0, 0.6, -0.6)[:, None]
    for _ in range(200):
        metrics = algo.update(mixed(torch.rand(64, 1) * 2 - 1, action, -torch.ones(64), source))
    assert algo.bc_weight() == pytest.approx(0.5)  # 200 of 400 actor steps: halfway down
    greedy = policy.mean_action(torch.linspace(-1, 1, 9)[:, None])
    assert (greedy - 0.6).abs().max() < 0.2, greedy.squeeze(-1)  # the online rows' -0.6 would be 1.2 away
    assert {"bc_mse", "bc_kept"} <= set(metrics) and float(metrics["bc_kept"]) == 1.0
    for _ in range(200):
        algo.update(mixed(torch.rand(64, 1) * 2 - 1, action, -torch.ones(64), source))
    assert algo.bc_weight() == 0.0 and "bc_mse" not in algo.update(mixed(torch.rand(64, 1), action, -torch.ones(64), source))
    assert "bc_mse" not in SAC(SACConfig(bc_weight=1.0), make_policy(1, 1)).update(batch(torch.rand(8, 1), action[:8], torch.zeros(8)))


@pytest.mark.parametrize("q_filter", [True, False])
def test_bc_q_filter_ignores_demos_the_critic_rates_below_the_policy(q_filter):
    """Bandit with reward -(a - 0.5)^2 and demos that always show -0.5 (a bad action): with the
    Q-filter the policy finds 0.5 and stops cloning; without it a heavy BC weight holds it near the demos."""
    torch.manual_seed(0)
    policy = make_policy(1, 1)
    algo = SAC(SACConfig(lr=5e-3, batch_size=128, bc_weight=5.0, bc_q_filter=q_filter), policy)
    source = torch.arange(128) % 2
    for _ in range(300):
        action = torch.where(source == 0, -0.5, torch.rand(128) * 2 - 1)[:, None]
        metrics = algo.update(mixed(torch.rand(128, 1), action, -(action - 0.5).square().squeeze(-1), source))
    greedy = policy.mean_action(torch.linspace(0, 1, 5)[:, None])
    if q_filter:
        assert (greedy - 0.5).abs().max() < 0.15 and float(metrics["bc_kept"]) < 0.1, (greedy.squeeze(-1), metrics)
    else:
        assert (greedy - 0.5).abs().min() > 0.4, greedy.squeeze(-1)


def test_bc_config_errors_name_the_key():
    with pytest.raises(ConfigError, match="bc_weight"):
        SACConfig(bc_weight=-1.0)
