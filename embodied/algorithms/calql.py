"""Cal-QL (Nakamoto et al. 2023, "Cal-QL: Calibrated Offline RL Pre-Training for Efficient Online
Fine-Tuning"): CQL (Kumar et al. 2020) whose conservative term is calibrated by Monte Carlo returns.

    algo = CalQL(config, policy)
    metrics = algo.update(batch)    # batch: transitions [B] with `mc_return` [B] (discounted return-to-go)

Critic loss = SAC's TD loss + cql_alpha * sum_e CQL(H)_e, where CQL(H) is the
importance-sampled logsumexp of Q over uniform and policy actions minus Q of the
data's actions (`cql_penalty`), and Cal-QL replaces Q(s, a ~ pi) inside it by
max(Q(s, a ~ pi), mc_return(s)) (`calibrate`). With an HL-Gauss critic
(policy.critic_bins) the TD term is its cross-entropy and the penalty acts on the
values read from its logits. The actor and temperature are SAC's. Defaults follow
the Cal-QL reference code's AntMaze/Adroit settings (built on JaxCQL): cql_alpha 5,
10 sampled actions per proposal, temperature 1, no entropy in the backup, actor lr
1e-4, critic lr 3e-4.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from tensordict import TensorDict

from embodied import keys
from embodied.algorithms.offpolicy_losses import calibrate, cql_penalty
from embodied.algorithms.sac import SAC, SACConfig
from embodied.config import check


@dataclass(frozen=True)
class CalQLConfig(SACConfig):
    actor_lr: float | None = 1e-4  # Cal-QL reference code policy_lr
    backup_entropy: bool = False  # JaxCQL / Cal-QL: no entropy term in the TD target
    cql_alpha: float = 5.0  # weight of the conservative term (Cal-QL cql_min_q_weight, AntMaze)
    num_samples: int = 10  # actions per proposal per state (CQL cql_n_actions)
    cql_temperature: float = 1.0  # logsumexp temperature (CQL cql_temp)
    calibrated: bool = True  # False: plain CQL(H)

    def __post_init__(self):
        super().__post_init__()
        check(self.cql_alpha >= 0, f"algo.cql_alpha={self.cql_alpha} must be >= 0")
        check(self.num_samples >= 1, f"algo.num_samples={self.num_samples} must be >= 1")
        check(self.cql_temperature > 0, f"algo.cql_temperature={self.cql_temperature} must be > 0")


class CalQL(SAC):
    Config = CalQLConfig

    def critic_regularizer(self, batch: TensorDict, q: torch.Tensor) -> tuple[torch.Tensor, dict]:
        cfg, policy = self.config, self.policy
        state, next_state = batch[keys.OBS][keys.STATE], batch[keys.NEXT_OBS][keys.STATE]
        b, k, a = state.shape[0], cfg.num_samples, policy.action_dim
        rep_state = state.repeat_interleave(k, 0)  # [B * K, D]
        with torch.no_grad():
            # uniform over the action box [center - scale, center + scale]
            random_action = torch.addcmul(policy.action_center, torch.rand(b * k, a, device=state.device) * 2.0 - 1.0,
                                          policy.action_scale)
            current_action, current_log_prob = policy.sample(rep_state)
            next_action, next_log_prob = policy.sample(next_state.repeat_interleave(k, 0))
        # all 3K proposals scored at s in one ensemble pass (next-state actions too, as in CQL)
        actions = torch.cat([random_action, current_action, next_action])
        q_sampled = policy.q(rep_state.repeat(3, 1), actions).view(-1, 3, b, k)  # [E, 3, B, K]
        q_random, q_current, q_next = q_sampled.unbind(1)
        if cfg.calibrated:
            if keys.MC_RETURN not in batch.keys():
                raise KeyError(f"Cal-QL needs '{keys.MC_RETURN}' (discounted return-to-go) in the batch; "
                               "set algo.calibrated=false for plain CQL")
            bound = batch[keys.MC_RETURN]
            q_current, q_next = calibrate(q_current, bound), calibrate(q_next, bound)
        log_density = torch.cat([
            (-(2.0 * policy.action_scale).log().sum()).expand(b, k),  # log of the uniform density on the box
            current_log_prob.view(b, k), next_log_prob.view(b, k),
        ], dim=-1)
        penalty = cql_penalty(q, torch.cat([q_random, q_current, q_next], -1), log_density, cfg.cql_temperature)
        metrics = {"cql_penalty": penalty.detach().mean(), "q_random": q_random.detach().mean(),
                   "q_policy": q_current.detach().mean()}
        return cfg.cql_alpha * penalty.sum(), metrics
