"""Success curves of two or more methods, one line per seed, with the threshold the benchmark asks for.

    plot_curves({"o2o": {0: [(steps, success), ...]}, "scratch": {...}}, 0.8, path, title=..., xlabel=...)

As a script: the evaluation curves (`eval/success` in metrics.jsonl, e.g. from `train.eval_every`) of
`embodied train` run directories, one colour per experiment, one line per seed:

    .venv/bin/python benchmarks/plots.py runs/arm_reach_diffusion_ppo runs/arm_reach_flow_ppo --out curves.png

`--metric train/success --smooth 10` plots the training episodes' success instead (every iteration logs it),
as a mean over the last 10 iterations; `--from-steps N` leaves out the points before N env steps.
"""

from __future__ import annotations

from pathlib import Path


def plot_curves(curves: dict[str, dict[int, list[tuple[int, float]]]], threshold: float | None, path: Path, *,
                title: str, xlabel: str, ylabel: str = "eval success rate") -> None:  # fmt: skip
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for color, (label, by_seed) in enumerate(curves.items()):
        for i, (_, curve) in enumerate(sorted(by_seed.items())):
            xs, ys = zip(*curve)
            ax.plot(xs, ys, color=f"C{color}", alpha=0.8, label=label if i == 0 else None)
    if threshold is not None:
        ax.axhline(threshold, color="gray", linestyle="--", linewidth=1, label=f"threshold {threshold:.0%}")
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    ax.set_ylim(-0.02, 1.02 if threshold is not None else None)  # no threshold: zoom onto the curves
    ax.grid(alpha=0.3)
    ax.legend(loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    import argparse
    import json
    import sys

    import numpy as np

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from embodied.runner.logger import read_metrics

    parser = argparse.ArgumentParser(description="eval/success curves of run directories")
    parser.add_argument("experiments", type=Path, nargs="+", help="runs/<name> folders holding *_seed<N> runs")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--title", default="deterministic evaluation during training (one line per seed)")
    parser.add_argument("--metric", default="eval/success", help="the metrics.jsonl key to plot")
    parser.add_argument("--smooth", type=int, default=1, help="mean over this many logged points")
    parser.add_argument("--from-steps", type=int, default=0, help="leave out points before this many env steps (the "
                        "first rollouts after a synchronous reset count only the episodes that ended early)")
    args = parser.parse_args()
    metric = args.metric
    curves = {}
    for folder in args.experiments:
        for run in sorted(folder.glob("*_seed*")):
            online = run / "online" if (run / "online").is_dir() else run  # a pipeline's RL stage, or the run
            records = [r for r in read_metrics(online) if metric in r]
            ys = np.array([r[metric] for r in records], dtype=float)
            means = [ys[max(0, i + 1 - args.smooth) : i + 1].mean() for i in range(len(ys))]  # the last `smooth`
            points = [(r["env_steps"], float(m)) for r, m in zip(records, means) if r["env_steps"] >= args.from_steps]
            # the curve starts at the evaluation after behaviour cloning, where there is one
            bc = [r["eval/success"] for r in read_metrics(run / "bc") if "eval/success" in r]
            if points and bc and bc[-1] is not None and metric == "eval/success":
                points.insert(0, (0, bc[-1]))
            if points:
                curves.setdefault(folder.name, {})[int(run.name.rsplit("_seed", 1)[1])] = points
    plot_curves(curves, None, args.out, title=args.title, xlabel="env steps", ylabel=metric.replace("/", " "))
    print(f"wrote {args.out}: " + ", ".join(f"{k} ({len(v)} runs)" for k, v in curves.items()))


if __name__ == "__main__":
    main()
