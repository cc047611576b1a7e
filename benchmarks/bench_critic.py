"""MSE critic vs HL-Gauss critic (Farebrother et al. 2024): the same `embodied train` run with and without
`policy.critic_bins`, a few seeds each, one run at a time; prints a markdown table.

    .venv/bin/python benchmarks/bench_critic.py --experiment arm_reach --steps 1000000 --metric success \\
        --threshold 0.9 --eval train.eval_every=4 train.eval_episodes=1000 \\
        --hl policy.critic_bins=51 policy.critic_v_min=-40 policy.critic_v_max=20 algo.value_clip=null
    .venv/bin/python benchmarks/bench_critic.py --collect <out dir>     # the table again, from finished runs

Each run is `embodied train experiment=<E> seed=<s> threads=1 train.total_env_steps=<steps> <eval> [<hl>]`,
its directory `<out>/<mse|hl>_seed<s>`. Steps to threshold: the first evaluation (during training or the
final one) whose `eval/<metric>` reaches it. The off-policy loop writes its curve to `online/metrics.jsonl`,
the on-policy trainer to `metrics.jsonl`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def curve(run_dir: Path, metric: str) -> list[tuple[int, float]]:
    """(env steps, eval/<metric>) of every evaluation of a run, in order."""
    path = run_dir / "online" / "metrics.jsonl"
    path = path if path.exists() else run_dir / "metrics.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [(r["env_steps"], r[f"eval/{metric}"]) for r in rows if f"eval/{metric}" in r]


def train(args: argparse.Namespace, arm: str, seed: int) -> float:
    run_dir = Path(args.out) / f"{arm}_seed{seed}"
    command = [sys.executable, "-m", "embodied.cli", "train", f"experiment={args.experiment}", f"seed={seed}",
               "threads=1", "train.progress=false", f"train.total_env_steps={args.steps}", *args.eval,
               *(args.hl if arm == "hl" else []), f"hydra.run.dir={run_dir}"]
    print(" ".join(command[2:]), flush=True)
    start = time.perf_counter()
    subprocess.run(command, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    (run_dir / "wall_seconds.txt").write_text(f"{wall:.1f}\n")
    return wall


def table(out: Path, metric: str, threshold: float) -> str:
    lines = [f"| arm | seed | final eval {metric} | env steps to {metric} >= {threshold:g} | wall s |",
             "|---|---|---|---|---|"]
    finals: dict[str, list[float]] = {}
    for run_dir in sorted(out.glob("*_seed*")):
        arm, seed = run_dir.name.rsplit("_seed", 1)
        points = curve(run_dir, metric)
        if not points:  # still running, or failed before its first evaluation
            continue
        reached = next((steps for steps, value in points if value >= threshold), None)
        wall = run_dir / "wall_seconds.txt"
        finals.setdefault(arm, []).append(points[-1][1])
        lines.append(f"| {arm} | {seed} | {points[-1][1]:.3f} | {reached if reached is not None else 'not reached'} | "
                     f"{wall.read_text().strip() if wall.exists() else '?'} |")
    lines += [f"\n{arm}: median final {metric} {statistics.median(v):.3f}" for arm, v in finals.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--experiment", default="arm_reach")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--steps", type=int, default=1_000_000, help="train.total_env_steps of every run")
    p.add_argument("--metric", default="success", help="eval/<metric> for the table (success, return)")
    p.add_argument("--threshold", type=float, default=0.9)
    p.add_argument("--hl", nargs="*", default=["policy.critic_bins=51", "policy.critic_v_min=-40",
                                               "policy.critic_v_max=20", "algo.value_clip=null"],
                   help="overrides of the HL-Gauss arm")
    p.add_argument("--eval", nargs="*", default=["train.eval_every=4", "train.eval_episodes=1000"],
                   help="overrides that set the evaluation schedule (both arms)")
    p.add_argument("--arms", nargs="+", choices=["mse", "hl"], default=["mse", "hl"])
    p.add_argument("--out", default="runs/bench_critic")
    p.add_argument("--collect", help="only print the table of the runs in this directory")
    args = p.parse_args(argv)
    if args.collect:
        print(table(Path(args.collect), args.metric, args.threshold))
        return
    for seed in args.seeds:  # one run at a time: seeds interleaved so machine load hits both arms alike
        for arm in args.arms:
            print(f"{arm} seed {seed}: {train(args, arm, seed):.0f} s", flush=True)
    print(table(Path(args.out), args.metric, args.threshold))


if __name__ == "__main__":
    main()
