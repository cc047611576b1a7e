"""IQL: Implicit Q-Learning (Kostrikov, Nair and Levine 2021, "Offline RL with Implicit Q-Learning").

    algo = IQL(config, policy)              # policy: an actor-critic (policies/sac_mlp.py)
    metrics = algo.update(batch)            # batch: TensorDict [B] of dataset transitions

Never queries the critic on actions outside the data:
    V   <- expectile_tau( min_e Q_target(s, a) - V(s) )                  (eq. 5)
    Q_e <- r + gamma (1 - terminated) V(s')                              (eq. 6)
    pi  <- max  E[ exp(beta (Q_target(s, a) - V(s))) log pi(a|s) ]      (eq. 7, AWR)
With window batches (reward [B, H], `mask` [B, H] True on the steps taken,
`next_obs` the observation after the window) the Q backup is the chunked TD
target of CO-RFT (`chunked_td_target`): Q scores the whole chunk when the
policy's action is the flattened chunk [B, H * A], else it is the in-sample
n-step backup of the window's first action. The V network
lives here (the policy carries only actor and Q) and stays a scalar regressed by
the expectile loss; the Q critic is trained and read through the policy's
`critic_head` (MSE, or HL-Gauss with policy.critic_bins). Defaults are the paper's
MuJoCo locomotion settings (Appendix B): tau 0.7, beta 3, lr 3e-4, Polyak 0.005.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from tensordict import TensorDict
from torch import nn

from embodied import keys
from embodied.algorithms.offpolicy_losses import (
    awr_weights,
    critic_loss,
    expectile_loss,
    polyak_update,
)
from embodied.algorithms.sac import backup, check_actor_critic, finite, transition
from embodied.config import check
from embodied.policy import Policy


@dataclass(frozen=True)
class IQLConfig:
    lr: float = 3e-4  # actor, Q and V Adam step (IQL Appendix B)
    gamma: float = 0.99  # IQL Appendix B
    tau: float = 0.005  # target-Q Polyak rate (IQL Appendix B)
    expectile: float = 0.7  # IQL: 0.7 on MuJoCo locomotion, 0.9 on AntMaze
    beta: float = 3.0  # AWR inverse temperature: 3 on locomotion, 10 on AntMaze
    max_weight: float = 100.0  # clip on exp(beta * A) (IQL reference code)
    batch_size: int = 256  # IQL Appendix B
    utd_ratio: float = 1.0  # gradient steps per collected transition when fine-tuning online
    value_hidden: tuple[int, ...] = (256, 256)  # V network widths (IQL: 2 x 256)

    def __post_init__(self):
        check(self.lr > 0, f"algo.lr={self.lr} must be > 0")
        check(0 < self.gamma <= 1 and 0 < self.tau <= 1, "algo.gamma and algo.tau must be in (0, 1]")
        check(0 < self.expectile < 1, f"algo.expectile={self.expectile} must be in (0, 1)")
        check(self.beta >= 0 and self.max_weight > 0, "algo.beta must be >= 0 and algo.max_weight > 0")
        check(self.batch_size >= 1 and self.utd_ratio > 0, "algo.batch_size must be >= 1 and algo.utd_ratio > 0")
        check(len(self.value_hidden) > 0 and all(w > 0 for w in self.value_hidden), "algo.value_hidden needs positive widths")


def value_network(in_dim: int, hidden: tuple[int, ...]) -> nn.Sequential:
    layers: list[nn.Module] = []
    sizes = [in_dim, *hidden]
    for i in range(len(sizes) - 1):
        layers += [nn.Linear(sizes[i], sizes[i + 1]), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(sizes[-1], 1))


class IQL:
    Config = IQLConfig
    needs_replay = True  # trained from transitions sampled from replay, not from fresh rollouts

    def __init__(self, config: IQLConfig, policy: Policy):
        check_actor_critic(policy, "iql")
        self.config, self.policy = config, policy
        device = next(policy.parameters()).device
        self.value_net = value_network(policy.state_dim, config.value_hidden).to(device)
        self.target_critic = copy.deepcopy(policy.critic).requires_grad_(False)
        self.actor_optimizer = torch.optim.Adam(policy.actor_params(), lr=config.lr, fused=True)
        self.critic_optimizer = torch.optim.Adam(policy.critic_params(), lr=config.lr, fused=True)
        self.value_optimizer = torch.optim.Adam(self.value_net.parameters(), lr=config.lr, fused=True)
        self._critic_params = policy.critic_params()
        self._target_params = list(self.target_critic.parameters())

    def update(self, batch: TensorDict, update_actor: bool = True) -> dict[str, torch.Tensor]:
        cfg, policy = self.config, self.policy
        state, action, _, next_state, _ = transition(batch)
        head = policy.critic_head
        with torch.no_grad():
            q_target = head.value(head.prediction(self.target_critic(torch.cat([state, action], -1)))).amin(0)  # [B]
        # V: an upper expectile of the data's Q values
        value = self.value_net(state).squeeze(-1)
        v_loss = expectile_loss(q_target - value, cfg.expectile)
        finite(v_loss, "value")
        self._step(self.value_optimizer, v_loss)
        # Q: one-step (or chunked) backup through V, never through pi
        with torch.no_grad():
            target = backup(batch, self.value_net(next_state).squeeze(-1), cfg.gamma)
        prediction = policy.q_prediction(state, action)
        q = head.value(prediction)
        q_loss = critic_loss(prediction, target, head)
        finite(q_loss, "critic")
        self._step(self.critic_optimizer, q_loss)
        polyak_update(self._target_params, self._critic_params, cfg.tau)
        metrics = {"value_loss": v_loss.detach(), "critic_loss": q_loss.detach(), "q": q.detach().mean(),
                   "value": value.detach().mean()}
        if update_actor:
            weights = awr_weights(q_target - value.detach(), cfg.beta, cfg.max_weight)
            actor_loss = -(weights * policy.log_prob(state, action)).mean()
            finite(actor_loss, "actor")
            self._step(self.actor_optimizer, actor_loss)
            metrics.update({"actor_loss": actor_loss.detach(), "awr_weight": weights.mean()})
        return metrics

    @staticmethod
    def _step(optimizer: torch.optim.Optimizer, loss: torch.Tensor) -> None:
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    def state_dict(self) -> dict:
        return {
            "value_net": self.value_net.state_dict(), "target_critic": self.target_critic.state_dict(),
            "actor_optimizer": self.actor_optimizer.state_dict(), "critic_optimizer": self.critic_optimizer.state_dict(),
            "value_optimizer": self.value_optimizer.state_dict(),
        }

    def load_state_dict(self, state: dict) -> None:
        self.value_net.load_state_dict(state["value_net"])
        self.target_critic.load_state_dict(state["target_critic"])
        for name in ("actor_optimizer", "critic_optimizer", "value_optimizer"):
            getattr(self, name).load_state_dict(state[name])
