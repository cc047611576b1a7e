"""PPO end-to-end env-steps/s: ours vs rsl_rl (rsl-rl-lib) vs Stable-Baselines3, one process, interleaved.

    .venv/bin/python benchmarks/bench_ppo.py                         # quadrotor_hover, 4096 envs x 16 steps
    .venv/bin/python benchmarks/bench_ppo.py --env arm_reach --rounds 3 --frameworks ours,rsl_rl
    .venv/bin/python benchmarks/bench_ppo.py --frameworks ours,ours_bf16,rsl_rl,sb3   # also algo.precision=bf16
    .venv/bin/python benchmarks/bench_ppo.py --profile               # where one of our iterations spends its time
    python benchmarks/bench_ppo.py --device cuda --num-envs 1024       # all three on one GPU (scripts/gpu_check.sh)

All three train the same torch VecEnv class (ours directly, the peers through
benchmarks/adapters.py) with the same networks and PPO settings, taken from our
`PPOConfig` / `MLPConfig` defaults; the printed table says where a peer cannot
match. One PPO iteration = collect num_envs x steps transitions + the update;
env-steps/s = iterations * num_envs * steps / seconds, after one warm-up
iteration each. Rounds interleave the frameworks (ours, rsl_rl, sb3, ours, ...)
so machine noise hits all of them alike; ratios are medians of per-round ratios.

Our side is built and stepped exactly as `embodied train` does it: a `Trainer`
from a run config (registry-built env, MLPPolicy, PPO, Collector), and the body
of `Trainer.learn`'s loop (collect, update, observe, pop episode stats) without
its logging and checkpointing.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import dataclasses
import io
import math
import pstats
import statistics
import sys
import tempfile
import time
import types
from pathlib import Path

import torch
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from benchmarks.adapters import RslRlVecEnv, Sb3VecEnv  # noqa: E402
from embodied.algorithms.ppo import PPOConfig  # noqa: E402
from embodied.build import make_env  # noqa: E402
from embodied.runner.trainer import Trainer  # noqa: E402
from policies.mlp import MLPConfig  # noqa: E402

# ours with other settings than the peers': the update compiled (algo.compile), in bf16 (algo.precision), both; the
# next rollout collected in a second process while the update runs (train.collect_ahead, each batch one update old)
OURS = {"ours": {}, "ours_compiled": {"compile": True}, "ours_bf16": {"precision": "bf16"},
        "ours_compiled_bf16": {"compile": True, "precision": "bf16"}, "ours_ahead": {"collect_ahead": True},
        "ours_ahead_compiled_bf16": {"collect_ahead": True, "compile": True, "precision": "bf16"}}
FRAMEWORKS = (*OURS, "rsl_rl", "sb3")
DEFAULT_FRAMEWORKS = ("ours", "ours_compiled", "ours_compiled_bf16", "rsl_rl", "sb3")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--env", default="quadrotor_hover", help="registered env name (embodied.registry)")
    p.add_argument("--num-envs", type=int, default=4096)
    p.add_argument("--steps", type=int, default=16, help="rollout steps per env per iteration")
    p.add_argument("--iters", type=int, default=8, help="timed PPO iterations per framework per round")
    p.add_argument("--sb3-iters", type=int, default=None, help="SB3's timed iterations per round (default: --iters)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    p.add_argument("--peer-threads", type=int, default=None,
                   help="torch threads for rsl_rl and SB3 (default: --threads), e.g. 2 against ours collecting ahead, "
                        "which runs one thread in each of two processes")
    p.add_argument("--device", default="cpu", help="torch device for all three (env, networks, update): cpu or cuda")
    p.add_argument("--env-set", action="append", default=[], metavar="KEY=VALUE",
                   help="an env config value for all three, e.g. cuda_graph=true (repeatable; YAML values)")
    p.add_argument("--frameworks", default=",".join(DEFAULT_FRAMEWORKS), help=f"comma list of {', '.join(FRAMEWORKS)}")
    p.add_argument("--no-sb3-vecnormalize", action="store_true", help="SB3 without VecNormalize (no obs normalization)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--profile", action="store_true", help="profile our side only, then exit")
    p.add_argument("--cprofile", type=int, default=0, metavar="N", help="with --profile: also print cProfile's top N")
    args = p.parse_args(argv)
    args.sb3_iters = args.iters if args.sb3_iters is None else args.sb3_iters
    args.frameworks = [f.strip() for f in args.frameworks.split(",") if f.strip()]
    if any("=" not in item for item in args.env_set):
        p.error(f"--env-set takes KEY=VALUE, got {args.env_set}")
    args.env_config = {k: yaml.safe_load(v) for k, v in (item.split("=", 1) for item in args.env_set)}
    unknown = set(args.frameworks) - set(FRAMEWORKS)
    if unknown:
        p.error(f"unknown frameworks {sorted(unknown)}; valid: {', '.join(FRAMEWORKS)}")
    return args


# --- the shared settings and what each peer makes of them ----------------------------------


@dataclasses.dataclass(frozen=True)
class Settings:
    """Everything the three frameworks must agree on; PPO and network values are our defaults."""

    env_name: str
    num_envs: int
    steps: int
    seed: int
    threads: int
    device: str
    env_config: dict
    ppo: PPOConfig
    mlp: MLPConfig

    @property
    def env(self) -> dict:
        """The env's config section: its name and the --env-set values."""
        return {"name": self.env_name, **self.env_config}

    @property
    def minibatch(self) -> int:
        return self.num_envs * self.steps // self.ppo.minibatches


def hyperparameter_table(s: Settings, sb3_vecnormalize: bool) -> str:
    p, m = s.ppo, s.mlp
    lr = f"{p.lr:g}"
    sched = f"adaptive KL {p.desired_kl}" if p.desired_kl else "fixed"
    hidden = f"{list(m.actor_hidden)}/{list(m.critic_hidden)} {m.activation.upper()}, separate"
    vclip = f"{p.value_clip} (max of clipped/unclipped)" if p.value_clip else "off"
    rows = [
        ("env", " ".join([s.env_name, *(f"{k}={v}" for k, v in s.env_config.items())]), "same class via RslRlVecEnv", "same class via Sb3VecEnv (numpy)"),
        ("num_envs x steps", f"{s.num_envs} x {s.steps}", "same", "same (n_envs, n_steps)"),
        ("epochs x minibatches", f"{p.epochs} x {p.minibatches} (mb {s.minibatch})", "same",
         f"n_epochs {p.epochs}, batch_size {s.minibatch}"),
        ("lr / schedule", f"{lr} / {sched} (k3 KL of samples, per mb)",
         f"{lr} / adaptive KL {p.desired_kl} (Gaussian KL, per mb)" if p.desired_kl else f"{lr} / fixed",
         f"{lr} / fixed (no adaptive schedule)"),
        ("gamma / lambda", f"{p.gamma} / {p.lam}", "same", "same"),
        ("clip (policy)", f"{p.clip}", "same", "same"),
        ("value clip", vclip, f"{p.clip} (= clip_param, max form)" if p.value_clip else "off",
         f"{p.value_clip} (clipped prediction only, no max)" if p.value_clip else "off"),
        ("value loss weight", f"{p.value_coef} x 0.5 (v-R)^2", f"{0.5 * p.value_coef:g} x (v-R)^2",
         f"vf_coef {0.5 * p.value_coef:g} x mse"),
        ("entropy coef", f"{p.entropy_coef}", "same", "same"),
        ("max grad norm", f"{p.max_grad_norm} (all params)", f"{p.max_grad_norm} (actor, critic separately)",
         f"{p.max_grad_norm} (all params)"),
        ("advantage norm", "whole batch" if p.normalize_advantage else "off", "whole batch", "per minibatch"),
        ("networks", hidden, "same (MLPModel x2)", "same (net_arch pi/vf)"),
        ("init", "orthogonal sqrt2 / 0.01 / 1", "torch default (kaiming-uniform)", "orthogonal sqrt2 / 0.01 / 1"),
        ("action std", f"state-indep. log std, init {m.init_std}", "same (GaussianDistribution, log)",
         "same (log_std_init)"),
        ("obs normalization", "running mean/std, in policy, per iteration" if m.normalize_obs else "off",
         "EmpiricalNormalization, per iteration" if m.normalize_obs else "off",
         "VecNormalize (numpy, per env step, outside the net)" if sb3_vecnormalize else "none"),
        ("time-out bootstrap", "V(final obs), batched", "r += gamma V(s_t) (extras['time_outs'])",
         "V(terminal_observation), one env at a time"),
        ("Adam eps", "1e-8", "1e-8", "1e-8 (SB3 default 1e-5 overridden)"),
        ("actor / critic input", "obs['state'] / obs['state']", "obs_groups state / state", "'state' (Box)"),
        ("stored per step", "every obs key", "every obs group", "'state' only"),
    ]
    widths = [max(len(r[i]) for r in rows + [("setting", "ours", "rsl_rl", "sb3")]) for i in range(4)]
    line = lambda r: "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |"  # noqa: E731
    out = [line(("setting", "ours", "rsl_rl", "sb3")), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    return "\n".join(out + [line(r) for r in rows])


# --- the three contestants: build, then run(k) runs k PPO iterations -----------------------


class Ours:
    """Our side, built as `embodied train` builds it: a Trainer from a run config."""

    name = "ours"

    def __init__(self, s: Settings, collect_ahead: bool = False, **algo):
        p, m = dataclasses.replace(s.ppo, **algo), s.mlp
        config = {
            "name": "bench_ppo", "seed": s.seed, "threads": s.threads, "device": s.device,
            "env": s.env,
            "policy": {"name": "mlp", **dataclasses.asdict(m)},
            "algo": {"name": "ppo", **dataclasses.asdict(p)},
            "train": {"num_envs": s.num_envs, "rollout_steps": s.steps, "progress": False,
                      "collect_ahead": collect_ahead},
        }
        self._tmp = tempfile.TemporaryDirectory()  # Trainer wants a run dir; nothing is written here
        self.trainer = Trainer(config, Path(self._tmp.name))
        self.trainer.collector.reset(seed=s.seed)

    def run(self, iterations: int) -> None:
        t = self.trainer
        for _ in range(iterations):  # the body of Trainer.learn's loop, minus logging and checkpoints
            batch = t.collector.collect()
            t.algo.update(batch)
            t.policy.observe(batch["obs"])
            t.collector.pop_episode_stats()
        if hasattr(t.collector, "close"):  # collect_ahead: the collection in flight ends in this timing, and its
            t.collector.state_dict()         # worker waits, not competing with the next framework's

class RslRl:
    """rsl_rl's OnPolicyRunner (v5 config format: class_name dicts, obs_groups) over RslRlVecEnv."""

    name = "rsl_rl"

    def __init__(self, s: Settings):
        from rsl_rl.runners import OnPolicyRunner

        p, m = s.ppo, s.mlp
        activation = {"silu": "swish"}.get(m.activation, m.activation)  # rsl_rl's name for SiLU
        env = RslRlVecEnv(make_env({"env": s.env}, s.num_envs, torch.device(s.device)), seed=s.seed)
        train_cfg = {
            "num_steps_per_env": s.steps,
            "save_interval": 10**9,
            "obs_groups": {"actor": ["state"], "critic": ["state"]},
            "algorithm": {
                "class_name": "PPO",
                "num_learning_epochs": p.epochs,
                "num_mini_batches": p.minibatches,
                "clip_param": p.clip,
                "gamma": p.gamma,
                "lam": p.lam,
                "value_loss_coef": 0.5 * p.value_coef,  # ours has 0.5 (v - R)^2 inside the value loss
                "entropy_coef": p.entropy_coef,
                "learning_rate": p.lr,
                "max_grad_norm": p.max_grad_norm,
                "use_clipped_value_loss": p.value_clip is not None,
                "schedule": "adaptive" if p.desired_kl else "fixed",
                "desired_kl": p.desired_kl or 0.01,
                "normalize_advantage_per_mini_batch": False,
            },
            "actor": {
                "class_name": "MLPModel",
                "hidden_dims": list(m.actor_hidden),
                "activation": activation,
                "obs_normalization": m.normalize_obs,
                "distribution_cfg": {"class_name": "GaussianDistribution", "init_std": m.init_std, "std_type": "log"},
            },
            "critic": {
                "class_name": "MLPModel",
                "hidden_dims": list(m.critic_hidden),
                "activation": activation,
                "obs_normalization": m.normalize_obs,
            },
        }
        with contextlib.redirect_stdout(io.StringIO()):  # it prints both models and the obs groups
            self.runner = OnPolicyRunner(env, train_cfg, log_dir=None, device=s.device)

    def run(self, iterations: int) -> None:
        self.runner.learn(num_learning_iterations=iterations)


class Sb3:
    """SB3's PPO("MlpPolicy") over Sb3VecEnv, optionally wrapped in VecNormalize for observations."""

    name = "sb3"

    def __init__(self, s: Settings, vecnormalize: bool = True):
        from stable_baselines3 import PPO
        from stable_baselines3.common.logger import Logger
        from stable_baselines3.common.vec_env import VecNormalize

        p, m = s.ppo, s.mlp
        self.steps_per_iteration = s.num_envs * s.steps
        venv = Sb3VecEnv(make_env({"env": s.env}, s.num_envs, torch.device(s.device)))
        if vecnormalize and m.normalize_obs:
            # clip_obs=inf: ours and rsl_rl normalize without clipping
            venv = VecNormalize(venv, norm_obs=True, norm_reward=False, clip_obs=math.inf, gamma=p.gamma)
        act = {"elu": torch.nn.ELU, "tanh": torch.nn.Tanh, "relu": torch.nn.ReLU, "silu": torch.nn.SiLU}[m.activation]
        self.model = PPO(
            "MlpPolicy", venv,
            learning_rate=p.lr, n_steps=s.steps, batch_size=s.minibatch, n_epochs=p.epochs,
            gamma=p.gamma, gae_lambda=p.lam, clip_range=p.clip, clip_range_vf=p.value_clip,
            normalize_advantage=p.normalize_advantage, ent_coef=p.entropy_coef,
            vf_coef=0.5 * p.value_coef,  # SB3's F.mse_loss has no 0.5; ours does
            max_grad_norm=p.max_grad_norm, target_kl=None, seed=s.seed, device=s.device, verbose=0,
            policy_kwargs={
                "net_arch": {"pi": list(m.actor_hidden), "vf": list(m.critic_hidden)},
                "activation_fn": act,
                "log_std_init": math.log(m.init_std),
                "ortho_init": True,
                "optimizer_kwargs": {"eps": 1e-8},
            },
        )
        self.model.set_logger(Logger(None, []))  # learn() would configure one writing to an SB3-<date> folder in /tmp

    def run(self, iterations: int) -> None:
        self.model.learn(total_timesteps=iterations * self.steps_per_iteration, reset_num_timesteps=False,
                         log_interval=None)


# --- timing ---------------------------------------------------------------------------------


def build(name: str, s: Settings, args: argparse.Namespace):
    torch.manual_seed(s.seed)
    if name in OURS:
        return Ours(s, **OURS[name])
    if name == "rsl_rl":
        return RslRl(s)
    return Sb3(s, vecnormalize=not args.no_sb3_vecnormalize)


def settings_from(args: argparse.Namespace) -> Settings:
    return Settings(args.env, args.num_envs, args.steps, args.seed, args.threads, args.device, args.env_config,
                    PPOConfig(), MLPConfig())


def sync(device: str) -> None:
    """Wait for queued CUDA kernels, so a timer read after it counts them (a no-op on the CPU)."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def flops_per_env_step(policy: torch.nn.Module, epochs: int) -> float:
    """Model FLOPs per env step: actor+critic forward at collection, forward+backward (3x) per epoch.

    Counts the Linear layers' multiply-adds only (2 FLOPs each), the part a GEMM peak
    (bench_gemm.py) bounds; activations, the optimizer and the env are left out.
    """
    macs = sum(m.in_features * m.out_features for m in policy.modules() if isinstance(m, torch.nn.Linear))
    return 2 * macs * (1 + 3 * epochs)


def benchmark(args: argparse.Namespace) -> tuple[dict[str, list[float]], float]:
    """(env-steps/s per framework and round, model FLOPs per env step of the networks all three train)."""
    s = settings_from(args)
    print(hyperparameter_table(s, sb3_vecnormalize=not args.no_sb3_vecnormalize), flush=True)
    runners = {}
    for name in args.frameworks:
        start = time.perf_counter()
        torch.set_num_threads(threads_for(name, args))
        try:
            runner = build(name, s, args)
            runner.run(1)  # warm-up: allocations, first-call dispatch, lazy buffers (and ours_compiled's compile)
        except Exception as err:  # e.g. torch.compile without a working inductor backend on this device
            if name == "ours":
                raise
            print(f"{name}: left out, it failed to build or run: {type(err).__name__}: {err}", flush=True)
            continue
        runners[name] = runner
        sync(s.device)
        print(f"built {name} + 1 warm-up iteration in {time.perf_counter() - start:.1f} s", flush=True)
    per_iteration = s.num_envs * s.steps
    rates: dict[str, list[float]] = {name: [] for name in runners}
    for r in range(args.rounds):
        for name, runner in runners.items():
            k = args.sb3_iters if name == "sb3" else args.iters
            torch.set_num_threads(threads_for(name, args))
            sync(s.device)
            start = time.perf_counter()
            runner.run(k)
            sync(s.device)
            seconds = time.perf_counter() - start
            rates[name].append(k * per_iteration / seconds)
            rate = rates[name][-1]
            print(f"round {r + 1}/{args.rounds} {name:7s} {k} it in {seconds:6.2f} s: {rate:>10,.0f} env-steps/s",
                  flush=True)
    policy = (runners["ours"] if "ours" in runners else Ours(s)).trainer.policy
    return rates, flops_per_env_step(policy, s.ppo.epochs)


def threads_for(name: str, args: argparse.Namespace) -> int:
    return args.peer_threads if name in ("rsl_rl", "sb3") and args.peer_threads else args.threads


def summarize(rates: dict[str, list[float]], flops: float) -> str:
    lines = [f"| framework | median env-steps/s | min - max | rounds | model GFLOP/s ({flops / 1e3:.0f} kFLOP/step) |",
             "|---|---|---|---|---|"]
    for name, xs in rates.items():
        lines.append(f"| {name} | {statistics.median(xs):,.0f} | {min(xs):,.0f} - {max(xs):,.0f} | {len(xs)} "
                     f"| {statistics.median(xs) * flops / 1e9:.1f} |")
    pairs = [(a, b) for a in OURS for b in ("rsl_rl", "sb3", "ours") if a != b and a in rates and b in rates]
    if pairs:
        lines.append("")
    for a, b in pairs:
        ratios = [x / y for x, y in zip(rates[a], rates[b])]
        lines.append(f"{a} / {b}: {statistics.median(ratios):.2f}x (median of per-round ratios: "
                     f"{', '.join(f'{x:.2f}' for x in ratios)})")
    return "\n".join(lines)


# --- profile of our side --------------------------------------------------------------------


def _parts(t: Trainer) -> list:
    """Our iteration as a tree of (label, owner, attribute, children, label of the untimed rest)."""
    import embodied.algorithms.ppo as ppo_module

    leaf = lambda label, owner, attr: (label, owner, attr, [], None)  # noqa: E731
    return [
        ("collect", t.collector, "collect", [
            leaf("env.step", t.env, "step"),
            leaf("policy.act", t.policy, "act"),
            leaf("policy.value (time-out and last-step bootstrap)", t.policy, "value"),
        ], "storage + bookkeeping (step TensorDict, buf[t] = step, episode tracking)"),
        ("update", t.algo, "update", [
            leaf("gae", ppo_module, "gae"),
            leaf("advantage normalize", ppo_module, "normalize"),
            ("minibatch step", t.algo, "_step", [
                leaf("policy.evaluate (forward)", t.policy, "evaluate"),
                leaf("ppo_loss", ppo_module, "ppo_loss"),
                leaf("clip_grad_norm_", torch.nn.utils, "clip_grad_norm_"),
                leaf("adam step", t.algo.optimizer, "step"),
                leaf("adapt lr", t.algo, "_adapt_lr"),
            ], "backward + zero_grad + isfinite check"),
        ], "flatten + minibatch gather flat[idx] + metric sums"),
        leaf("observe (obs normalizer update)", t.policy, "observe"),
        leaf("pop_episode_stats", t.collector, "pop_episode_stats"),
    ]


class _Timers:
    """Wraps callables in place (instance or module attributes) and sums their wall time per label."""

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self._undo: list = []

    def wrap(self, owner, attr: str, label: str) -> None:
        fn = getattr(owner, attr)
        seconds, calls = self.seconds, self.calls
        seconds[label], calls[label] = 0.0, 0

        def timed(*a, **kw):
            start = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                seconds[label] += time.perf_counter() - start
                calls[label] += 1

        own = isinstance(owner, types.ModuleType) or attr in vars(owner)
        self._undo.append((owner, attr, fn if own else None))
        setattr(owner, attr, timed)

    def restore(self) -> None:
        for owner, attr, fn in reversed(self._undo):
            if fn is None:
                delattr(owner, attr)  # back to the class's method
            else:
                setattr(owner, attr, fn)


def profile_ours(args: argparse.Namespace) -> str:
    """Wall time per part of our iteration (env step, policy act, storage, GAE, minibatch update)."""
    s = settings_from(args)
    ours = Ours(s)
    ours.run(1)
    parts = _parts(ours.trainer)
    timers = _Timers()

    def wrap_all(nodes, prefix=""):
        for label, owner, attr, children, _ in nodes:
            timers.wrap(owner, attr, prefix + label)
            wrap_all(children, prefix + label + "/")

    wrap_all(parts)
    profiler = cProfile.Profile() if args.cprofile else None
    start = time.perf_counter()
    if profiler:
        profiler.enable()
    ours.run(args.iters)
    if profiler:
        profiler.disable()
    total = time.perf_counter() - start
    timers.restore()

    n = args.iters
    rows = []

    def row(depth: int, label: str, seconds: float, calls: int | None) -> None:
        per = "" if calls is None else f"{calls / n:g}"
        rows.append(f"| {'. ' * depth}{label} | {1e3 * seconds / n:.1f} | {100 * seconds / total:.1f}% | {per} |")

    def emit(nodes, prefix="", depth=0) -> float:
        covered = 0.0
        for label, _, _, children, rest in nodes:
            key = prefix + label
            row(depth, label, timers.seconds[key], timers.calls[key])
            inner = emit(children, key + "/", depth + 1)
            if rest:
                row(depth + 1, rest, timers.seconds[key] - inner, None)
            covered += timers.seconds[key]
        return covered

    head = (f"profile of ours: {n} iterations of {s.num_envs} envs x {s.steps} steps on {s.env_name}, {total:.2f} s, "
            f"{n * s.num_envs * s.steps / total:,.0f} env-steps/s (timing wrappers{' + cProfile' if profiler else ''})")
    rows += [head, "", "| part | ms / iteration | share | calls / iteration |", "|---|---|---|---|"]
    covered = emit(parts)
    row(0, "loop (untimed)", total - covered, None)
    out = "\n".join(rows)
    if profiler:
        buf = io.StringIO()
        pstats.Stats(profiler, stream=buf).sort_stats("tottime").print_stats(args.cprofile)
        out += "\n\n" + buf.getvalue()
    return out


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    where = torch.cuda.get_device_name(0) if torch.device(args.device).type == "cuda" else "cpu"
    print(f"torch {torch.__version__}, {where}, {torch.get_num_threads()} thread(s), env {args.env}, "
          f"{args.num_envs} envs x {args.steps} steps, date {time.strftime('%Y-%m-%d %H:%M')}", flush=True)
    if args.profile:
        print(profile_ours(args))
        return
    rates, flops = benchmark(args)
    print("\n" + summarize(rates, flops))


if __name__ == "__main__":
    main()
