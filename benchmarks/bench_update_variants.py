"""Seconds per PPO update of any experiment, eager fp32 against `algo.compile` and `algo.precision=bf16`.

    .venv/bin/python benchmarks/bench_update_variants.py experiment=mujoco_reach_rgb train.num_envs=16 --updates 5

Each variant builds the run as `embodied train` does (a Trainer from the composed config), collects and updates once
(the compiled variants compile there), then times `--updates` more updates, each on a fresh collection; variants
interleave per update so the host's drift hits all of them alike. Prints the median seconds per update and the
ratio to eager fp32.
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

VARIANTS = {"fp32": [], "compiled": ["algo.compile=true"], "bf16": ["algo.precision=bf16"],
            "compiled_bf16": ["algo.compile=true", "algo.precision=bf16"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--updates", type=int, default=5, help="timed updates per variant")
    parser.add_argument("overrides", nargs="+", help="Hydra overrides, e.g. experiment=quadrotor_hover")
    args = parser.parse_args()
    trainers, first = {}, {}
    for name, extra in VARIANTS.items():
        trainers[name] = Trainer(compose([*args.overrides, *extra, "train.progress=false"]), Path(tempfile.mkdtemp()))
        trainers[name].collector.reset(seed=0)
        start = time.perf_counter()
        trainers[name].algo.update(trainers[name].collector.collect())
        first[name] = time.perf_counter() - start
    seconds: dict[str, list[float]] = {name: [] for name in trainers}
    for _ in range(args.updates):
        for name, t in trainers.items():
            batch = t.collector.collect()
            start = time.perf_counter()
            t.algo.update(batch)
            seconds[name].append(time.perf_counter() - start)
    base = statistics.median(seconds["fp32"])
    print("| variant | first update s (compiles) | median s per update | fp32 / variant |\n|---|---|---|---|")
    for name, xs in seconds.items():
        print(f"| {name} | {first[name]:.2f} | {statistics.median(xs):.3f} | {base / statistics.median(xs):.2f}x |")


if __name__ == "__main__":
    main()
