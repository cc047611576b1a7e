"""Env-steps/s of the main job's training loop (collect, update, observe), collecting in turn against
`train.collect_ahead=true`, at 512 and 1024 envs; or of another experiment's, at its own envs.

    .venv/bin/python benchmarks/bench_collect_ahead.py --rounds 5 --iters 20
    .venv/bin/python benchmarks/bench_collect_ahead.py --experiment mujoco_push --rounds 5 --iters 3

Each arm builds the run as `embodied train experiment=quadrotor_hover` does (a Trainer from the composed config) and
runs 5 untimed iterations; then the arms take turns, `--iters` timed iterations each per round, so the host's drift
hits all of them alike. A collect-ahead arm's last collection is waited for before the next arm runs (untimed).
Prints the median env-steps/s over rounds with its range, and the ratio to collecting in turn at 512 envs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from embodied.compose import compose  # noqa: E402
from embodied.runner.trainer import Trainer  # noqa: E402

ARMS = {"in turn, 512 envs": ["train.collect_ahead=false", "train.num_envs=512"],
        "ahead, 512 envs": ["train.collect_ahead=true", "train.num_envs=512"],
        "in turn, 1024 envs": ["train.collect_ahead=false", "train.num_envs=1024"],
        "ahead, 1024 envs": ["train.collect_ahead=true", "train.num_envs=1024"]}


def iterate(trainer: Trainer, iters: int) -> float:
    """Env-steps/s over `iters` iterations of the Trainer's loop body."""
    steps, start = 0, time.perf_counter()
    for _ in range(iters):
        batch = trainer.collector.collect()
        trainer.algo.update(batch)
        trainer.policy.observe(batch["obs"])
        steps += trainer.collector.count(batch)
    rate = steps / (time.perf_counter() - start)
    trainer.collector.state_dict()  # a collection ahead lands here, not in the next arm's time
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iters", type=int, default=20, help="timed iterations per arm and round")
    parser.add_argument("--experiment", default="quadrotor_hover",
                        help="another experiment runs two arms at its own train.num_envs (e.g. mujoco_push)")
    args = parser.parse_args()
    arms = ARMS if args.experiment == "quadrotor_hover" else {
        "in turn": ["train.collect_ahead=false"], "ahead": ["train.collect_ahead=true"]}
    trainers = {}
    for name, extra in arms.items():
        over = [f"experiment={args.experiment}", *extra, "train.progress=false", "train.eval_episodes=0",
                "train.eval_every=0"]
        trainers[name] = Trainer(compose(over), Path(tempfile.mkdtemp()))
        trainers[name].collector.reset(seed=0)
        iterate(trainers[name], 5)
    rates: dict[str, list[float]] = {name: [] for name in trainers}
    for _ in range(args.rounds):
        for name, trainer in trainers.items():
            rates[name].append(iterate(trainer, args.iters))
    base = statistics.median(next(iter(rates.values())))
    print("| arm | env-steps/s, median (min-max) | ratio |\n|---|---|---|")
    for name, xs in rates.items():
        print(f"| {name} | {statistics.median(xs):,.0f} ({min(xs):,.0f}-{max(xs):,.0f}) | "
              f"{statistics.median(xs) / base:.2f}x |")
    for trainer in trainers.values():
        if hasattr(trainer.collector, "close"):
            trainer.collector.close()


if __name__ == "__main__":
    main()
