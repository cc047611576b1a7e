"""Time to hover: `embodied train experiment=quadrotor_hover` for several seeds, run one after another.

Reports per seed the training wall time (collection + updates, excluding the final evaluation),
env steps, final evaluation success over 1000 episodes, and when training success first
crossed 95%. Target (issue 2): >= 95% success for 3 of 3 seeds within <= 60 s of training each.

    .venv/bin/python benchmarks/bench_hover_learning.py --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from embodied.cli import compose  # noqa: E402
from embodied.runner.logger import read_metrics  # noqa: E402
from embodied.runner.trainer import Trainer  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--experiment", default="quadrotor_hover")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides")
    argv = sys.argv[1:]
    extra = [a for a in argv if "=" in a and not a.startswith("-")]  # key=value overrides, anywhere on the line
    args = parser.parse_args([a for a in argv if a not in extra])
    args.overrides = extra
    rows = []
    for seed in args.seeds:
        with tempfile.TemporaryDirectory() as tmp:
            config = compose([f"experiment={args.experiment}", f"seed={seed}", "train.progress=false",
                              "train.checkpoint_every=100000", *args.overrides])
            summary = Trainer(config, Path(tmp)).learn()
            crossed = next((r for r in read_metrics(Path(tmp)) if r.get("train/success", 0) >= 0.95), None)
        row = {"seed": seed, "train_s": summary["train_seconds"], "env_steps": summary["env_steps"],
               "eval_success": summary["eval/success"],
               "train_success_95_at_s": crossed["time"] if crossed else None}
        rows.append(row)
        print(json.dumps(row), flush=True)
    times = [r["train_s"] for r in rows]
    print(f"\n{args.experiment}: train seconds median {statistics.median(times):.1f} (min {min(times):.1f}, "
          f"max {max(times):.1f}); eval success " + ", ".join(f"{r['eval_success']:.1%}" for r in rows)
          + f"; seeds >= 95%: {sum(r['eval_success'] >= 0.95 for r in rows)}/{len(rows)}")


if __name__ == "__main__":
    main()
