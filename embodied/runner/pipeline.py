"""The staged pipeline: data -> perception -> bc -> offline RL -> online RL, as named stages of one run.

    pipeline = Pipeline(config, run_dir)    # config: a run config with a `pipeline` section (none: its defaults)
    summary = pipeline.learn()              # runs the stages not yet finished, evaluates, plots
    pipeline = Pipeline.resume(run_dir)     # continue at the stage (and checkpoint) where it stopped

The run directory holds `config.yaml` and one folder per stage, `perception/`, `bc/`,
`offline/`, `online/`, each with `metrics.jsonl` and `checkpoints/{latest,final}`.
A stage with a final checkpoint is done: resuming loads its weights and moves
on; a stage with only `latest` continues from it. Every stage trains the same
policy, so weights flow from a pixel policy's vision pretraining on the env's
sim-labelled reset frames (`pipeline.perception`, embodied/runner/perception.py) to
imitation (`pipeline.bc`, embodied/runner/bc.py) to
offline RL (`pipeline.offline.algo`: Cal-QL or IQL; chunked TD when the policy
acts in chunks) to online RL (the run's `algo`: SAC or RLPD, `pipeline.online.recipe`
names RLPD's or WSRL's settings; an on-policy algo, PPO, fine-tunes through the
ordinary `Trainer` loop in `online/`; `train.total_env_steps: 0` ends after the
offline stages). The data is `data=` (episode stores: a correction session's, a
recording, a LeRobot dataset; embodied/data/sources.py) or, with
`pipeline.demos.episodes`, the env's scripted expert recorded into the run's own
`demos.zarr` first (embodied/data/record.py, the collector `embodied record` uses),
from the run's seed, so a resumed run sees the same data. Either way every stage
reads the data as windows of the policy's action horizon, streamed from the store.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import yaml

from embodied import keys
from embodied.algorithms.sac import check_actor_critic
from embodied.build import make_algo, make_env, make_policy, needs
from embodied.config import ConfigError, build_config, check
from embodied.data.record import record
from embodied.data.replay import MixedSampler, ReplayBuffer, ReplayWindows
from embodied.data.sources import open_data
from embodied.device import resolve_device
from embodied.runner import checkpoint, init_from
from embodied.runner.bc import BCConfig, bc_optimizer, bc_step, shift_images
from embodied.runner.evaluate import eval_seed, evaluate
from embodied.runner.logger import RunLogger, plot_curve, read_metrics, update_progress
from embodied.runner.offpolicy import OffPolicyLoop, OnlineConfig
from embodied.runner.perception import PerceptionConfig, privileged_errors, reset_frames, train_perception
from embodied.runner.trainer import TrainConfig, Trainer, with_budget

STAGES = ("perception", "bc", "offline", "online")


@dataclass(frozen=True)
class DemoConfig:
    episodes: int = 0  # scripted-expert episodes recorded before the first stage; 0 = no expert data
    action_noise: float = 0.0  # std of Gaussian noise added to the expert's actions (suboptimal demos)

    def __post_init__(self):
        check(self.episodes >= 0 and self.action_noise >= 0, "pipeline.demos.episodes and action_noise must be >= 0")


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
    perception: PerceptionConfig = field(default_factory=PerceptionConfig)
    bc: BCConfig = field(default_factory=BCConfig)
    offline: OfflineConfig = field(default_factory=OfflineConfig)
    online: OnlineConfig = field(default_factory=OnlineConfig)


def runner_class(config_or_run_dir: dict | str | Path) -> type:
    """The runner of a config, or of a run directory by the config saved there: `Pipeline` for a `pipeline`
    section or an algo that learns from replay (SAC, RLPD: its online stage alone, from the pipeline's
    defaults), else `Trainer`."""
    config = config_or_run_dir if isinstance(config_or_run_dir, dict) else _saved_config(Path(config_or_run_dir))
    if config.get("imitation"):
        raise ConfigError("the `imitation:` section is now `pipeline:` (demos.episodes, bc.updates/lr/batch_size/"
                          "value_coef/distill_updates, bc.lr_schedule: cosine; train.total_env_steps: 0 for BC "
                          "alone): see configs/experiment/arm_reach_diffusion_ppo.yaml")
    if config.get("pipeline") or ("algo" in config and needs(config["algo"]["name"], "needs_replay")):
        return Pipeline
    return Trainer


def _saved_config(run_dir: Path) -> dict:
    """A run directory's config: the pipeline writes it at the top, a Trainer in its checkpoints (latest.old: the
    checkpoint resume falls back to when a crash left no latest, checkpoint.py); {} when there is none."""
    latest = run_dir / "checkpoints" / "latest"
    for path in (run_dir / "config.yaml", latest / "config.yaml", latest.with_name("latest.old") / "config.yaml"):
        if path.exists():
            return yaml.safe_load(path.read_text()) or {}
    return {}


class Pipeline:
    def __init__(self, config: dict[str, Any], run_dir: Path):
        self.config, self.run_dir = config, Path(run_dir)
        self.budget: dict | None = None  # resume's: a finished on-policy online stage goes on
        # no `pipeline` section (embodied train algo=sac): its defaults, the online stage alone
        self.cfg = build_config(PipelineConfig, config.get("pipeline") or {}, "pipeline")
        self.train_cfg = build_config(TrainConfig, config["train"], "train")
        check(isinstance(config["seed"], int), f"seed={config['seed']!r} must be an int")
        data = config.get("data") or []
        self.data = [data] if isinstance(data, str) else list(data)  # episode stores and LeRobot datasets
        check(not (self.data and self.cfg.demos.episodes),
              "data= and pipeline.demos.episodes > 0 both give demonstrations: set pipeline.demos.episodes=0 to "
              "train from data=")  # fmt: skip
        if self.cfg.bc.updates or self.cfg.offline.updates or self.cfg.online.offline_fraction:
            check(self.cfg.demos.episodes > 0 or bool(self.data),
                  "pipeline.bc / pipeline.offline / online.offline_fraction > 0 need demonstrations: "
                  "data=<episode store> or pipeline.demos.episodes > 0 (the scripted expert)")
        cluster = (config.get("cluster") or {}).get("name", "local")
        check(cluster == "local" or not needs(config["algo"]["name"], "needs_replay"),
              f"cluster={cluster} runs the on-policy loop's collection on workers (PPO, GRPO); algo="
              f"{config['algo']['name']} learns from a replay buffer in one process: drop cluster={cluster}")
        check(not (self.train_cfg.collect_ahead and needs(config["algo"]["name"], "needs_replay")),
              f"train.collect_ahead=true collects PPO's rollouts ahead of its update; algo={config['algo']['name']} "
              "steps and updates in turn from a replay buffer: set train.collect_ahead=false")
        torch.set_num_threads(int(config["threads"]))
        torch.manual_seed(config["seed"])
        self.device = resolve_device(config["device"])
        self.env = make_env(config, self.train_cfg.num_envs, self.device)
        if self.cfg.demos.episodes and not hasattr(self.env, "expert_action"):
            raise ConfigError(f"pipeline.demos: env {config['env']['name']!r} has no scripted expert "
                              "(an `expert_action` method); record data another way and train with data=<store>")
        self.policy = make_policy(config, self.env)
        # the first stage starts from trained weights (resuming loads them again: a first stage cut short restarts
        # from them); the run's config keeps the checkpoint's path
        if config.get("init_from"):
            self.config = {**config, "init_from": str(init_from.load(self.policy, config))}
        self.horizon = int(getattr(self.policy.config, "horizon", 1))  # action rows per window
        if self.cfg.perception.updates and not getattr(self.policy, "has_aux_loss", False):
            raise ConfigError(f"pipeline.perception trains the vision tower on policy.privileged_aux's regression of "
                              f"the 'privileged' observation: policy {config['policy']['name']!r} has none here (the "
                              "VLA has, with cameras, policy.privileged_aux > 0, on an env with a 'privileged' "
                              "observation); set pipeline.perception.updates=0")
        if self.cfg.bc.distill_updates and not hasattr(self.policy, "distill_student"):
            raise ConfigError(f"pipeline.bc.distill_updates: policy {config['policy']['name']!r} has no one-step "
                              "student to distill (diffusion has)")
        # built here, before any stage seeds the random stream: building an env draws from it
        self.eval_env = make_env(config, self.cfg.online.eval_episodes, self.device)
        self.offline_algo_params = dict(self.cfg.offline.algo)
        # an unknown name, or a policy the algo cannot train, fails now rather than after BC
        offline = [self.offline_algo_params["name"]] if self.cfg.offline.updates else []
        online = [config["algo"]["name"]] if self.train_cfg.total_env_steps else []
        for name in [*online, *offline]:
            if needs(name, "needs_replay"):
                try:
                    check_actor_critic(self.policy, name)
                except ValueError as err:
                    raise ConfigError(str(err)) from None
        needs(self.offline_algo_params["name"], "needs_replay")  # resolves the name: an unknown one fails here
        self.generator = torch.Generator().manual_seed(config["seed"])
        self._sources: dict[tuple, Any] = {}  # the run's data by (paths, window horizon) (`open`)

    @classmethod
    def resume(cls, run_dir: Path, budget: dict | None = None) -> Pipeline:
        """Continue at the stage (and checkpoint) where the run stopped; `budget` (Trainer.resume's) goes on with its
        on-policy online stage, finished or not, and is written into the run's config.yaml."""
        path = Path(run_dir) / "config.yaml"
        if not path.exists():
            raise FileNotFoundError(f"cannot resume: no pipeline config at {path}")
        config = yaml.safe_load(path.read_text())
        if budget and needs(config["algo"]["name"], "needs_replay"):
            raise ConfigError(f"{run_dir} learns off-policy (algo={config['algo']['name']}), whose online stage "
                              "resumes from its last evaluation: a resumed run keeps its budget there; start a new "
                              f"run from its weights with init_from={run_dir}")
        config = with_budget(config, budget)
        # once a stage has a checkpoint the run's weights come from there, and init_from's run may be gone by now
        started = any(checkpoint.usable(Path(run_dir) / stage / "checkpoints" / name) is not None
                      for stage in STAGES for name in ("final", "latest"))
        pipeline = cls({**config, "init_from": None} if started else config, run_dir)
        pipeline.config = {**pipeline.config, "init_from": config.get("init_from")}  # still recorded
        if budget:
            path.write_text(yaml.safe_dump(pipeline.config, sort_keys=False))
        pipeline.budget = budget
        return pipeline

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
        todo = {"perception": self.cfg.perception.updates, "bc": self.cfg.bc.updates,
                "offline": self.cfg.offline.updates, "online": self.train_cfg.total_env_steps}
        paths = self.data_paths() if self.cfg.demos.episodes or self.data else []
        online_steps, summary = 0, {"run_dir": str(self.run_dir)}
        self.final_eval = None  # the on-policy stage's last evaluation, where it is the one below
        for index, stage in enumerate(STAGES):
            final = checkpoint.usable(self.run_dir / stage / "checkpoints" / "final")
            if final is not None and not (stage == "online" and self.budget):
                self.policy.load_state_dict(checkpoint.load_model(final, self.device))
                online_steps = checkpoint.load_trainer(final).get("env_steps", online_steps)
                continue
            if not todo[stage]:
                continue
            # each stage's random stream starts from the seed, so a run resumed at a stage boundary
            # continues exactly as the uninterrupted run would
            torch.manual_seed(self.config["seed"] + 7919 * index)
            self.generator.manual_seed(self.config["seed"] + 7919 * index)
            if stage == "perception":
                self.run_perception()
            elif stage == "bc":
                self.run_bc(paths)
            elif stage == "offline":
                self.run_offline(paths)
            else:
                online_steps = self.run_online(paths)
        last_evals = (("perception", "eval/privileged_error"), ("bc", "eval/success"), ("offline", "eval/success"))
        for stage, key in last_evals:  # each stage's last evaluation, next to the final one
            last = [r for r in read_metrics(self.run_dir / stage) if key in r]
            if last:
                summary[f"{stage}/{key}"] = last[-1][key]
        summary.update({"env_steps": online_steps, "train_seconds": time.perf_counter() - start})
        if self.config.get("init_from"):
            summary["init_from"] = self.config["init_from"]
        if self.train_cfg.eval_episodes:
            result = self.final_eval
            if result is None:
                env = make_env(self.config, self.train_cfg.eval_episodes, self.device)
                result = evaluate(self.policy, env, seed=eval_seed(self.config["seed"]))
            summary.update({f"eval/{k}": v for k, v in result.items()})
        (self.run_dir / "summary.json").write_text(json.dumps(summary, indent=1))
        return summary

    def data_paths(self) -> list[Path | str]:
        """The run's data: `data=`, or the scripted expert's episodes recorded once into `<run>/demos.zarr`
        (from a seed the training and evaluation envs never use; written aside and renamed into place, so an
        interrupted recording is redone, never half-used)."""
        if self.data:
            return self.data
        cfg, target = self.cfg.demos, self.run_dir / "demos.zarr"
        if not target.exists():
            partial = target.with_name("demos.partial.zarr")
            shutil.rmtree(partial, ignore_errors=True)
            env = make_env(self.config, cfg.episodes, self.device)
            written = record(env, partial, cfg.episodes, seed=self.config["seed"] + 2_000_003,
                             action_noise=cfg.action_noise, generator=torch.Generator().manual_seed(self.config["seed"]))
            partial.rename(target)
            print(f"demos: {written['episodes']} scripted-expert episodes, {written['frames']:,} frames, "
                  f"{written['success']:.0%} successful -> {target}", flush=True)
        return [target]

    def open(self, paths: list, horizon: int = 1):
        """The data as a source of windows of `horizon` action rows (embodied/data/sources.py), opened once per
        horizon (opening checks every chunk of every store and loads its vector keys)."""
        key = (tuple(map(str, paths)), horizon)
        if key not in self._sources:
            gamma = float(self.offline_algo_params.get("gamma", 0.99))
            self._sources[key] = open_data(paths, self.env.observation_spec, self.env.action_spec, gamma, self.device,
                                           horizon=horizon)  # fmt: skip
        return self._sources[key]

    def run_perception(self) -> None:
        """The tower and aux head on the privileged regression, from `frames` reset frames of the run's envs (seeds
        no other stage or evaluation uses); the median error on an eighth as many more, held out, logged (short: an
        interrupted stage starts over)."""
        cfg, envs = self.cfg.perception, self.env.num_envs
        resets, held_out = -(-cfg.frames // envs), -(-cfg.frames // (8 * envs))
        seeds = [self.config["seed"] + 4_000_037 + r for r in range(resets + held_out)]
        frames = reset_frames(self.env, seeds)
        train, test = frames[: resets * envs], frames[resets * envs :]
        stage_dir = self.run_dir / "perception"
        (stage_dir / "metrics.jsonl").unlink(missing_ok=True)
        print(f"perception: {len(train):,} reset frames, {len(test):,} held out", flush=True)
        with update_progress("perception", cfg.updates, show=self.train_cfg.progress) as advance:
            loss = train_perception(self.policy, train, cfg.updates, cfg.lr, cfg.batch_size, self.generator, advance)
        error = privileged_errors(self.policy, test)
        median = float(error.median())
        _log(stage_dir, {"update": cfg.updates, "loss": loss, "eval/privileged_error": median})
        print(f"perception: held-out median error of the privileged estimate {median:.4f} "
              f"(90th percentile {float(error.quantile(0.9)):.4f})", flush=True)
        self._save("perception", "final", {"updates": cfg.updates})

    def run_bc(self, paths: list) -> None:
        cfg, policy = self.cfg.bc, self.policy
        source = self.open(paths, self.horizon)
        print(f"data: {len(source):,} transitions from {', '.join(map(str, paths))}", flush=True)
        if cfg.rows == "interventions":  # HG-DAgger: imitate only what the operator corrected
            source = source.interventions()
            check(source is not None, f"pipeline.bc.rows=interventions: {', '.join(map(str, paths))} hold no "
                  "intervention rows (is_intervention); train on every row with pipeline.bc.rows=all")
        columns = source.columns()  # every row's state and action (no images): the normalizers' statistics
        if hasattr(policy, "fit_normalizers"):
            policy.fit_normalizers(columns)
        else:
            policy.observe(columns[keys.OBS])  # an in-network observation normalizer starts from the demos'
        optimizer, schedule = bc_optimizer(policy, cfg)
        stage_dir = self.run_dir / "bc"
        (stage_dir / "metrics.jsonl").unlink(missing_ok=True)  # short: an interrupted BC stage starts over
        with update_progress("bc", cfg.updates, show=self.train_cfg.progress) as advance:
            for update in range(1, cfg.updates + 1):
                batch = source.sample(cfg.batch_size, self.generator)
                if cfg.shift:
                    batch = shift_images(batch, cfg.shift, self.generator)
                losses = bc_step(policy, optimizer, batch, cfg.value_coef)
                if schedule is not None:
                    schedule.step()
                if update % cfg.eval_every == 0 or update == cfg.updates:
                    record = {"update": update, **{k: float(v) for k, v in losses.items()}, **self._eval("eval")}
                    _log(stage_dir, record)
                advance()
        if cfg.distill_updates:
            metrics = policy.distill_student(source, self.env, cfg.distill_updates, cfg.batch_size, cfg.lr,
                                             self.generator, seed=self.config["seed"] + 3_000_017)  # fmt: skip
            _log(stage_dir, {"update": cfg.updates, **metrics, **self._eval("eval")})
        self._save("bc", "final", {"updates": cfg.updates})

    def run_offline(self, paths: list) -> None:
        cfg = self.cfg.offline
        algo = make_algo(self.offline_algo_params, self.policy)
        source = self.open(paths, self.horizon)  # windows of H actions: chunked TD where the policy acts in chunks
        update = 0
        latest = checkpoint.usable(self.run_dir / "offline" / "checkpoints" / "latest")
        if latest is not None:
            self.policy.load_state_dict(checkpoint.load_model(latest, self.device))
            state = checkpoint.load_trainer(latest)
            algo.load_state_dict(state["algo"])
            self.generator.set_state(state["generator"])
            update = state["updates"]
            _truncate(self.run_dir / "offline", "update", update)
        with update_progress("offline", cfg.updates, update, self.train_cfg.progress) as advance:
            while update < cfg.updates:
                metrics = algo.update(source.sample(algo.config.batch_size, self.generator))
                update += 1
                if update % cfg.eval_every == 0 or update == cfg.updates:
                    record = {"update": update, **{f"algo/{k}": float(v) for k, v in metrics.items()},
                              **self._eval("eval")}
                    _log(self.run_dir / "offline", record)
                    self._save("offline", "latest", {"updates": update, "algo": algo.state_dict(),
                                                     "generator": self.generator.get_state()})
                advance()
        final_state = {"updates": update}
        if hasattr(algo, "log_alpha"):
            final_state["log_alpha"] = algo.log_alpha.detach().clone()  # the online SAC starts from it
        self._save("offline", "final", final_state)

    def run_online(self, paths: list) -> int:
        if not needs(self.config["algo"]["name"], "needs_replay"):
            return self.run_online_on_policy()
        cfg, config = self.cfg.online, self.config
        algo = make_algo(config["algo"], self.policy)
        offline_final = checkpoint.usable(self.run_dir / "offline" / "checkpoints" / "final")
        if hasattr(algo, "log_alpha") and offline_final is not None:
            # WSRL starts online RL from the whole pretrained agent: a temperature reset to its initial
            # value would first drive the pretrained policy toward maximum entropy
            log_alpha = checkpoint.load_trainer(offline_final).get("log_alpha")
            if log_alpha is not None:
                with torch.no_grad():
                    algo.log_alpha.copy_(log_alpha)
        online = ReplayBuffer(cfg.buffer_capacity, self.device)
        # a chunk critic learns from windows of H steps, online as offline (Q-chunking)
        sampler = online if self.horizon == 1 else ReplayWindows(online, self.horizon, self.env.num_envs)
        if paths and cfg.offline_fraction > 0:
            sampler = MixedSampler({"offline": _Transitions(self.open(paths, self.horizon)), "online": sampler},
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
        # the pipeline evaluates at the end; the inner loop only for a curve (train.eval_every)
        episodes = self.cfg.online.eval_episodes if self.train_cfg.eval_every else 0
        if checkpoint.usable(stage_dir / "checkpoints" / "latest") is not None:
            trainer = Trainer.resume(stage_dir, self.budget)  # its saved config holds `episodes`
        else:
            # init_from: None, the stage starts from the pipeline's policy (which init_from started)
            trainer = Trainer({**self.config, "data": None, "init_from": None,
                               "train": {**self.config["train"], "eval_episodes": episodes}}, stage_dir)  # fmt: skip
            trainer.policy.load_state_dict(self.policy.state_dict())
        result = trainer.learn()
        self.policy.load_state_dict(trainer.policy.state_dict())
        if episodes == self.train_cfg.eval_episodes and self.train_cfg.eval_deterministic:
            # the same episodes from the same seed with the same weights: the pipeline's final evaluation, done
            self.final_eval = {k.removeprefix("eval/"): v for k, v in result.items() if k.startswith("eval/")} or None
        return trainer.env_steps

    # --- helpers ---------------------------------------------------------------------------
    def _eval(self, prefix: str) -> dict[str, float]:
        result = evaluate(self.policy, self.eval_env, seed=eval_seed(self.config["seed"]))
        return {f"{prefix}/{k}": v for k, v in result.items()}

    def _save(self, stage: str, name: str, state: dict) -> None:
        path = self.run_dir / stage / "checkpoints" / name
        checkpoint.save_checkpoint(path, self.policy.state_dict(), state, self.config)


class _Transitions:
    """A data source's rows as the online buffer holds them (RLPD mixes both in one batch): a transition's keys only,
    without the data's extras (mc_return, success, is_intervention)."""

    KEYS = (keys.OBS, keys.NEXT_OBS, keys.ACTION, keys.REWARD, keys.TERMINATED, keys.TRUNCATED)

    def __init__(self, source):
        self.source = source

    def __len__(self) -> int:
        return len(self.source)

    def sample(self, n: int, generator: torch.Generator):
        batch = self.source.sample(n, generator)
        return batch.select(*self.KEYS, *([keys.MASK] if keys.MASK in batch.keys() else []))  # windows: their mask


def _truncate(stage_dir: Path, counter: str, value: int) -> None:
    """Drop metric lines written after the checkpoint a resumed stage restarts from."""
    rows = [r for r in read_metrics(stage_dir) if r.get(counter, 0) <= value]
    (stage_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def _log(stage_dir: Path, record: dict) -> None:
    """One JSON line in a stage's metrics.jsonl (bc and offline stages, which take no env steps)."""
    stage_dir.mkdir(parents=True, exist_ok=True)
    with (stage_dir / "metrics.jsonl").open("a") as f:
        f.write(json.dumps(record) + "\n")
