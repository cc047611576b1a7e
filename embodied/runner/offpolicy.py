"""The off-policy loop: collect -> extend replay -> `utd_ratio` updates per transition, reading top to bottom.

    loop = OffPolicyLoop(env, policy, algo, online_buffer, sampler, stage_config, eval_env, seed)
    loop.run(total_env_steps, on_eval)      # calls on_eval(record) every eval_every env steps

Each collect steps every env once (N transitions, with the true next
observation); after the warm-up, N * utd_ratio gradient steps follow on the
update-to-data schedule the correction session's learner uses too
(embodied/algorithms/utd.py: RLPD, Ball et al. 2023, Alg. 1). Before
`random_steps` actions are uniform (online RL from scratch, as SAC and RLPD
start); during `warmup_steps` the pretrained policy acts but nothing is updated
(WSRL, Zhou et al. 2024, "Efficient Online RL Fine-Tuning Need Not Retain Offline
Data", Sec. 5: warm-up rollouts re-seed the buffer before online updates).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

import torch
from tensordict import TensorDict

from embodied.algorithms.utd import UpdateSchedule
from embodied.config import check
from embodied.data.replay import ReplayBuffer, transitions_from_rollout
from embodied.envs import VecEnv
from embodied.policy import ActOutput, Policy
from embodied.rollout import Collector
from embodied.runner.evaluate import eval_seed, evaluate
from embodied.runner.trainer import whole_budget


# the named online-stage settings: share of each batch from the offline data, warm-up env steps before updates
RECIPES = {
    # RLPD (Ball et al. 2023): offline and online data sampled 50/50 in every batch, updates from the first step
    "rlpd": {"offline_fraction": 0.5, "warmup_steps": 0},
    # WSRL (Zhou et al. 2024, "Efficient Online RL Fine-Tuning Need Not Retain Offline Data", Sec. 5): no offline
    # data retained; 5,000 env steps of the pretrained policy's own rollouts re-seed the buffer before any update
    "wsrl": {"offline_fraction": 0.0, "warmup_steps": 5_000},
}


@dataclass(frozen=True)
class OnlineConfig:
    """The online stage of a pipeline (the off-policy loop)."""

    recipe: str | None = None  # a named setting (RECIPES: rlpd, wsrl) that fills the two fields below when unset
    # share of each batch drawn from the offline data (RLPD 0.5; WSRL 0); 0 = online only, as without demos
    offline_fraction: float | None = None  # None: the recipe's, else 0.0
    random_steps: int = 0  # env steps of uniform random actions first (SAC from scratch: 5,000 in SB3's zoo)
    warmup_steps: int | None = None  # env steps of pretrained-policy rollouts before any update; None: the recipe's, else 0
    # first updates that train the critic only, the actor frozen: on arm reach, online updates from a fresh
    # critic unlearned a behaviour-cloned policy within 2k env steps (48% -> 2% success) before relearning
    critic_warmup_updates: int = 0
    buffer_capacity: int = 1_000_000  # online replay size (SAC paper Table 1: 10^6)
    eval_every: int = 2_000  # env steps between evaluations (the learning curve)
    eval_episodes: int = 100  # deterministic episodes per evaluation

    def __post_init__(self):
        check(self.recipe is None or self.recipe in RECIPES,
              f"pipeline.online.recipe={self.recipe!r}: choose one of {', '.join(RECIPES)} (or leave it unset)")
        named = RECIPES.get(self.recipe, {"offline_fraction": 0.0, "warmup_steps": 0})
        for key, value in named.items():
            if getattr(self, key) is None:
                object.__setattr__(self, key, value)  # frozen: the recipe's value, once, at construction
        check(not (self.recipe == "wsrl" and self.offline_fraction),
              f"pipeline.online.recipe=wsrl retains no offline data: offline_fraction={self.offline_fraction} must be 0")
        check(0.0 <= self.offline_fraction <= 1.0, f"online.offline_fraction={self.offline_fraction} must be in [0, 1]")
        check(min(self.random_steps, self.warmup_steps, self.critic_warmup_updates) >= 0,
              "online.random_steps, warmup_steps and critic_warmup_updates must be >= 0")
        check(self.buffer_capacity >= 1, "online.buffer_capacity must be >= 1")
        check(self.eval_every >= 1 and self.eval_episodes >= 1, "online.eval_every and eval_episodes must be >= 1")


class UniformPolicy(Policy):
    """Uniform random actions in the action spec's box, for the first `random_steps`."""

    def __init__(self, low: float, high: float, shape: tuple[int, ...], device: torch.device):
        super().__init__()
        self.low, self.high, self.shape, self.device = low, high, shape, device

    def act(self, obs: TensorDict, deterministic: bool = False) -> ActOutput:
        n = obs.batch_size[0]
        action = torch.rand((n, *self.shape), device=self.device) * (self.high - self.low) + self.low
        zeros = torch.zeros(n, device=self.device)
        return ActOutput(action, zeros, zeros, {})

    def value(self, obs: TensorDict) -> torch.Tensor:
        return torch.zeros(obs.batch_size[0], device=self.device)


class OffPolicyLoop:
    def __init__(self, env: VecEnv, policy: Policy, algo: Any, buffer: ReplayBuffer, sampler: Any,
                 config: OnlineConfig, eval_env: VecEnv, seed: int):
        self.env, self.policy, self.algo, self.buffer, self.sampler = env, policy, algo, buffer, sampler
        self.config, self.eval_env, self.seed = config, eval_env, seed
        spec = env.action_spec
        self.random_policy = UniformPolicy(spec.low, spec.high, spec.shape, env.device)
        self.collector = Collector(env, policy, steps=1, keep_next_obs=True)
        self.generator = torch.Generator(device="cpu").manual_seed(seed)
        self.schedule = UpdateSchedule(algo.config.utd_ratio, config.critic_warmup_updates)
        self.env_steps, self.train_time = 0, 0.0
        self._metrics: dict[str, tuple[torch.Tensor, int]] = {}

    def run(self, total_env_steps: int, on_eval: Callable[[dict], None]) -> None:
        cfg, algo = self.config, self.algo
        total_env_steps = whole_budget(total_env_steps, self.env.num_envs, "train.num_envs (one step each per collect)")
        batch_size = algo.config.batch_size
        if self.collector.obs is None:
            self.collector.reset(seed=self.seed)
        next_eval = (self.env_steps // cfg.eval_every + 1) * cfg.eval_every
        if self.env_steps == 0:
            on_eval(self.evaluate())  # the curve starts where the previous stage left the policy
        while self.env_steps < total_env_steps:
            start = time.perf_counter()
            self.collector.policy = self.random_policy if self.env_steps < cfg.random_steps else self.policy
            rollout = self.collector.collect()  # [1, N]
            self.buffer.extend(transitions_from_rollout(rollout))
            self.env_steps += rollout.numel()
            if self.env_steps > cfg.random_steps + cfg.warmup_steps and len(self.buffer) >= batch_size:
                self.schedule.pay(rollout.numel())
                for actor in self.schedule.due():
                    self._accumulate(algo.update(self.sampler.sample(batch_size, self.generator), update_actor=actor))
            self.train_time += time.perf_counter() - start
            if self.env_steps >= next_eval or self.env_steps >= total_env_steps:
                next_eval += cfg.eval_every
                on_eval(self.evaluate())

    def evaluate(self) -> dict[str, Any]:
        result = evaluate(self.policy, self.eval_env, seed=eval_seed(self.seed))
        record = {"env_steps": self.env_steps, "updates": self.schedule.updates, "time": round(self.train_time, 3)}
        record.update({f"eval/{k}": v for k, v in result.items()})
        record.update({f"train/{k}": v for k, v in self.collector.pop_episode_stats().items()})
        record.update({f"algo/{k}": float(total) / count for k, (total, count) in self._metrics.items()})
        self._metrics = {}
        return record

    def _accumulate(self, metrics: dict[str, torch.Tensor]) -> None:
        # per-key sums and counts: actor metrics come once per utd_ratio critic steps
        for k, v in metrics.items():
            total, count = self._metrics.get(k, (0.0, 0))
            self._metrics[k] = (total + v.detach(), count + 1)

    def state_dict(self) -> dict:
        return {"env_steps": self.env_steps, "train_time": self.train_time, **self.schedule.state_dict(),
                "collector": self.collector.state_dict(),
                "buffer": self.buffer.state_dict(), "generator": self.generator.get_state(),
                "torch_rng": torch.get_rng_state(), "algo": self.algo.state_dict(), **self._env_state()}

    def _env_state(self) -> dict:
        try:
            return {"env": self.env.get_state()}
        except NotImplementedError:
            return {}  # snapshots are optional (embodied/envs.py): a resumed loop starts from a fresh reset

    def load_state_dict(self, state: dict) -> None:
        device = self.env.device
        self.env_steps, self.train_time = state["env_steps"], state["train_time"]
        self.schedule.load_state_dict(state)
        if "env" in state:
            self.env.set_state({k: v.to(device) for k, v in state["env"].items()})
            self.collector.load_state_dict({k: v.to(device) for k, v in state["collector"].items()})
        else:
            seed = self.seed + self.env_steps
            print(f"resuming without the envs' state ({type(self.env).__name__} has no snapshots): "
                  f"episodes start over from a reset with seed {seed}", flush=True)
            self.collector.reset(seed=seed)
        self.buffer.load_state_dict(state["buffer"])
        self.generator.set_state(state["generator"])
        torch.set_rng_state(state["torch_rng"])
        self.algo.load_state_dict(state["algo"])
