"""The staged pipeline: demonstrations -> bc -> offline RL -> online RL, as named stages of one run.

    pipeline = Pipeline(config, run_dir)    # config: a run config with a `pipeline` section (none: its defaults)
    summary = pipeline.learn()              # runs the stages not yet finished, evaluates, plots
    pipeline = Pipeline.resume(run_dir)     # continue at the stage (and checkpoint) where it stopped

The run directory holds `config.yaml` and one folder per stage, `bc/`,
`offline/`, `online/`, each with `metrics.jsonl` and `checkpoints/{latest,final}`.
A stage with a final checkpoint is done: resuming loads its weights and moves
on; a stage with only `latest` continues from it. Every stage trains the same
policy, so weights flow from imitation to offline RL (`pipeline.offline.algo`:
Cal-QL or IQL) to online RL (the run's `algo`: SAC or RLPD; WSRL is the online
stage with `offline_fraction: 0` and `warmup_steps > 0`; an on-policy algo, `algo=ppo`
with `policy=mlp`, fine-tunes through the ordinary `Trainer` loop in `online/`). Demonstrations come
from `data=` (episode stores: a correction session's, a recording, an import; embodied/data/sources.py)
or from the env's scripted expert (`embodied.demos.EXPERTS`), regenerated from the run's seed, so
a resumed run sees the same data.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import yaml
from tensordict import TensorDict

from embodied import keys, registry
from embodied.algorithms.advantages import discounted_returns
from embodied.algorithms.sac import check_actor_critic
from embodied.config import ConfigError, build_config, check
from embodied.data.replay import MixedSampler, ReplayBuffer
from embodied.data.sources import load_transitions
from embodied.demos import EXPERTS, load_expert
from embodied.device import resolve_device
from embodied.runner import checkpoint
from embodied.runner.evaluate import evaluate
from embodied.runner.logger import RunLogger, plot_curve, read_metrics
from embodied.runner.offpolicy import OffPolicyLoop, OnlineConfig
from embodied.runner.trainer import TrainConfig, Trainer, make_env, make_policy

STAGES = ("bc", "offline", "online")


@dataclass(frozen=True)
class DemoConfig:
    episodes: int = 0  # scripted-expert episodes collected before the first stage; 0 = no offline data
    action_noise: float = 0.0  # std of Gaussian noise added to the expert's actions (suboptimal demos)

    def __post_init__(self):
        check(self.episodes >= 0 and self.action_noise >= 0, "pipeline.demos.episodes and action_noise must be >= 0")


@dataclass(frozen=True)
class BCConfig:
    updates: int = 0  # gradient steps of policy.bc_loss on the demos; 0 = skip the stage
    lr: float = 3e-4  # Adam step
    batch_size: int = 256

    def __post_init__(self):
        check(self.updates >= 0 and self.lr > 0 and self.batch_size >= 1, "pipeline.bc: updates >= 0, lr > 0, batch_size >= 1")


@dataclass(frozen=True)
class OfflineConfig:
    updates: int = 0  # gradient steps of the offline algorithm on the demos; 0 = skip the stage
    algo: dict[str, Any] = field(default_factory=lambda: {"name": "calql"})  # registry name and its settings
    eval_every: int = 1_000  # updates between evaluations and checkpoints

    def __post_init__(self):
        check(self.updates >= 0 and self.eval_every >= 1, "pipeline.offline: updates >= 0 and eval_every >= 1")
        check(isinstance(self.algo, dict) and "name" in self.algo, "pipeline.offline.algo needs a 'name'")


@dataclass(frozen=True)
class PipelineConfig:
    demos: DemoConfig = field(default_factory=DemoConfig)
    bc: BCConfig = field(default_factory=BCConfig)
    offline: OfflineConfig = field(default_factory=OfflineConfig)
    online: OnlineConfig = field(default_factory=OnlineConfig)


def _params(node: dict) -> dict:
    return {k: v for k, v in node.items() if k != "name"}


@torch.no_grad()
def collect_demos(env, obs: TensorDict, expert, action_noise: float, gamma: float,
                  generator: torch.Generator) -> TensorDict:
    """One episode per env from `obs` (just reset), the expert acting (plus Gaussian noise):
    transitions [M] as `transitions_from_rollout` gives them, plus `mc_return` (discounted return-to-go)."""
    n = env.num_envs
    live = torch.ones(n, dtype=torch.bool, device=env.device)
    steps = []
    for _ in range(env.max_episode_steps):
        action = expert(env)
        if action_noise:
            noise = torch.randn(action.shape, generator=generator).to(action.device)
            action = (action + action_noise * noise).clamp(env.action_spec.low, env.action_spec.high)
        next_obs, reward, terminated, truncated, info = env.step(action)
        done = terminated | truncated
        true_next = next_obs.clone()
        true_next[done] = info["final_obs"][done]  # auto-reset replaced the finished episodes' last observation
        steps.append(TensorDict({
            keys.OBS: obs, keys.NEXT_OBS: true_next, keys.ACTION: action, keys.REWARD: reward,
            keys.TERMINATED: terminated, keys.TRUNCATED: truncated, "live": live.clone(),
        }, batch_size=[n]))
        live &= ~done
        obs = next_obs
        if not live.any():
            break
    rollout = torch.stack(steps)  # [T, N]
    done = rollout[keys.TERMINATED] | rollout[keys.TRUNCATED]
    rollout[keys.MC_RETURN] = discounted_returns(rollout[keys.REWARD], done, gamma)
    return rollout[rollout["live"]].exclude("live")


class Pipeline:
    def __init__(self, config: dict[str, Any], run_dir: Path):
        self.config, self.run_dir = config, Path(run_dir)
        # no `pipeline` section (embodied train algo=sac): its defaults, the online stage alone
        self.cfg = build_config(PipelineConfig, config.get("pipeline") or {}, "pipeline")
        self.train_cfg = build_config(TrainConfig, config["train"], "train")
        check(isinstance(config["seed"], int), f"seed={config['seed']!r} must be an int")
        data = config.get("data") or []
        self.data = [data] if isinstance(data, str) else list(data)  # episode stores: the demos instead of an expert
        check(not (self.data and self.cfg.demos.episodes),
              "data= and pipeline.demos.episodes > 0 both give demonstrations: set pipeline.demos.episodes=0 to "
              "train from data=")  # fmt: skip
        if self.cfg.bc.updates or self.cfg.offline.updates or self.cfg.online.offline_fraction:
            check(self.cfg.demos.episodes > 0 or bool(self.data),
                  "pipeline.bc / pipeline.offline / online.offline_fraction > 0 need demonstrations: "
                  "data=<episode store> or pipeline.demos.episodes > 0 (the scripted expert)")
        if self.cfg.demos.episodes and config["env"]["name"] not in EXPERTS:
            raise ConfigError(f"pipeline.demos: env {config['env']['name']!r} has no scripted expert; "
                              f"envs with one: {', '.join(sorted(EXPERTS))}")
        torch.set_num_threads(int(config["threads"]))
        torch.manual_seed(config["seed"])
        self.device = resolve_device(config["device"])
        self.env = make_env(config, self.train_cfg.num_envs, self.device)
        self.policy = make_policy(config, self.env)
        # built here, before any stage seeds the random stream: building an env draws from it
        self.eval_env = make_env(config, self.cfg.online.eval_episodes, self.device)
        self.offline_algo_params = dict(self.cfg.offline.algo)
        # an unknown name, or a policy the algo cannot train, fails now rather than after BC
        offline = [self.offline_algo_params["name"]] if self.cfg.offline.updates else []
        for name in [config["algo"]["name"], *offline]:
            if getattr(registry.resolve("algo", name), "needs_replay", False):
                try:
                    check_actor_critic(self.policy, name)
                except ValueError as err:
                    raise ConfigError(str(err)) from None
        registry.resolve("algo", self.offline_algo_params["name"])
        self.generator = torch.Generator().manual_seed(config["seed"])

    @classmethod
    def resume(cls, run_dir: Path) -> Pipeline:
        path = Path(run_dir) / "config.yaml"
        if not path.exists():
            raise FileNotFoundError(f"cannot resume: no pipeline config at {path}")
        return cls(yaml.safe_load(path.read_text()), run_dir)

    @property
    def iteration(self) -> int:
        """Stages finished so far (the CLI's resume message reads it, as it reads Trainer.iteration)."""
        return sum((self.run_dir / s / "checkpoints" / "final" / "model.safetensors").exists() for s in STAGES)

    @property
    def env_steps(self) -> int:
        """Online env steps in the last online checkpoint, 0 before the online stage."""
        latest = checkpoint.usable(self.run_dir / "online" / "checkpoints" / "latest")
        return checkpoint.load_trainer(latest)["env_steps"] if latest is not None else 0

    # --- the stages ------------------------------------------------------------------------
    def learn(self) -> dict[str, Any]:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        config_path = self.run_dir / "config.yaml"
        if not config_path.exists():
            config_path.write_text(yaml.safe_dump(self.config, sort_keys=False))
        start = time.perf_counter()
        demos = self.make_demos() if self.cfg.demos.episodes or self.data else None
        todo = {"bc": self.cfg.bc.updates, "offline": self.cfg.offline.updates, "online": self.train_cfg.total_env_steps}
        online_steps = 0
        for index, stage in enumerate(STAGES):
            final = checkpoint.usable(self.run_dir / stage / "checkpoints" / "final")
            if final is not None:
                self.policy.load_state_dict(checkpoint.load_model(final, self.device))
                online_steps = checkpoint.load_trainer(final).get("env_steps", online_steps)
                continue
            if not todo[stage]:
                continue
            # each stage's random stream starts from the seed, so a run resumed at a stage boundary
            # continues exactly as the uninterrupted run would
            torch.manual_seed(self.config["seed"] + 7919 * (index + 1))
            self.generator.manual_seed(self.config["seed"] + 7919 * (index + 1))
            if stage == "bc":
                self.run_bc(demos)
            elif stage == "offline":
                self.run_offline(demos)
            else:
                online_steps = self.run_online(demos)
        summary = {"run_dir": str(self.run_dir), "env_steps": online_steps, "train_seconds": time.perf_counter() - start}
        if self.train_cfg.eval_episodes:
            env = make_env(self.config, self.train_cfg.eval_episodes, self.device)
            result = evaluate(self.policy, env, seed=self.config["seed"] + 1_000_003)
            summary.update({f"eval/{k}": v for k, v in result.items()})
        (self.run_dir / "summary.json").write_text(json.dumps(summary, indent=1))
        return summary

    def make_demos(self) -> TensorDict:
        gamma = float(self.offline_algo_params.get("gamma", 0.99))
        if self.data:
            demos = load_transitions(self.data, self.env.observation_spec, self.env.action_spec, gamma)
            print(f"data: {demos.numel():,} transitions from {', '.join(map(str, self.data))}", flush=True)
            return demos.to(self.device)
        cfg = self.cfg.demos
        expert = load_expert(self.config["env"]["name"])
        env = make_env(self.config, cfg.episodes, self.device)
        obs, _ = env.reset(seed=self.config["seed"] + 2_000_003)  # demo episodes differ from train and eval ones
        return collect_demos(env, obs, expert, cfg.action_noise, gamma, torch.Generator().manual_seed(self.config["seed"]))

    def run_bc(self, demos: TensorDict) -> None:
        cfg, policy = self.cfg.bc, self.policy
        buffer = _buffer(demos, self.device)
        policy.observe(demos[keys.OBS])  # an in-network observation normalizer starts from the demos' statistics
        params = policy.actor_params() if hasattr(policy, "actor_params") else list(policy.parameters())
        optimizer = torch.optim.Adam(params, lr=cfg.lr)
        (self.run_dir / "bc" / "metrics.jsonl").unlink(missing_ok=True)  # short: an interrupted BC stage starts over
        for update in range(1, cfg.updates + 1):
            loss = policy.bc_loss(buffer.sample(cfg.batch_size, self.generator))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            if update % 500 == 0 or update == cfg.updates:
                _log(self.run_dir / "bc", {"update": update, "bc_loss": loss.item(), **self._eval("eval")})
        self._save("bc", "final", {"updates": cfg.updates})

    def run_offline(self, demos: TensorDict) -> None:
        cfg = self.cfg.offline
        params = self.offline_algo_params
        algo = registry.build("algo", params["name"], _params(params), policy=self.policy)
        buffer, update = _buffer(demos, self.device), 0
        latest = checkpoint.usable(self.run_dir / "offline" / "checkpoints" / "latest")
        if latest is not None:
            self.policy.load_state_dict(checkpoint.load_model(latest, self.device))
            state = checkpoint.load_trainer(latest)
            algo.load_state_dict(state["algo"])
            self.generator.set_state(state["generator"])
            update = state["updates"]
            _truncate(self.run_dir / "offline", "update", update)
        while update < cfg.updates:
            metrics = algo.update(buffer.sample(algo.config.batch_size, self.generator))
            update += 1
            if update % cfg.eval_every == 0 or update == cfg.updates:
                record = {"update": update, **{f"algo/{k}": float(v) for k, v in metrics.items()}, **self._eval("eval")}
                _log(self.run_dir / "offline", record)
                self._save("offline", "latest", {"updates": update, "algo": algo.state_dict(),
                                                 "generator": self.generator.get_state()})
        final_state = {"updates": update}
        if hasattr(algo, "log_alpha"):
            final_state["log_alpha"] = algo.log_alpha.detach().clone()  # the online SAC starts from it
        self._save("offline", "final", final_state)

    def run_online(self, demos: TensorDict | None) -> int:
        if not getattr(registry.resolve("algo", self.config["algo"]["name"]), "needs_replay", False):
            return self.run_online_on_policy()
        cfg, config = self.cfg.online, self.config
        algo = registry.build("algo", config["algo"]["name"], _params(config["algo"]), policy=self.policy)
        offline_final = checkpoint.usable(self.run_dir / "offline" / "checkpoints" / "final")
        if hasattr(algo, "log_alpha") and offline_final is not None:
            # WSRL starts online RL from the whole pretrained agent: a temperature reset to its initial
            # value would first drive the pretrained policy toward maximum entropy
            log_alpha = checkpoint.load_trainer(offline_final).get("log_alpha")
            if log_alpha is not None:
                with torch.no_grad():
                    algo.log_alpha.copy_(log_alpha)
        online = ReplayBuffer(cfg.buffer_capacity, self.device)
        sampler = online
        if demos is not None and cfg.offline_fraction > 0:
            offline = _buffer(demos.exclude(keys.MC_RETURN), self.device)
            sampler = MixedSampler({"offline": offline, "online": online},
                                   {"offline": cfg.offline_fraction, "online": 1.0 - cfg.offline_fraction})
        loop = OffPolicyLoop(self.env, self.policy, algo, online, sampler, cfg, self.eval_env, config["seed"])
        stage_dir = self.run_dir / "online"
        latest = checkpoint.usable(stage_dir / "checkpoints" / "latest")
        if latest is not None:
            self.policy.load_state_dict(checkpoint.load_model(latest, self.device))
            loop.load_state_dict(checkpoint.load_trainer(latest))
            _truncate(stage_dir, "env_steps", loop.env_steps)
        stage_dir.mkdir(parents=True, exist_ok=True)
        logger = RunLogger(stage_dir, self.train_cfg.total_env_steps, loop.env_steps, self.train_cfg.progress)

        def on_eval(record: dict) -> None:
            record["iteration"] = record["env_steps"]
            logger.log(record)
            self._save("online", "latest", loop.state_dict())

        try:
            loop.run(self.train_cfg.total_env_steps, on_eval)
        finally:
            logger.close()
        self._save("online", "final", {"env_steps": loop.env_steps})
        plot_curve(stage_dir, title=f"{config['name']} online, seed {config['seed']}")
        return loop.env_steps

    def run_online_on_policy(self) -> int:
        """On-policy fine-tuning (PPO) of the policy so far: the Trainer loop with its own checkpoints in online/."""
        stage_dir = self.run_dir / "online"
        if checkpoint.usable(stage_dir / "checkpoints" / "latest") is not None:
            trainer = Trainer.resume(stage_dir)
        else:
            # the pipeline evaluates at the end; the inner loop only for a curve (train.eval_every)
            episodes = self.cfg.online.eval_episodes if self.train_cfg.eval_every else 0
            trainer = Trainer({**self.config, "train": {**self.config["train"], "eval_episodes": episodes}}, stage_dir)
            trainer.policy.load_state_dict(self.policy.state_dict())
        trainer.learn()
        self.policy.load_state_dict(trainer.policy.state_dict())
        return trainer.env_steps

    # --- helpers ---------------------------------------------------------------------------
    def _eval(self, prefix: str) -> dict[str, float]:
        result = evaluate(self.policy, self.eval_env, seed=self.config["seed"] + 1_000_003)
        return {f"{prefix}/{k}": v for k, v in result.items()}

    def _save(self, stage: str, name: str, state: dict) -> None:
        path = self.run_dir / stage / "checkpoints" / name
        checkpoint.save_checkpoint(path, self.policy.state_dict(), state, self.config)


def _buffer(transitions: TensorDict, device: torch.device) -> ReplayBuffer:
    buffer = ReplayBuffer(transitions.batch_size[0], device)
    buffer.extend(transitions)
    return buffer


def _truncate(stage_dir: Path, counter: str, value: int) -> None:
    """Drop metric lines written after the checkpoint a resumed stage restarts from."""
    rows = [r for r in read_metrics(stage_dir) if r.get(counter, 0) <= value]
    (stage_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def _log(stage_dir: Path, record: dict) -> None:
    """One JSON line in a stage's metrics.jsonl (bc and offline stages, which take no env steps)."""
    stage_dir.mkdir(parents=True, exist_ok=True)
    with (stage_dir / "metrics.jsonl").open("a") as f:
        f.write(json.dumps(record) + "\n")
