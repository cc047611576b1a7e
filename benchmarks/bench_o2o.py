"""Offline-to-online vs online-from-scratch: online env steps to a success threshold (arm reach, MuJoCo push).

    .venv/bin/python benchmarks/bench_o2o.py                         # arm reach, 3 seeds, the settings below
    .venv/bin/python benchmarks/bench_o2o.py --methods scratch --steps 100000 --eval-every 4000 --threshold 0.8
    .venv/bin/python benchmarks/bench_o2o.py --task mujoco_push --data push_lerobot --steps 20000   # your data

Both methods are `embodied train` runs of the same pipeline code (embodied/runner/pipeline.py),
with the same online budget, env count, networks, SAC settings and evaluation:
- arm_reach   o2o: experiment=arm_reach_o2o (noisy scripted-expert demos -> BC -> IQL -> online RLPD, demos
                   50/50, with a decaying behaviour-cloning term); scratch: experiment=arm_reach_sac (uniform
                   random actions, then SAC)
- mujoco_push o2o: experiment=mujoco_push_o2o data=--data (the same stages on a recorded store or LeRobot
                   dataset); scratch: the same experiment with no data, no BC or offline stage and no BC term
                   (1,000 uniform random steps, then RLPD on online data alone)
Each online stage evaluates `eval_episodes` deterministic episodes every `eval_every` env steps.
Steps to threshold = the first evaluation point whose success >= threshold (the o2o curve
starts at step 0 with the pretrained policy). Seeds run interleaved (o2o, scratch, o2o, ...).
Writes `o2o_curves.png` and `o2o_results.json` into --out and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from benchmarks.plots import plot_curves  # noqa: E402
from embodied.cli import compose  # noqa: E402
from embodied.runner.logger import read_metrics  # noqa: E402
from embodied.runner.pipeline import Pipeline  # noqa: E402

# task -> method -> its overrides; WIDTH_UTD: the task's shared --width/--utd defaults (None: the experiment's own)
TASKS = {
    "arm_reach": {"o2o": ["experiment=arm_reach_o2o"], "scratch": ["experiment=arm_reach_sac"]},
    "mujoco_push": {"o2o": ["experiment=mujoco_push_o2o"],
                    "scratch": ["experiment=mujoco_push_o2o", "data=null", "pipeline.bc.updates=0",
                                "pipeline.offline.updates=0", "pipeline.online.offline_fraction=0",
                                "pipeline.online.random_steps=1000", "algo.bc_weight=0"]},
}
WIDTH_UTD = {"arm_reach": (128, 0.5), "mujoco_push": (None, None)}
METHODS = ("o2o", "scratch")


def run(method: str, seed: int, args: argparse.Namespace) -> list[tuple[int, float]]:
    width, utd = (WIDTH_UTD[args.task][0] if args.width is None else args.width,
                  WIDTH_UTD[args.task][1] if args.utd is None else args.utd)
    overrides = [
        *TASKS[args.task][method], f"seed={seed}", f"train.total_env_steps={args.steps}",
        "train.progress=false", f"train.eval_episodes={args.eval_episodes}",
        f"pipeline.online.eval_every={args.eval_every}", f"pipeline.online.eval_episodes={args.eval_episodes}",
        *([f"policy.actor_hidden=[{width},{width}]", f"policy.critic_hidden=[{width},{width}]"] if width else []),
        *([f"algo.utd_ratio={utd}"] if utd else []),
        *([f"data={args.data}"] if method == "o2o" and args.data else []), *args.override,
    ]
    run_dir = Path(args.out) / f"{method}_seed{seed}"
    start = time.perf_counter()
    Pipeline(compose(overrides), run_dir).learn()
    print(f"  {method} seed {seed}: {time.perf_counter() - start:.0f} s", flush=True)
    return [(r["env_steps"], r["eval/success"]) for r in read_metrics(run_dir / "online") if "eval/success" in r]


def steps_to(curve: list[tuple[int, float]], threshold: float) -> int | None:
    return next((steps for steps, success in curve if success >= threshold), None)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--steps", type=int, default=40_000, help="online env-step budget of both methods")
    p.add_argument("--threshold", type=float, default=0.8, help="eval success rate to reach")
    p.add_argument("--eval-every", type=int, default=2_000)
    p.add_argument("--eval-episodes", type=int, default=100)
    p.add_argument("--task", default="arm_reach", choices=list(TASKS))
    p.add_argument("--data", default=None, help="data= of the o2o runs (a store or LeRobot dataset; mujoco_push)")
    p.add_argument("--width", type=int, default=None, help="hidden width of actor and critics (2 layers; "
                   "default: 128 on arm_reach, the experiment's own on mujoco_push)")
    p.add_argument("--utd", type=float, default=None, help="gradient steps per env step, both methods "
                   "(default: 0.5 on arm_reach, the experiment's own on mujoco_push)")
    p.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    p.add_argument("--out", default="runs/bench_o2o")
    p.add_argument("--collect", nargs="+", default=None, metavar="DIR",
                   help="no training: read the <method>_seed<s> runs under these --out dirs of earlier invocations")
    p.add_argument("override", nargs="*", help="extra key=value overrides for both methods")
    argv = sys.argv[1:] if argv is None else argv
    extra = [a for a in argv if "=" in a and not a.startswith("-")]  # key=value overrides, anywhere on the line
    args = p.parse_args([a for a in argv if a not in extra])
    args.override = extra
    if args.task == "mujoco_push" and "o2o" in args.methods and not args.data and not args.collect:
        p.error("--task mujoco_push: give --data <store or LeRobot dataset> for the o2o runs")
    curves: dict[str, dict[int, list]] = {m: {} for m in args.methods}
    if args.collect:
        for run_dir in sorted(d for root in args.collect for d in Path(root).glob("*_seed*")):
            method, seed = run_dir.name.rsplit("_seed", 1)
            if method in curves:
                rows = read_metrics(run_dir / "online")
                curves[method][int(seed)] = [(r["env_steps"], r["eval/success"]) for r in rows if "eval/success" in r]
        args.seeds = sorted(set().union(*(c.keys() for c in curves.values())))
    else:
        for seed in args.seeds:
            for method in args.methods:
                curves[method][seed] = run(method, seed, args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "o2o_results.json").write_text(json.dumps({"args": vars(args), "curves": curves}, indent=1))
    experiment = {m: TASKS[args.task][m][0].removeprefix("experiment=") for m in METHODS}
    labelled = {f"{m} ({experiment[m]}{', no data' if m == 'scratch' else ''})": by_seed
                for m, by_seed in curves.items()}  # fmt: skip
    plot_curves(labelled, args.threshold, out / "o2o_curves.png", xlabel="online env steps",
                title=f"{args.task}: offline-to-online vs online from scratch (one line per seed)")
    print(f"\nonline env steps to {args.threshold:.0%} eval success ('>' = not reached within the run's budget)")
    print("| seed | " + " | ".join(args.methods) + " | ratio scratch / o2o |\n|---|" + "---|" * (len(args.methods) + 1))
    ratios = []
    for seed in args.seeds:
        hits = {m: steps_to(curves[m][seed], args.threshold) for m in args.methods if seed in curves[m]}
        budget = {m: curves[m][seed][-1][0] for m in hits}  # the last evaluated step of each run
        cells = [("-" if m not in hits else f"{hits[m]:,}" if hits[m] is not None else f">{budget[m]:,}")
                 for m in args.methods]
        ratio = ""
        if {"o2o", "scratch"} <= set(hits) and hits["o2o"] is not None:
            scratch = hits["scratch"] if hits["scratch"] is not None else budget["scratch"]
            ratio = f"{'>=' if hits['scratch'] is None else ''}{scratch / max(hits['o2o'], args.eval_every):.1f}x"
            ratios.append(scratch / max(hits["o2o"], args.eval_every))
        print(f"| {seed} | " + " | ".join(cells) + f" | {ratio} |")
    if ratios:
        print(f"median ratio {statistics.median(ratios):.1f}x (min {min(ratios):.1f}x); curves: {out / 'o2o_curves.png'}")


if __name__ == "__main__":
    main()
