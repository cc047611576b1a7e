"""The critic-loss option (policy.critic_bins): a scalar MSE critic by default, HL-Gauss logits when set
(Farebrother et al. 2024), wired through one `CriticHead` into SAC, RLPD, IQL, Cal-QL and PPO."""

from __future__ import annotations

import copy
import re

import pytest
import torch
from tensordict import TensorDict
from torch.testing import assert_close

from embodied import keys, registry
from embodied.algorithms.advantages import gae
from embodied.algorithms.calql import CalQL, CalQLConfig
from embodied.algorithms.iql import IQL, IQLConfig
from embodied.algorithms.losses import CriticHead, hl_gauss_targets
from embodied.algorithms.offpolicy_losses import expectile_loss, soft_td_target
from embodied.algorithms.ppo import PPO, PPOConfig
from embodied.algorithms.sac import RLPD, SAC, SACConfig
from embodied.compose import compose
from embodied.config import ConfigError
from embodied.rollout import Collector
from embodied.specs import Spec
from policies.sac_mlp import SACPolicy, SACPolicyConfig

HL = {"critic_bins": 41, "critic_v_min": -5.0, "critic_v_max": 5.0}  # bin width 0.24


def sac_policy(**config):
    config = SACPolicyConfig(actor_hidden=(32, 32), critic_hidden=(32, 32), **config)
    return SACPolicy(config, {keys.STATE: Spec((2,))}, Spec((1,), torch.float32, -1.0, 1.0))


def transitions(n=64, reward=3.0, terminated=True, seed=1):
    g = torch.Generator().manual_seed(seed)
    state = torch.rand(n, 2, generator=g) * 2 - 1
    return TensorDict({
        keys.OBS: {keys.STATE: state}, keys.NEXT_OBS: {keys.STATE: torch.rand(n, 2, generator=g) * 2 - 1},
        keys.ACTION: torch.rand(n, 1, generator=g) * 2 - 1, keys.REWARD: torch.full((n,), reward),
        keys.TERMINATED: torch.full((n,), terminated), keys.MC_RETURN: torch.full((n,), reward),
    }, batch_size=[n])


def hl_cross_entropy(logits, target):
    """The HL-Gauss loss written out: sum over members of the batch mean of -sum_k p_k log softmax_k."""
    probs = hl_gauss_targets(target, HL["critic_v_min"], HL["critic_v_max"], HL["critic_bins"])
    return -(probs * logits.log_softmax(-1)).sum(-1).mean(-1).sum()


# ---------------------------------------------------------------- the head
def test_critic_head_reads_and_trains_both_kinds():
    mse = CriticHead()
    out = torch.tensor([[1.0], [3.0]])
    assert mse.outputs == 1 and torch.equal(mse.value(mse.prediction(out)), torch.tensor([1.0, 3.0]))
    assert_close(mse.loss(torch.tensor([1.0, 3.0]), torch.tensor([2.0, 2.0])), torch.tensor([0.5, 0.5]))
    hl = CriticHead(41, -5.0, 5.0)
    assert hl.outputs == 41
    target = torch.tensor([-2.0, 0.3, 4.0])
    logits = hl_gauss_targets(target, -5.0, 5.0, 41).clamp(min=1e-12).log()  # the target distribution itself
    assert_close(hl.value(logits), target, atol=1e-3, rtol=0)
    assert hl.loss(logits, target).shape == (3,)
    assert (hl.loss(logits, target) < hl.loss(logits.roll(1, 0), target)).all()  # lowest at its own target


@pytest.mark.parametrize("policy_name", ["sac_mlp", "mlp"])
@pytest.mark.parametrize("params, key", [
    ({"critic_bins": 1, "critic_v_min": 0.0, "critic_v_max": 1.0}, "policy.critic_bins=1"),
    ({"critic_bins": -2}, "policy.critic_bins=-2"),
    ({"critic_bins": 51, "critic_v_min": 1.0, "critic_v_max": 1.0}, "policy.critic_v_min=1.0 must be <"),
    ({"critic_bins": 51, "critic_v_min": 2.0, "critic_v_max": -2}, "policy.critic_v_min=2.0 must be <"),
    ({"critic_bins": 51}, "needs policy.critic_v_min and policy.critic_v_max"),
    ({"critic_v_min": -1.0, "critic_v_max": 1.0}, "set policy.critic_bins >= 2"),
])
def test_bad_critic_settings_are_refused_naming_the_key(policy_name, params, key):
    with pytest.raises(ConfigError, match=re.escape(key)):
        registry.build("policy", policy_name, params, observation_spec={keys.STATE: Spec((2,))},
                       action_spec=Spec((1,), torch.float32, -1.0, 1.0))


def test_the_keys_reach_the_composed_config():
    config = compose(["experiment=arm_reach_sac", "policy.critic_bins=51", "policy.critic_v_min=-60",
                      "policy.critic_v_max=40"])
    policy = registry.build("policy", "sac_mlp", {k: v for k, v in config["policy"].items() if k != "name"},
                            observation_spec={keys.STATE: Spec((2,))}, action_spec=Spec((1,), torch.float32, -1.0, 1.0))
    assert policy.critic_head == CriticHead(51, -60.0, 40.0)
    assert policy.q(torch.zeros(3, 2), torch.zeros(3, 1)).shape == (2, 3)
    assert policy.q_prediction(torch.zeros(3, 2), torch.zeros(3, 1)).shape == (2, 3, 51)


def test_default_critic_keeps_its_parameter_names_and_shapes():
    """Checkpoints of the MSE critic load as before; HL-Gauss widens only the last layer."""
    default, hl = sac_policy().state_dict(), sac_policy(**HL).state_dict()
    assert list(default) == list(hl)
    assert default["critic.weights.2"].shape == (2, 32, 1) and hl["critic.weights.2"].shape == (2, 32, 41)
    assert {k for k in default if default[k].shape != hl[k].shape} == {"critic.weights.2", "critic.biases.2"}


# ---------------------------------------------------------------- HL-Gauss trains each algorithm's critic
def fit(algo, data, updates):
    first = algo.update(data)
    for _ in range(updates):
        last = algo.update(data)
    return first, last


RLPD_CRITIC = {"num_critics": 10, "layer_norm": True}


@pytest.mark.parametrize("make, ensemble", [
    (lambda p: SAC(SACConfig(lr=3e-3, batch_size=64), p), {}),
    (lambda p: RLPD(RLPD.Config(lr=3e-3, batch_size=64), p), RLPD_CRITIC),
    (lambda p: IQL(IQLConfig(lr=3e-3, batch_size=64, value_hidden=(32,)), p), {}),
], ids=["sac", "rlpd", "iql"])
def test_hl_gauss_critic_fits_a_constant_target(make, ensemble):
    """One-step episodes paying 3: the TD target is 3 for every transition, the value read from the
    logits must reach it, and the reported loss must be the HL-Gauss cross-entropy of the logits."""
    torch.manual_seed(0)
    policy = sac_policy(**HL, **ensemble)
    algo, data = make(policy), transitions()
    state, action = data[keys.OBS][keys.STATE], data[keys.ACTION]
    expected_first = hl_cross_entropy(policy.q_prediction(state, action), torch.full((64,), 3.0)).detach()
    first, last = fit(algo, data, 150)
    assert_close(first["critic_loss"], expected_first)  # the update used the cross-entropy, not MSE
    q = policy.q(state, action)
    assert_close(q, torch.full_like(q, 3.0), atol=0.1, rtol=0)
    assert last["critic_loss"] < 0.5 * first["critic_loss"]


def test_hl_gauss_sac_bootstraps_through_the_logits():
    """Never terminating, reward 1, gamma 0.5, no entropy in the backup: Q* = 1 / (1 - 0.5) = 2 for every
    (s, a), reached only if the target critic's logits are read as values."""
    torch.manual_seed(0)
    policy = sac_policy(**HL)
    algo = SAC(SACConfig(lr=3e-3, gamma=0.5, tau=0.1, batch_size=64, backup_entropy=False), policy)
    data = transitions(reward=1.0, terminated=False)
    fit(algo, data, 300)
    q = policy.q(data[keys.OBS][keys.STATE], data[keys.ACTION])
    assert_close(q, torch.full_like(q, 2.0), atol=0.15, rtol=0)


def test_hl_gauss_calql_fits_its_td_term():
    """Cal-QL's loss is the HL-Gauss TD term plus the conservative penalty on the values read from the
    logits; calibrated at the Monte Carlo return 3 = the target, the data's Q still settles near 3."""
    torch.manual_seed(0)
    policy = sac_policy(**HL)
    algo = CalQL(CalQLConfig(lr=3e-3, batch_size=64, num_samples=4), policy)
    data = transitions()
    state, action = data[keys.OBS][keys.STATE], data[keys.ACTION]
    target = torch.full((64,), 3.0)
    td_first = hl_cross_entropy(policy.q_prediction(state, action), target).detach()
    first, last = fit(algo, data, 150)
    td_last = hl_cross_entropy(policy.q_prediction(state, action), target).detach()
    # reported loss = TD cross-entropy + cql_alpha * sum over the 2 members of the penalty
    assert_close(first["critic_loss"], td_first + 5.0 * 2 * first["cql_penalty"], rtol=1e-5, atol=1e-5)
    assert td_last < 0.5 * td_first
    q = policy.q(state, action)
    assert_close(q, torch.full_like(q, 3.0), atol=0.3, rtol=0)


# ---------------------------------------------------------------- the MSE default: the plain formula
def plain_mse(q, target):
    return 0.5 * (q - target).square().mean(-1).sum()


@pytest.mark.parametrize("cls", [SAC, RLPD, CalQL])
def test_mse_default_is_the_plain_squared_error(cls):
    torch.manual_seed(0)
    policy = sac_policy(**(RLPD_CRITIC if cls is RLPD else {}))
    algo = cls(cls.Config(batch_size=64), policy)
    data = transitions(reward=0.5, terminated=False)
    data[keys.TERMINATED][::3] = True
    for _ in range(3):
        rng = torch.get_rng_state()
        # the same random draws in the same order as critic_step: next actions (and the REDQ subset), then
        # Cal-QL's sampled actions
        target = algo.td_target(data)
        q = policy.q(data[keys.OBS][keys.STATE], data[keys.ACTION])
        expected = plain_mse(q, target)
        if cls is CalQL:
            extra, _ = algo.critic_regularizer(data, q)
            expected = expected + extra
        torch.set_rng_state(rng)
        metrics = algo.update(data)
        assert torch.equal(metrics["critic_loss"], expected.detach())


def test_mse_default_is_the_plain_squared_error_iql():
    torch.manual_seed(0)
    policy = sac_policy()
    algo = IQL(IQLConfig(batch_size=64, value_hidden=(32,)), policy)
    data = transitions(reward=0.5, terminated=False)
    state, action, next_state = data[keys.OBS][keys.STATE], data[keys.ACTION], data[keys.NEXT_OBS][keys.STATE]
    for _ in range(3):
        twin = copy.deepcopy(algo)  # its V step by hand, then the plain loss of its Q
        with torch.no_grad():
            q_target = twin.target_critic(torch.cat([state, action], -1)).squeeze(-1).amin(0)
        v_loss = expectile_loss(q_target - twin.value_net(state).squeeze(-1), twin.config.expectile)
        twin.value_optimizer.zero_grad()
        v_loss.backward()
        twin.value_optimizer.step()
        with torch.no_grad():
            target = soft_td_target(data[keys.REWARD], data[keys.TERMINATED], twin.value_net(next_state).squeeze(-1),
                                    twin.config.gamma)
        expected = plain_mse(twin.policy.q(state, action), target)
        metrics = algo.update(data)
        assert torch.equal(metrics["critic_loss"], expected.detach())


# ---------------------------------------------------------------- PPO's value head
def ppo_rollout(policy_params, seed=0):
    torch.manual_seed(seed)
    env = registry.build("env", "arm_reach", {}, num_envs=16, device="cpu")
    policy = registry.build("policy", "mlp", policy_params, observation_spec=env.observation_spec,
                            action_spec=env.action_spec)
    collector = Collector(env, policy, steps=8)
    collector.reset(seed=seed)
    return policy, collector.collect()


def test_mse_default_ppo_value_loss_is_the_plain_clipped_squared_error():
    policy, batch = ppo_rollout({})
    cfg = PPOConfig(epochs=1, minibatches=1, desired_kl=None)
    _, ret = gae(batch[keys.REWARD], batch[keys.VALUE], batch["next_value"], batch[keys.TERMINATED].float(),
                 batch[keys.DONE].float(), cfg.gamma, cfg.lam)
    with torch.no_grad():
        _, _, value = policy.evaluate(batch[keys.OBS], batch[keys.ACTION])
    old = batch[keys.VALUE]
    clipped = old + (value - old).clamp(-cfg.value_clip, cfg.value_clip)
    expected = 0.5 * torch.maximum((value - ret).square(), (clipped - ret).square()).mean()
    metrics = PPO(cfg, policy).update(batch)
    assert_close(torch.tensor(metrics["value_loss"]), expected, rtol=1e-6, atol=0)  # one minibatch, shuffled


def test_hl_gauss_mlp_policy_reads_one_value_everywhere():
    policy, batch = ppo_rollout(HL)
    obs = batch[keys.OBS][0]
    out = policy.act(obs)
    _, _, logits = policy.evaluate(obs, out.action)
    assert logits.shape == (16, 41) and out.value.shape == (16,)
    assert_close(out.value, policy.critic_head.value(logits))
    assert_close(policy.value(obs), out.value)


def test_hl_gauss_ppo_value_head_fits_constant_returns():
    """Every step terminates paying 2: the return is 2 everywhere, and the value read from the logits
    must reach it; the first update's value loss must be the cross-entropy of the logits."""
    policy, batch = ppo_rollout(HL)
    batch[keys.REWARD] = torch.full_like(batch[keys.REWARD], 2.0)
    batch[keys.TERMINATED] = torch.ones_like(batch[keys.TERMINATED])
    batch[keys.DONE] = torch.ones_like(batch[keys.DONE])
    algo = PPO(PPOConfig(value_clip=None, epochs=1, minibatches=1, desired_kl=None, lr=3e-3), policy)
    with torch.no_grad():
        _, _, logits = policy.evaluate(batch[keys.OBS], batch[keys.ACTION])
    probs = hl_gauss_targets(torch.full(logits.shape[:-1], 2.0), -5.0, 5.0, 41)
    expected_first = -(probs * logits.log_softmax(-1)).sum(-1).mean()
    first = algo.update(batch)
    assert_close(torch.tensor(first["value_loss"]), expected_first, rtol=1e-5, atol=0)
    for _ in range(60):
        last = algo.update(batch)
    value = policy.value(batch[keys.OBS])
    assert_close(value, torch.full_like(value, 2.0), atol=0.15, rtol=0)
    assert last["value_loss"] < 0.5 * first["value_loss"]


def test_ppo_refuses_value_clipping_of_an_hl_gauss_critic():
    policy, _ = ppo_rollout(HL)
    with pytest.raises(ConfigError, match="algo.value_clip=0.2 .* set algo.value_clip=null"):
        PPO(PPOConfig(), policy)
