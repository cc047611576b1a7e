"""RLPD with vs without scripted-operator interventions: env steps to a success threshold.

    .venv/bin/python benchmarks/bench_hil.py --env mujoco_push --seeds 0 1 2 --max-steps 60000 --threshold 0.8

Both runs of a seed share everything (policy and critic sizes, RLPD settings, eval episodes) and run
interleaved in this process; "hil" adds the scripted operator of embodied/hil/operators.py (the
env's scripted expert taking over under the DriftRule), whose rows are flagged
`is_intervention` and copied into the demonstration buffer that RLPD samples 50/50 with the online
one (HIL-SERL's recipe). Operator steps count as env steps. Evaluation: deterministic policy alone
(no operator), `--eval-episodes` episodes every `--eval-every` env steps. Prints per-seed steps to
threshold and the median ratio (without / with).
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere
from benchmarks.plots import plot_curves  # noqa: E402

from embodied import registry
from embodied.hil.intervention import InterventionActor
from embodied.hil.learner import Learner, LearnerConfig
from embodied.hil.operators import scripted_operator
from embodied.runner.evaluate import evaluate
from embodied.runner.offpolicy import UniformPolicy
from real_robot.teleop.scripted import ScriptedOperator, ScriptedOperatorConfig


class _NoOperator(ScriptedOperator):
    def __init__(self, action_dim: int):
        super().__init__(ScriptedOperatorConfig(action_dim=action_dim), expert=lambda obs: None,
                         rule=lambda obs: torch.zeros(obs.batch_size[0], dtype=torch.bool))  # fmt: skip


def run(seed: int, hil: bool, args) -> dict:
    torch.manual_seed(seed)
    env = registry.build("env", args.env, {}, num_envs=args.num_envs)
    eval_env = registry.build("env", args.env, {}, num_envs=args.eval_episodes)
    dim = env.action_spec.shape[0]
    hidden = (args.hidden, args.hidden)
    policy = registry.build("policy", "sac_mlp", {"actor_hidden": hidden, "critic_hidden": hidden, "num_critics": 10,
                                                  "layer_norm": True}, observation_spec=env.observation_spec,
                            action_spec=env.action_spec)  # fmt: skip
    algo = registry.build("algo", "rlpd", {"batch_size": args.batch_size, "utd_ratio": args.utd, "init_alpha": args.init_alpha,
                                           "bc_weight": args.bc_weight}, policy=policy)  # fmt: skip
    learner = Learner(policy, algo, LearnerConfig(min_buffer=args.batch_size, buffer_capacity=200_000,
                                                  max_updates_per_call=10**9), seed=seed)  # fmt: skip
    params = {"action_dim": dim, "min_steps": args.min_steps, "max_per_episode": args.max_per_episode}
    operator = scripted_operator(env, params) if hil else _NoOperator(dim)
    random_policy = UniformPolicy(-1.0, 1.0, (dim,), env.device)
    actor = InterventionActor(env, policy, operator)
    actor.reset(seed=seed)
    steps, curve, start, human = 0, [], time.perf_counter(), 0
    while steps < args.max_steps:
        actor.policy = random_policy if steps < args.random_steps else policy
        row, _ = actor.step()
        human += int(row["is_intervention"].sum())
        learner.add(row)
        learner.train()
        steps += args.num_envs
        if steps % args.eval_every < args.num_envs:
            success = evaluate(policy, eval_env, seed=seed + 1_000_003)["success"]
            curve.append((steps, round(success, 3)))
            print(f"  seed {seed} {'hil ' if hil else 'rlpd'} {steps:>7} steps  success {success:.2f}  "
                  f"operator steps {human}  {time.perf_counter() - start:.0f} s", flush=True)  # fmt: skip
            if success >= args.threshold:
                break
    reached = curve[-1][0] if curve and curve[-1][1] >= args.threshold else None
    return {"reached": reached, "curve": curve, "operator_steps": human, "seconds": time.perf_counter() - start}


def parse_logs(paths: list[Path]) -> dict[tuple[int, bool], list[tuple[int, float]]]:
    """Curves {(seed, hil): [(env steps, success)]} from the per-evaluation lines `run` prints."""
    line = re.compile(r"^\s+seed (\d+) (hil|rlpd)\s+(\d+) steps\s+success ([\d.]+)")
    curves: dict[tuple[int, bool], list[tuple[int, float]]] = {}
    for path in paths:
        for match in filter(None, map(line.match, path.read_text().splitlines())):
            seed, kind, steps, success = match.groups()
            curves.setdefault((int(seed), kind == "hil"), []).append((int(steps), float(success)))
    return curves


def plot(curves: dict[tuple[int, bool], list[tuple[int, float]]], args) -> None:
    by_method: dict[str, dict[int, list]] = {"RLPD": {}, "RLPD + scripted interventions": {}}
    for (seed, hil), curve in curves.items():
        by_method["RLPD + scripted interventions" if hil else "RLPD"][seed] = curve
    plot_curves(by_method, args.threshold, args.plot, xlabel="env steps (operator steps included)",
                title=f"{args.env}: RLPD with vs without interventions (one line per seed)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="arm_reach", help="an env with a scripted operator (embodied/hil/operators.py)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--min-steps", type=int, default=10, help="steps the operator keeps control once it took over")
    parser.add_argument("--max-per-episode", type=int, default=2, help="operator takeovers per episode at most")
    parser.add_argument("--max-steps", type=int, default=60_000)
    parser.add_argument("--threshold", type=float, default=0.8)
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--eval-every", type=int, default=2_000)
    parser.add_argument("--eval-episodes", type=int, default=100)
    parser.add_argument("--random-steps", type=int, default=2_000)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--utd", type=float, default=1.0, help="RLPD uses 20; 1 keeps a CPU run affordable")
    parser.add_argument("--init-alpha", type=float, default=1.0, help="initial SAC temperature (RLPD: 1.0)")
    parser.add_argument("--bc-weight", type=float, default=0.0,
                        help="algo.bc_weight: behaviour cloning on the intervention rows (the demo source)")
    parser.add_argument("--plot", type=Path, default=None, help="write the success curves to this PNG")
    parser.add_argument("--collect", type=Path, nargs="+", default=None, metavar="LOG",
                        help="only plot: read the curves from logs this script printed (with --plot)")
    args = parser.parse_args()
    if args.collect:
        curves = parse_logs(args.collect)
        plot(curves, args)
        return
    torch.set_num_threads(1)
    results = {}
    for seed in args.seeds:  # interleaved: both conditions of a seed back to back
        for hil in (False, True):
            results[(seed, hil)] = run(seed, hil, args)
    print("\n| seed | RLPD steps to threshold | RLPD + interventions | operator steps | ratio | final success RLPD / + interventions |")
    print("|---|---|---|---|---|---|")
    ratios = []
    for seed in args.seeds:
        base, hil = results[(seed, False)], results[(seed, True)]
        # an unreached baseline counts as its whole budget: the ratio is then a lower bound (">=")
        b = base["reached"] or args.max_steps
        ratio = b / hil["reached"] if hil["reached"] else float("nan")
        ratios.append(ratio)
        fmt = lambda r: f"{r:,}" if r else f"> {args.max_steps:,}"  # noqa: E731
        last = f"{base['curve'][-1][1]:.2f} / {hil['curve'][-1][1]:.2f}" if base["curve"] and hil["curve"] else "-"
        bound = ">= " if not base["reached"] else ""
        print(f"| {seed} | {fmt(base['reached'])} | {fmt(hil['reached'])} | {hil['operator_steps']:,} | {bound}{ratio:.2f}x | {last} |")
    if args.plot:
        plot({(seed, hil): r["curve"] for (seed, hil), r in results.items()}, args)
    finite = [r for r in ratios if r == r]
    if finite:
        print(f"median ratio {statistics.median(finite):.2f}x (min {min(finite):.2f}x, max {max(finite):.2f}x); "
              "a ratio with an unreached baseline is a lower bound")  # fmt: skip


if __name__ == "__main__":
    main()
