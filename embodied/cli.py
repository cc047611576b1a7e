"""The `embodied` command.

    embodied train experiment=quadrotor_hover [key=value ...]   # Hydra overrides; -m sweeps
    embodied train env=arm_reach [policy=mlp algo=ppo ...]      # no experiment: the components' own defaults
    embodied train env=my_pkg.envs:MyEnv                        # an env of your own (or an `embodied.envs` entry point)
    embodied train resume=<run dir>                             # continue an interrupted run
    embodied train resume=<run dir> train.total_env_steps=N     # or go on past its budget (train.max_seconds too)
    embodied train experiment=arm_reach init_from=<run or checkpoint>   # a new run from trained policy weights
    embodied eval <run dir or checkpoint> [--episodes N]
    embodied deploy <run dir or checkpoint> robot=<name> [robot.key=value ...] [--dry-run] [--export DIR]
    embodied correct <run or checkpoint> robot=<name> teleop=<device> [--episodes N] [--store DIR]
                                                                # human-in-the-loop corrections
    embodied classifier <session store> --out DIR               # success classifier from the labelled frames
    embodied keys <dir> [--actors actor-0 ...]                  # CURVE keys for a learner and its actors
    embodied record env=<name> --operator scripted --episodes N --store DIR   # or --policy <run>: a store to train from
    embodied record env=<name> [robot=<name>] --teleop <device> --episodes N --store DIR   # a person drives
    embodied data info <store or LeRobot dir>                   # episodes, frames, keys, success, interventions
    embodied data export <store> <out dir> [--fps N] [--task TEXT]   # to a LeRobotDataset v3
    embodied data import <LeRobot dir> <store>                  # from a LeRobotDataset v3
    embodied list                                               # registered envs, policies, algorithms
    embodied train -m seed=0,1,2 algo.lr=1e-4,3e-4 hydra/launcher=ray   # a sweep's runs in parallel on Ray
    embodied sweep <multirun dir> [--metric NAME ...] [--out PNG]   # per setting: mean and 95% interval over seeds
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from embodied.compose import CONFIG_DIR, aliases, compose, register_configs, settle


def _unknown_key(argv: list[str]) -> str | None:
    """A clearer message than Hydra's for `a.b=value` where `b` is not a key of `a`: names the valid keys."""
    import difflib

    overrides = [a for a in argv if "=" in a and not a.startswith(("-", "hydra.", "+", "~"))]
    keys = [o.split("=", 1)[0] for o in overrides if "." in o.split("=", 1)[0]]
    if not keys:
        return None
    choices = [o for o in overrides if "." not in o.split("=", 1)[0] and "," not in o]  # experiment=, env=, seed=
    choices += [a for a in argv if a == "~experiment"]  # experiment=null
    try:
        config = compose(choices)
    except Exception:  # noqa: BLE001 - Hydra reports composition errors itself
        return None
    for key in keys:
        *parents, leaf = key.split(".")
        node = config
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict) and leaf not in node:
            close = difflib.get_close_matches(leaf, list(node), n=1)
            hint = f" (did you mean {'.'.join(parents + close)!r}?)" if close else ""
            return f"unknown key {key!r}{hint}; valid keys of {'.'.join(parents)!r}: {', '.join(sorted(node))}"
    return None


def _train_task(cfg) -> float | None:
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    from embodied.algorithms.losses import NonFiniteLossError
    from embodied.config import ConfigError
    from embodied.registry import MissingExtraError
    from embodied.runner.checkpoint import DamagedCheckpointError
    from embodied.runner.pipeline import runner_class

    hydra = HydraConfig.get()
    run_dir, started = Path(hydra.runtime.output_dir), False
    try:
        notice = settle(cfg, OmegaConf.to_container(hydra.runtime.choices), list(hydra.overrides.task))
        if notice:
            print(notice, flush=True)
            (run_dir / ".hydra" / "config.yaml").write_text(OmegaConf.to_yaml(cfg))  # Hydra saved it unsettled
        config = OmegaConf.to_container(cfg, resolve=True)
        if config.get("resume") and config.get("init_from"):
            raise ConfigError(f"resume={config['resume']} continues that run (its weights, optimizer and counters) and "
                              f"init_from={config['init_from']} starts a new run from a checkpoint's weights: set one")
        budget = resume_budget(config, list(hydra.overrides.task)) if config.get("resume") else None
        cluster = config.get("cluster") or {}
        if cluster.get("name") == "ray" and cluster.get("learner") == "actor":  # the runner in a Ray actor
            from embodied.config import build_config
            from embodied.distributed.config import ClusterConfig
            from embodied.distributed.learner import RemoteLearner

            settings = build_config(ClusterConfig, {k: v for k, v in cluster.items() if k != "name"}, "cluster")
            trainer = RemoteLearner(config, run_dir, settings, budget)
        elif config.get("resume"):
            trainer = runner_class(config["resume"]).resume(config["resume"], budget)
        else:
            trainer = runner_class(config)(config, run_dir)
        if config.get("resume"):
            print(f"resuming {config['resume']} from iteration {trainer.iteration} ({trainer.env_steps:,} env steps)")
        started = True
        summary = trainer.learn()
    except (ConfigError, MissingExtraError, NonFiniteLossError, FileNotFoundError, KeyError, DamagedCheckpointError) as err:
        # one message, no traceback (Hydra would print one); KeyError: an unknown registry name
        print(f"error: {err.args[0] if isinstance(err, KeyError) else err}", file=sys.stderr)
        raise SystemExit(1) from None
    finally:
        if not started and not cfg.get("resume"):
            _discard(run_dir)
    _print_summary(summary)
    return summary.get("eval/success")


def resume_budget(config: dict, overrides: list[str]) -> dict:
    """The train.* settings (trainer.RESUMABLE) a `resume=` command line overrides, with their values; any other
    override is an error: the resumed run keeps its own config, and silently ignoring the key would mislead."""
    from embodied.config import ConfigError
    from embodied.runner.trainer import RESUMABLE

    budget, refused = {}, []
    for override in overrides:
        key = override.lstrip("+~").split("=", 1)[0]
        if key == "resume" or key.startswith("hydra"):
            continue
        name = key.removeprefix("train.")
        if key.startswith("train.") and name in RESUMABLE:
            budget[name] = config["train"].get(name)  # ~train.max_seconds: none
        else:
            refused.append(override)
    if refused:
        raise ConfigError(f"resume={config['resume']} continues that run with its own config, so {refused} would not "
                          f"apply: a resumed run takes only {', '.join('train.' + k for k in RESUMABLE)}; start a new "
                          f"run from its weights with init_from={config['resume']} and the settings you want")
    return budget


def _discard(run_dir: Path) -> None:
    """Remove the directory Hydra made for a run that failed to start (it holds only Hydra's .hydra/ and log),
    and the folders above it that this leaves empty, up to runs/. A directory with anything else (a checkpoint,
    a user's files) stays."""
    import shutil

    run_dir, runs = run_dir.resolve(), Path.cwd().resolve() / "runs"
    if not run_dir.is_dir() or run_dir == Path.cwd().resolve() or any(
            p.name != ".hydra" and p.suffix != ".log" for p in run_dir.iterdir()):
        return
    shutil.rmtree(run_dir)
    for parent in run_dir.parents:
        # a sweep's folder holds Hydra's multirun.yaml from the start
        if not (parent == runs or runs in parent.parents) or any(p.name != "multirun.yaml" for p in parent.iterdir()):
            break
        shutil.rmtree(parent)


def _print_summary(summary: dict) -> None:
    lines = [f"trained {summary['env_steps']:,} env steps in {summary['train_seconds']:.1f} s"]
    if summary.get("init_from"):
        lines[0] += f", starting from the policy weights of {summary['init_from']}"
    if "eval/success" in summary:
        lines.append(
            f"evaluation: success {summary['eval/success']:.1%} over {summary['eval/episodes']} episodes, "
            f"mean return {summary['eval/return']:.2f}"
        )
    lines.append(f"run directory: {summary['run_dir']}  (curve.png, metrics.jsonl, checkpoints/)")
    print("\n".join(lines), flush=True)


def _gymnasium_id(argv: list[str]) -> str | None:
    """`env=HalfCheetah-v5`: a gymnasium id where an env name goes; says how to train it."""
    from embodied import registry

    for value in (a.split("=", 1)[1] for a in argv if a.startswith("env=") and ":" not in a):
        if value not in registry.names("env"):
            import gymnasium

            if value in gymnasium.registry:
                return (f"env={value} is a gymnasium id, not a registered env; train it with "
                        f"`embodied train experiment=gym env.id={value}` (or env=gym env.id={value})")
    return None


def train(argv: list[str]) -> int:
    import hydra

    from embodied.runner.sweep import launcher_error, uses_ray_launcher

    argv = aliases(argv)
    register_configs(argv)
    unknown = launcher_error(argv) or _unknown_key(argv) or _gymnasium_id(argv)  # launcher first: it quiets Hydra
    if unknown:
        print(f"error: {unknown}", file=sys.stderr)
        return 1
    if uses_ray_launcher(argv):  # the sweep's Ray, started by the launcher in this process
        from embodied.distributed.config import workers_at_normal_priority

        workers_at_normal_priority()
    main = hydra.main(config_path=str(CONFIG_DIR), config_name="config", version_base="1.3")(_train_task)
    sys.argv = ["embodied train", *argv]
    main()
    return 0


def evaluate_cmd(argv: list[str]) -> int:
    import torch
    import yaml

    from embodied.config import ConfigError
    from embodied.device import resolve_device
    from embodied.runner import checkpoint
    from embodied.runner.evaluate import eval_seed, evaluate
    from embodied.build import make_env, make_policy
    from embodied.text_env import TextEnv, instance_seed
    from embodied.text_rollout import evaluate_text

    parser = argparse.ArgumentParser(prog="embodied eval", description="Evaluate a trained policy.")
    parser.add_argument("path", type=Path, help="a run directory or a checkpoint directory")
    parser.add_argument("--episodes", type=int, default=1000, help="number of evaluation episodes (default 1000)")
    parser.add_argument("--seed", type=int, default=None,
                        help="seed of the evaluation episodes (default: the run's own, so that with the run's "
                             "train.eval_episodes it reproduces the figure the run printed)")
    parser.add_argument("--device", default=None, help="device override (default: the run's)")
    parser.add_argument("--stochastic", action="store_true",
                        help="sample actions instead of taking the mean (a language agent: sample its replies)")
    parser.add_argument("--disturbance", default=None,
                        help="a disturbance preset of the env (quadrotor: none, push, gust, payload, motor, all, mix; "
                             "sims/quadrotor/disturbance.py); default: the run's own env.disturbance")
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                        help="override one env setting for this evaluation, e.g. --env language_shift=1 (arm_reach: "
                             "the words name another ball); repeatable")
    args = parser.parse_args(argv)
    try:
        ckpt = checkpoint.find_checkpoint(args.path)
        config, weights = checkpoint.load_config(ckpt), checkpoint.load_model(ckpt)
    except (FileNotFoundError, checkpoint.DamagedCheckpointError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    if args.disturbance is not None:  # the env's presets: the choices of its Config's `disturbance` field
        import typing

        from embodied import registry

        env_name = config["env"]["name"]
        presets = typing.get_args(typing.get_type_hints(registry.resolve("env", env_name).Config).get("disturbance"))
        if args.disturbance not in presets:
            valid = f"valid presets: {', '.join(presets)}" if presets else f"env {env_name} has no disturbance presets"
            print(f"error: unknown --disturbance {args.disturbance!r}; {valid}", file=sys.stderr)
            return 1
        config = {**config, "env": {**config["env"], "disturbance": args.disturbance}}
    overrides = {}
    for item in args.env:
        key, sep, value = item.partition("=")
        if not sep or not key:
            print(f"error: --env {item!r}: expected KEY=VALUE, e.g. --env language_shift=1", file=sys.stderr)
            return 1
        overrides[key] = yaml.safe_load(value)
    config = {**config, "env": {**config["env"], **overrides}}
    disturbance = config["env"].get("disturbance", "none")
    seed = eval_seed(int(config["seed"])) if args.seed is None else args.seed
    torch.set_num_threads(int(config.get("threads", 1)))
    try:
        env = make_env(config, args.episodes, resolve_device(args.device or config["device"]))
    except ConfigError as err:  # an unknown key or a bad value: the env's own message names it
        print(f"error: {err}", file=sys.stderr)
        return 1
    policy = make_policy(config, env)
    policy.load_state_dict(weights)
    deterministic = not args.stochastic and config["train"].get("eval_deterministic", True)  # the run's protocol
    if isinstance(env, TextEnv):  # a language agent: the held-out split's first instances
        result = evaluate_text(policy, env, [instance_seed("heldout", i) for i in range(args.episodes)],
                               deterministic=deterministic, sample_seed=seed)
        print(f"{config['name']}: held-out success {result['success']:.1%} (95% interval {result['success_low']:.1%}"
              f"-{result['success_high']:.1%}) over {result['episodes']} episodes, mean return "
              f"{result['return']:.2f}, mean turns {result['turns']:.1f}  ({ckpt})")
        (ckpt / "eval.json").write_text(json.dumps(result, indent=1))
        return 0
    result = evaluate(policy, env, seed=seed, deterministic=deterministic)
    changed = "".join(f", {k}={v}" for k, v in overrides.items())
    print(
        f"{config['name']}: success {result['success']:.1%} over {result['episodes']} episodes "
        f"(disturbance {disturbance}{changed}), mean return {result['return']:.2f}, mean length "
        f"{result['length']:.1f}  ({ckpt})"
    )
    (ckpt / "eval.json").write_text(json.dumps({**result, "seed": seed, "disturbance": disturbance,
                                                "env": overrides}, indent=1))
    return 0


def deploy_cmd(argv: list[str]) -> int:
    from embodied.registry import component

    deploy, export = component("deploy"), component("export")

    parser = argparse.ArgumentParser(prog="embodied deploy", description="Run a trained policy on a robot.")
    parser.add_argument("path", type=Path, help="a run directory or a checkpoint directory")
    parser.add_argument("overrides", nargs="*", help="robot=<name or configs/robot preset>, robot.<key>=<value>")
    parser.add_argument("--dry-run", action="store_true", help="fly the robot's simulator instead of the hardware")
    parser.add_argument("--episodes", type=int, default=1)
    parser.add_argument("--steps", type=int, default=500, help="control steps per episode")
    parser.add_argument("--hz", type=float, default=None, help="control rate (default: the training env's)")
    parser.add_argument("--course", default=None, help="waypoints 'x,y,z;x,y,z;...' (m) for a drone")
    parser.add_argument("--disturbance", default="none",
                        help="with --dry-run on a MAVLink robot: a disturbance preset in the vehicle simulator's "
                             "physics (none, push, gust, payload, motor, all, mix; sims/quadrotor/disturbance.py)")
    parser.add_argument("--disturbance-seed", type=int, default=0, help="seed of the disturbance preset's draws")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the twin's draws (goals the robot does not measure); episode i uses seed + i")
    parser.add_argument("--log-dir", type=Path, default=None, help="episode store of every command and observation")
    parser.add_argument("--no-status", action="store_true", help="no live status line")
    parser.add_argument("--allow-unchecked", action="store_true",
                        help="deploy although a policy/robot meaning is undeclared (shapes are still checked)")
    parser.add_argument("--export", type=Path, default=None,
                        help="write TorchScript, ONNX and (state policies only) C to DIR and exit")
    args = parser.parse_args(argv)
    try:
        if args.export:
            for kind, file in export(args.path, args.export).items():
                print(f"{kind}: {file}")
            return 0
        settings = component("deploy_settings")(dry_run=args.dry_run, episodes=args.episodes, steps=args.steps, control_hz=args.hz,
                                  log_dir=args.log_dir, status=not args.no_status,
                                  allow_unchecked=args.allow_unchecked, disturbance=args.disturbance,
                                  disturbance_seed=args.disturbance_seed, seed=args.seed)  # fmt: skip
        names, params = _group_overrides(args.overrides, ("robot",), "robot=<name>, robot.<key>=<value>")
        settings.robot = names.get("robot", settings.robot)
        settings.robot_params = params["robot"]
        if args.course:
            settings.course = [tuple(float(x) for x in p.split(",")) for p in args.course.split(";")]
        summaries = deploy(args.path, settings)
    except (FileNotFoundError, KeyError, ValueError, RuntimeError) as err:
        print(f"error: {err.args[0] if isinstance(err, KeyError) else err}", file=sys.stderr)
        return 1
    for summary in summaries:
        print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in summary.items()}))
    return 0


def _group_overrides(items: list[str], groups: tuple[str, ...], valid: str,
                     named: tuple[str, ...] | None = None) -> tuple[dict[str, str], dict[str, dict]]:
    """`<group>=<name>` (for the `named` groups; default all) and `<group>.<key>=<value>` command-line overrides ->
    (the names chosen, each group's params: dotted keys nest, values parse as YAML); anything else is a KeyError
    that lists `valid`."""
    import yaml

    named = groups if named is None else named
    names: dict[str, str] = {}
    params: dict[str, dict] = {group: {} for group in groups}
    for item in items:
        key, sep, value = item.partition("=")
        group = key.split(".")[0]
        if not sep or group not in groups or (key == group and group not in named):
            raise KeyError(f"unknown override {item!r}; valid: {valid}")
        if key == group:
            names[group] = value
        else:  # robot.a.b=v -> {"a": {"b": v}}
            _set_nested(params[group], key.split(".", 1)[1], yaml.safe_load(value))
    return names, params


def _set_nested(node: dict, dotted: str, value) -> None:
    """node["a"]["b"] = value for dotted "a.b", creating the dicts on the way."""
    *parents, leaf = dotted.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value


def correct_cmd(argv: list[str]) -> int:
    """A correction session (embodied/hil/session.py)."""

    from embodied.hil.session import SessionSettings, run_session
    from embodied.registry import MissingExtraError

    parser = argparse.ArgumentParser(prog="embodied correct", description="Correct a policy with a human in the loop.")
    parser.add_argument("path", type=Path, help="a run directory or a checkpoint directory")
    parser.add_argument("overrides", nargs="*", help="robot=<name|sim>, robot.<key>=<v>, teleop=<device>, teleop.<key>=<v>, "
                        "learner.<key>=<v>")  # fmt: skip
    parser.add_argument("--episodes", type=int, default=1)
    parser.add_argument("--steps", type=int, default=300, help="control steps per episode at most")
    parser.add_argument("--hz", type=float, default=None, help="control rate (default: the training env's)")
    parser.add_argument("--store", type=Path, default=Path("corrections"), help="where episodes.zarr is written")
    parser.add_argument("--learner", default="local", help="local (in process), none, or tcp://host:port of a learner")
    parser.add_argument("--keys", type=Path, default=None,
                        help="tcp:// learner: the folder from `embodied keys` (<identity>.key_secret, learner.key)")
    parser.add_argument("--insecure", action="store_true", help="tcp:// learner without keys (plaintext; loopback only)")
    parser.add_argument("--on-learner-lost", default="continue", choices=["continue", "hold"])
    parser.add_argument("--rewind-steps", type=int, default=20)
    parser.add_argument("--reward-classifier", type=Path, default=None,
                        help="a classifier from `embodied classifier`: ends an episode with reward 1 when it fires")
    parser.add_argument("--no-status", action="store_true", help="no live status line")
    args = parser.parse_args(argv)
    try:
        settings = SessionSettings(episodes=args.episodes, steps=args.steps, control_hz=args.hz, store=args.store,
                                   learner=args.learner, keys=args.keys, insecure=args.insecure,
                                   on_learner_lost=args.on_learner_lost,
                                   rewind_steps=args.rewind_steps, reward_classifier=args.reward_classifier,
                                   status=not args.no_status)  # fmt: skip
        names, params = _group_overrides(args.overrides, ("robot", "teleop", "learner"),
                                         "robot=<name>, teleop=<device>, robot.<key>=<v>, teleop.<key>=<v>, "
                                         "learner.<key>=<v>", named=("robot", "teleop"))  # fmt: skip
        for group in ("robot", "teleop", "learner"):
            if group in names:
                setattr(settings, group, names[group])
            setattr(settings, f"{group}_params", params[group])
        summaries = run_session(args.path, settings)
    except (FileNotFoundError, KeyError, ValueError, RuntimeError, MissingExtraError) as err:
        print(f"error: {err.args[0] if isinstance(err, KeyError) else err}", file=sys.stderr)
        return 1
    for summary in summaries:
        print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in summary.items()}))
    print(f"episodes written to {settings.store / 'episodes.zarr'}")
    return 0


def classifier_cmd(argv: list[str]) -> int:
    """Train a success classifier on a correction session's labelled frames (embodied/hil/reward_classifier.py)."""
    from embodied.data.store import EpisodeStore
    from embodied.hil.reward_classifier import RewardClassifierConfig, labelled_frames, save_classifier, train_classifier

    parser = argparse.ArgumentParser(prog="embodied classifier",
                                     description="Train a reward classifier on the frames labelled in correction sessions.")
    parser.add_argument("store", type=Path, help="a session's --store directory (or its episodes.zarr)")
    parser.add_argument("--out", type=Path, required=True, help="where classifier.safetensors and .json are written")
    parser.add_argument("--updates", type=int, default=RewardClassifierConfig.updates)
    parser.add_argument("--success-frames", type=int, default=RewardClassifierConfig.success_frames,
                        help="last rows of a success episode that show success")
    parser.add_argument("--threshold", type=float, default=RewardClassifierConfig.threshold)
    parser.add_argument("--state-indices", default=None, help="comma-separated state dimensions to read (default: all)")
    args = parser.parse_args(argv)
    path = args.store / "episodes.zarr" if (args.store / "episodes.zarr").is_dir() else args.store  # a session's folder
    try:
        if not path.exists():
            raise FileNotFoundError(f"no episode store at {path}")
        indices = None if args.state_indices is None else tuple(int(i) for i in args.state_indices.split(","))
        config = RewardClassifierConfig(updates=args.updates, success_frames=args.success_frames, threshold=args.threshold,
                                        state_indices=indices)  # fmt: skip
        with EpisodeStore(path) as store:
            frames, labels, episode = labelled_frames(store, config.success_frames)
        model, report = train_classifier(frames, labels, episode, config, progress=True)
    except (FileNotFoundError, KeyError, ValueError) as err:
        print(f"error: {err.args[0] if isinstance(err, KeyError) else err}", file=sys.stderr)
        return 1
    save_classifier(model, args.out)
    print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in report.items()}))
    print(f"classifier written to {args.out}; use it with: embodied correct <run> ... --reward-classifier {args.out}")
    return 0


def keys_cmd(argv: list[str]) -> int:
    """CURVE keypairs for the HIL learner and its actors (embodied/hil/transport.py)."""
    from embodied.hil.transport import generate_keys

    parser = argparse.ArgumentParser(prog="embodied keys", description="Create CURVE keys for a learner and its actors.")
    parser.add_argument("dir", type=Path, help="where the keys go (existing keys are kept)")
    parser.add_argument("--actors", nargs="+", default=["actor-0"], help="actor identities to create and authorize")
    args = parser.parse_args(argv)
    try:
        written = generate_keys(args.dir, tuple(args.actors))
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    for path in written:
        print(path)
    print(f"learner: keep {args.dir}/learner.key_secret and {args.dir}/authorized/ (settings.json: \"keys\": \"{args.dir}\"); "
          f"each robot: its <actor>.key_secret and learner.key (embodied correct ... --keys <dir>)")
    return 0


def record_cmd(argv: list[str]) -> int:
    """Episodes from a scripted expert, a trained policy or a teleop device into an episode store
    (embodied/data/record.py)."""
    import torch

    from embodied.config import ConfigError
    from embodied.data.record import record, record_from_device
    from embodied.device import resolve_device
    from embodied.registry import MissingExtraError
    from embodied.runner import checkpoint
    from embodied.build import make_env, make_policy

    parser = argparse.ArgumentParser(prog="embodied record", description="Record episodes into an episode store.")
    parser.add_argument("overrides", nargs="*", help="env=<name>, env.<key>=<value>; with --teleop also robot=<name>, "
                        "robot.<key>=<value>, teleop.<key>=<value>")  # fmt: skip
    parser.add_argument("--operator", choices=["scripted"], default=None, help="the env's scripted expert acts")
    parser.add_argument("--policy", type=Path, default=None, help="a run or checkpoint whose policy acts (its env)")
    parser.add_argument("--teleop", default=None, help="a device drives every step: keyboard, gamepad, spacemouse, "
                        "scripted (configs/teleop/) or a registry name")  # fmt: skip
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--store", type=Path, required=True, help="the episode store to append to (created if absent)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first round of episodes")
    parser.add_argument("--num-envs", type=int, default=32, help="episodes run side by side (not with --teleop)")
    parser.add_argument("--steps", type=int, default=None, help="robot=: control steps per episode (default 300)")
    parser.add_argument("--hz", type=float, default=None, help="--teleop: steps per second (default: the env's "
                        "control rate; a sim driven by the scripted device runs unpaced)")  # fmt: skip
    parser.add_argument("--action-noise", type=float, default=0.0,
                        help="std of Gaussian noise added to each action (suboptimal, more varied demonstrations)")
    parser.add_argument("--device", default="auto")
    args = parser.parse_args(argv)
    try:
        if [args.operator, args.policy, args.teleop].count(None) != 2:
            raise ValueError("give one of --operator scripted, --policy <run> or --teleop <device>")
        if args.episodes < 1 or args.num_envs < 1 or args.action_noise < 0:
            raise ValueError("--episodes and --num-envs must be >= 1, --action-noise >= 0")
        device, num_envs = resolve_device(args.device), min(args.num_envs, args.episodes)
        torch.manual_seed(args.seed)
        if args.teleop is not None:
            names, params = _group_overrides(args.overrides, ("env", "robot", "teleop"),
                                             "env=<name>, robot=<name>, env.<key>=<v>, robot.<key>=<v>, "
                                             "teleop.<key>=<v>",
                                             named=("env", "robot"))  # fmt: skip
            if "env" not in names:
                raise KeyError("--teleop needs env=<name>: the task whose observations are stored and whose actions "
                               "the device gives (with robot=<name>, the robot's observation model)")  # fmt: skip
            if args.steps is not None and "robot" not in names:
                raise ValueError("--steps sets a robot's episode length; a sim's is env.max_episode_steps=<n>")
            summary = record_from_device({"name": names["env"], **params["env"]}, args.teleop, params["teleop"],
                                         args.store, args.episodes, args.seed, names.get("robot"), params["robot"],
                                         args.steps, args.hz, str(device), progress=True)  # fmt: skip
        elif args.policy is not None:
            if args.overrides:
                raise ValueError(f"--policy records in the run's own env; drop {' '.join(args.overrides)}")
            ckpt = checkpoint.find_checkpoint(args.policy)
            config = checkpoint.load_config(ckpt)
            env = make_env(config, num_envs, device)
            policy = make_policy(config, env)
            policy.load_state_dict(checkpoint.load_model(ckpt, device))
            summary = record(env, args.store, args.episodes, args.seed, policy=policy, progress=True,
                             action_noise=args.action_noise, generator=torch.Generator().manual_seed(args.seed))
        else:
            names, params = _group_overrides(args.overrides, ("env",), "env=<name>, env.<key>=<value>")
            if "env" not in names:
                raise KeyError("--operator scripted needs env=<name>")
            env_config = {"name": names["env"], **params["env"]}
            env = make_env({"env": env_config}, num_envs, device)
            summary = record(env, args.store, args.episodes, args.seed, progress=True, action_noise=args.action_noise, generator=torch.Generator().manual_seed(args.seed))
    except (FileNotFoundError, KeyError, ValueError, RuntimeError, ConfigError, MissingExtraError,
            checkpoint.DamagedCheckpointError) as err:  # fmt: skip
        print(f"error: {err.args[0] if isinstance(err, KeyError) else err}", file=sys.stderr)
        return 1
    print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in summary.items()}))
    print(f"episodes appended to {args.store}; train from it with data={args.store}")
    return 0


def data_cmd(argv: list[str]) -> int:
    """Show an episode store or a LeRobot v3 dataset; convert one into the other (embodied/data/cli.py)."""
    from embodied.data.cli import main as data_main

    return data_main(argv)


def list_cmd() -> int:
    from embodied import registry

    for kind in registry.REGISTRY:
        for name, entry in sorted(registry.entries(kind).items()):
            extra = f"  [extra: {entry.extra}]" if entry.extra else ""
            source = f"  (from {entry.dist})" if entry.dist else ""
            print(f"{kind:8s} {name:24s} {entry.target}{extra}{source}")
    experiments = sorted(p.stem for p in (CONFIG_DIR / "experiment").glob("*.yaml"))
    print("experiments:", ", ".join(experiments))
    return 0


def sweep_cmd(argv: list[str]) -> int:
    """A sweep's settings side by side across seeds (embodied/runner/sweep.py)."""
    from embodied.runner.sweep import main as sweep_main

    return sweep_main(argv)


def main() -> None:
    argv = sys.argv[1:]
    commands = {"train": train, "eval": evaluate_cmd, "deploy": deploy_cmd, "correct": correct_cmd,
                "classifier": classifier_cmd, "keys": keys_cmd, "data": data_cmd, "record": record_cmd,
                "list": lambda _argv: list_cmd(), "sweep": sweep_cmd}
    if not argv or argv[0] not in commands:
        print(__doc__.strip(), file=sys.stderr)
        sys.exit(0 if argv and argv[0] in ("-h", "--help") else 2)
    sys.exit(commands[argv[0]](argv[1:]))


if __name__ == "__main__":
    main()
