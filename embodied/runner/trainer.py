"""The training loop: collect -> update -> log -> checkpoint, reading top to bottom.

    trainer = Trainer(config, run_dir)      # config: the resolved run config (plain dict)
    summary = trainer.learn()               # trains, checkpoints, evaluates, plots

One loop for robots and language agents: PPO on env steps (Collector), GRPO/RLOO on groups of episodes
from identical starts (GroupCollector on a VecEnv, TextCollector on a text env: embodied/text_rollout.py),
PPO with a per-token critic on a text env's whole episodes (TextCollector, one episode per instance).
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from embodied.algorithms.losses import NonFiniteLossError
from embodied.build import make_algo, make_env, make_policy, needs
from embodied.config import ConfigError, build_config, check
from embodied.device import resolve_device
from embodied.rollout import Collector
from embodied.runner import checkpoint, collect_ahead, init_from
from embodied.runner.collectors import collector_kind, make_local_collector
from embodied.runner.evaluate import eval_seed, evaluate
from embodied.runner.logger import RunLogger, plot_curve, truncate_metrics
from embodied.text_env import TextEnv, instance_seed
from embodied.text_rollout import evaluate_text


@dataclass(frozen=True)
class TrainConfig:
    num_envs: int = 4096  # parallel envs in the training VecEnv
    rollout_steps: int = 16  # steps per env per update (rsl_rl num_steps_per_env uses 24 for legged robots)
    total_env_steps: int = 10_000_000  # stop after this many env steps (0: a pipeline that ends after its offline stages)
    max_seconds: float | None = None  # also stop after this much training wall time (not reproducible); None = off
    checkpoint_every: int = 50  # iterations between checkpoints (and at the end)
    eval_episodes: int = 1000  # episodes of the final deterministic evaluation; 0 = skip
    eval_every: int = 0  # iterations between deterministic evaluations during training (a success curve); 0 = final only
    eval_at_start: bool = False  # also evaluate before the first update: the curve starts at the base rate
    # evaluation acts with the policy's mean action / greedy reply; false: samples (a language agent at its
    # sampling temperature, from a fixed seed)
    eval_deterministic: bool = True
    progress: bool = True  # live progress bar on a terminal
    # PPO: collect the next rollout in a second process while the update runs (embodied/runner/collect_ahead.py); each
    # batch then comes from the weights one update old, which PPO corrects for (decoupled PPO). On CPU with threads=1,
    # 2+ cores, cluster=local and an env marked VecEnv.fork_safe; elsewhere a notice, and the collection runs here
    collect_ahead: bool = False

    def __post_init__(self):
        check(self.num_envs >= 1, f"train.num_envs={self.num_envs} must be >= 1")
        check(self.rollout_steps >= 1, f"train.rollout_steps={self.rollout_steps} must be >= 1")
        check(self.total_env_steps >= 0, f"train.total_env_steps={self.total_env_steps} must be >= 0")
        check(self.max_seconds is None or self.max_seconds > 0, "train.max_seconds must be > 0 or null")
        check(self.checkpoint_every >= 1, "train.checkpoint_every must be >= 1")
        check(self.eval_episodes >= 0, "train.eval_episodes must be >= 0")
        check(self.eval_every >= 0, f"train.eval_every={self.eval_every} must be >= 0")
        check(not self.eval_every or self.eval_episodes, "train.eval_every needs train.eval_episodes > 0")
        check(not self.eval_at_start or self.eval_episodes, "train.eval_at_start needs train.eval_episodes > 0")


# what a resumed run may change of its config: its budget (more env steps or seconds: a finished run goes on) and
# whether it draws a progress bar; the rest is the run's own (`embodied train resume=<run> train.total_env_steps=N`)
RESUMABLE = ("total_env_steps", "max_seconds", "progress")


def with_budget(config: dict, budget: dict | None) -> dict:
    """`config` with the train.* settings of `budget` (RESUMABLE keys) in place of its own."""
    budget = budget or {}
    check(set(budget) <= set(RESUMABLE), f"a resumed run can change only train.{', train.'.join(RESUMABLE)}, not "
          f"{sorted(budget)}")
    return {**config, "train": {**config["train"], **budget}}


def whole_budget(total: int, step: int, unit: str) -> int:
    """The env steps a loop that advances `step` at a time trains for a budget of `total` (at least `total`):
    a one-line notice when that is more."""
    steps = -(-total // step) * step
    if steps != total:
        print(f"notice: train.total_env_steps={total:,} is not a multiple of {unit} = {step:,}; "
              f"training {steps:,} env steps", flush=True)
    return steps


def make_collector(env, policy, algo, cfg: TrainConfig, config: dict | None = None):
    """The collector the algorithm needs (embodied/runner/collectors.py); with `cluster=ray` in the run `config`,
    the same collector on Ray workers (embodied/distributed)."""
    cluster = (config or {}).get("cluster") or {"name": "local"}
    if cfg.collect_ahead:
        check(collector_kind(env, policy, algo) is Collector, f"train.collect_ahead=true collects env steps ahead for "
              f"PPO; algo={type(algo).__name__.lower()} on {type(env).__name__} collects otherwise: set it to false")
        if reason := collect_ahead.unavailable(env, cluster["name"]):
            print(f"notice: train.collect_ahead=true {reason}; this run collects in its own process", flush=True)
        else:
            return collect_ahead.AheadCollector(Collector(env, copy.deepcopy(policy), cfg.rollout_steps), policy)
    if cluster["name"] != "ray":
        return make_local_collector(env, policy, algo, cfg.num_envs, cfg.rollout_steps)
    from embodied.distributed.collector import ClusterConfig, RayCollector

    settings = build_config(ClusterConfig, {k: v for k, v in cluster.items() if k != "name"}, "cluster")
    return RayCollector(config, settings, policy, collector_kind(env, policy, algo), cfg.num_envs, cfg.rollout_steps,
                        env)


class Trainer:
    def __init__(self, config: dict[str, Any], run_dir: Path):
        self.config = config
        self.run_dir = Path(run_dir)
        self.cfg = build_config(TrainConfig, config["train"], "train")
        check(not config.get("data"), f"data={config.get('data')} feeds a pipeline's stages (bc, offline, online "
              "mixing); this run has none: use an experiment with a `pipeline` section, e.g. experiment=arm_reach_o2o")
        check(isinstance(config["seed"], int), f"seed={config['seed']!r} must be an int")
        check(self.cfg.total_env_steps >= 1, "train.total_env_steps=0 trains nothing: on-policy training needs >= 1")
        torch.set_num_threads(int(config["threads"]))
        torch.manual_seed(config["seed"])
        self.device = resolve_device(config["device"])
        self.env = make_env(config, self.cfg.num_envs, self.device)
        self.policy = make_policy(config, self.env)
        if config.get("init_from"):  # a new run from trained weights: the run's config keeps the checkpoint's path
            self.config = {**config, "init_from": str(init_from.load(self.policy, config))}
        if needs(config["algo"]["name"], "needs_replay"):
            raise ConfigError(
                f"algo={config['algo']['name']} learns from a replay buffer, which this on-policy loop does not keep; "
                "the off-policy loop trains it (runner_class(config) picks Pipeline, as `embodied train` does)"
            )
        self.algo = make_algo(config["algo"], self.policy)
        self.collector = make_collector(self.env, self.policy, self.algo, self.cfg, self.config)
        self.iteration, self.env_steps, self.train_time = 0, 0, 0.0
        self.eval_envs: dict[int, Any] = {}  # evaluation envs by number of episodes
        # the loop's random stream (action noise, minibatch order) starts here, whatever runs in between
        self.rng_state = torch.get_rng_state()

    # --- the loop -------------------------------------------------------------------------
    def learn(self) -> dict[str, Any]:
        cfg = self.cfg
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if self.iteration == 0:
            self.collector.reset(seed=self.config["seed"])
        torch.set_rng_state(self.rng_state)
        total = cfg.total_env_steps  # group rollouts take as many steps as their episodes last
        if isinstance(self.collector, (Collector, collect_ahead.AheadCollector)):
            total = whole_budget(total, cfg.num_envs * cfg.rollout_steps, "train.num_envs x rollout_steps")
        logger = RunLogger(self.run_dir, total, self.env_steps, cfg.progress)
        if cfg.eval_at_start and self.iteration == 0:
            result = self.evaluate(cfg.eval_episodes)
            logger.log({"iteration": 0, "env_steps": 0, "time": 0.0, **{f"eval/{k}": v for k, v in result.items()}})
        try:
            while self.env_steps < total and (cfg.max_seconds is None or self.train_time < cfg.max_seconds):
                start = time.perf_counter()
                batch = self.collector.collect()
                collected = time.perf_counter()
                metrics = self.algo.update(batch)
                self.policy.observe(batch["obs"])
                end = time.perf_counter()
                self.train_time += end - start
                self.iteration += 1
                steps = self.collector.count(batch)
                self.env_steps += steps
                record = {"iteration": self.iteration, "env_steps": self.env_steps, "time": round(self.train_time, 4)}
                # where the iteration's seconds went: collecting (or waiting for a batch collected ahead), updating
                record.update({"fps": steps / (end - start), "time/collect": round(collected - start, 4),
                               "time/update": round(end - collected, 4)})
                record.update({f"train/{k}": v for k, v in self.collector.pop_episode_stats().items()})
                record.update({f"algo/{k}": v for k, v in metrics.items()})
                if cfg.eval_every and self.iteration % cfg.eval_every == 0:
                    record.update({f"eval/{k}": v for k, v in self.evaluate(cfg.eval_episodes).items()})
                logger.log(record)
                if self.iteration % cfg.checkpoint_every == 0:
                    self.save("latest")
        except NonFiniteLossError as err:
            logger.close()
            last = self.run_dir / "checkpoints" / "latest"
            kept = f"the last good checkpoint is {last}" if last.exists() else "no checkpoint was written yet"
            raise NonFiniteLossError(f"stopped at iteration {self.iteration + 1}: {err}; {kept}") from err
        finally:
            if hasattr(self.collector, "close"):  # Ray workers (cluster=ray) end with the loop
                self.collector.close()
        self.save("latest")
        self.save("final")
        summary = {"run_dir": str(self.run_dir), "env_steps": self.env_steps, "train_seconds": self.train_time}
        if self.config.get("init_from"):
            summary["init_from"] = self.config["init_from"]
        if cfg.eval_episodes:
            result = self.evaluate(cfg.eval_episodes)
            logger.log({"iteration": self.iteration, "env_steps": self.env_steps, "time": self.train_time,
                        **{f"eval/{k}": v for k, v in result.items()}})
            summary.update({f"eval/{k}": v for k, v in result.items()})
        logger.close()
        plot_curve(self.run_dir, title=f"{self.config['name']} seed {self.config['seed']}")
        return summary

    def evaluate(self, episodes: int) -> dict[str, float]:
        rng = torch.get_rng_state()  # evaluating mid-run leaves the training's random stream as it was
        if episodes not in self.eval_envs:  # built once: train.eval_every evaluates many times
            self.eval_envs[episodes] = make_env(self.config, episodes, self.device)
        if isinstance(self.env, TextEnv):  # the held-out split's first instances: the same for every run
            result = evaluate_text(self.collector.synced_sampler(), self.eval_envs[episodes],
                                   [instance_seed("heldout", i) for i in range(episodes)], self.cfg.eval_deterministic)
        else:
            result = evaluate(self.policy, self.eval_envs[episodes], seed=eval_seed(self.config["seed"]),
                              deterministic=self.cfg.eval_deterministic)
        torch.set_rng_state(rng)
        return result

    # --- checkpoints ----------------------------------------------------------------------
    def save(self, name: str) -> Path:
        path = self.run_dir / "checkpoints" / name
        trainer_state = {
            "iteration": self.iteration, "env_steps": self.env_steps, "train_time": self.train_time,
            "algo": self.algo.state_dict(), "collector": self.collector.state_dict(),
            "torch_rng": torch.get_rng_state(),
        }
        try:
            if isinstance(self.collector, Collector):  # group rollouts reset the env each time: nothing to keep
                trainer_state["env"] = self.env.get_state()
        except NotImplementedError:
            pass  # snapshots are optional (embodied/envs.py): a resumed run starts from a fresh reset
        checkpoint.save_checkpoint(path, self.policy.state_dict(), trainer_state, self.config)
        return path

    @classmethod
    def resume(cls, run_dir: Path, budget: dict | None = None) -> Trainer:
        """Rebuild a run from its saved config and continue from checkpoints/latest, or from the
        previous checkpoint (latest.old, with a warning) when latest is missing or damaged. `budget`: train.*
        settings in place of the saved ones (RESUMABLE: total_env_steps, max_seconds, progress); the checkpoints
        after keep them."""
        run_dir = Path(run_dir)
        ckpt = checkpoint.usable(run_dir / "checkpoints" / "latest")
        if ckpt is None:
            raise FileNotFoundError(f"cannot resume: no checkpoint at {run_dir / 'checkpoints' / 'latest'}")
        config = with_budget(checkpoint.load_config(ckpt), budget)
        # the checkpoint's weights replace any init_from's: built without it, so that run may be gone by now
        trainer = cls({**config, "init_from": None}, run_dir)
        trainer.config = config
        state = checkpoint.load_trainer(ckpt)
        trainer.policy.load_state_dict(checkpoint.load_model(ckpt, trainer.device))
        trainer.algo.load_state_dict(state["algo"])
        if not isinstance(trainer.collector, Collector):
            trainer.collector.load_state_dict(state["collector"])
        elif "env" in state:
            trainer.env.set_state({k: v.to(trainer.device) for k, v in state["env"].items()})
            trainer.collector.load_state_dict({k: v.to(trainer.device) for k, v in state["collector"].items()})
        else:
            seed = trainer.config["seed"] + state["iteration"]
            print(f"resuming without the envs' state ({type(trainer.env).__name__} has no snapshots): "
                  f"episodes start over from a reset with seed {seed}", flush=True)
            trainer.collector.reset(seed=seed)
        trainer.rng_state = state["torch_rng"]
        trainer.iteration, trainer.env_steps, trainer.train_time = state["iteration"], state["env_steps"], state["train_time"]
        truncate_metrics(run_dir, trainer.iteration)
        return trainer
