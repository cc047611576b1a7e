"""PPO's optimizer wiring: a separate critic's own step size and the critic-only warm-up."""

import pytest
import torch

from embodied import registry
from embodied.algorithms.ppo import PPO
from embodied.config import ConfigError
from embodied.rollout import Collector


def rollout(seed=0):
    torch.manual_seed(seed)
    env = registry.build("env", "arm_reach", {}, num_envs=16, device="cpu")
    policy = registry.build("policy", "mlp", {}, observation_spec=env.observation_spec, action_spec=env.action_spec)
    collector = Collector(env, policy, steps=8)
    collector.reset(seed=seed)
    return policy, collector


def snapshot(module):
    return [p.detach().clone() for p in module.parameters()]


def changed(before, module):
    return any(not torch.equal(a, b) for a, b in zip(before, module.parameters()))


def test_critic_warmup_trains_the_critic_alone_then_both():
    policy, collector = rollout()
    algo = PPO(PPO.Config(critic_warmup=1, epochs=2, minibatches=2), policy)
    actor, critic, log_std = snapshot(policy.actor), snapshot(policy.critic), policy.log_std.detach().clone()
    lr = algo.lr
    algo.update(collector.collect())
    assert not changed(actor, policy.actor) and torch.equal(log_std, policy.log_std)  # the actor untouched
    assert changed(critic, policy.critic)
    assert algo.lr == lr  # no KL step while the actor stands still
    algo.update(collector.collect())
    assert changed(actor, policy.actor)
    assert PPO(PPO.Config(critic_warmup=1), policy).state_dict()["updates"] == 0
    restored = PPO(PPO.Config(critic_warmup=1), policy)
    restored.load_state_dict(algo.state_dict())
    assert restored.updates == 2  # a resumed run does not warm up again


def test_critic_lr_stays_fixed_while_the_kl_schedule_moves_the_actor_lr():
    policy, collector = rollout()
    algo = PPO(PPO.Config(lr=1e-2, critic_lr=3e-4, desired_kl=1e-6), policy)  # any real step exceeds 2x this KL
    actor_group, critic_group = algo.optimizer.param_groups
    assert {id(p) for p in critic_group["params"]} == {id(p) for p in policy.critic.parameters()}
    assert not {id(p) for p in actor_group["params"]} & {id(p) for p in critic_group["params"]}
    algo.update(collector.collect())
    assert actor_group["lr"] < 1e-2 and critic_group["lr"] == 3e-4


def test_critic_options_need_a_separate_critic():
    class NoCritic(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Linear(2, 2)

    with pytest.raises(ConfigError, match="critic_lr / algo.critic_warmup"):
        PPO(PPO.Config(critic_lr=1e-3), NoCritic())
    with pytest.raises(ConfigError, match="critic_warmup"):
        PPO.Config(critic_warmup=-1)
