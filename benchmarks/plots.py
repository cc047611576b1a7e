"""Success curves of two or more methods, one line per seed, with the threshold the benchmark asks for.

    plot_curves({"o2o": {0: [(steps, success), ...]}, "scratch": {...}}, 0.8, path, title=..., xlabel=...)
"""

from __future__ import annotations

from pathlib import Path


def plot_curves(curves: dict[str, dict[int, list[tuple[int, float]]]], threshold: float, path: Path, *, title: str,
                xlabel: str) -> None:  # fmt: skip
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for color, (label, by_seed) in enumerate(curves.items()):
        for i, (_, curve) in enumerate(sorted(by_seed.items())):
            xs, ys = zip(*curve)
            ax.plot(xs, ys, color=f"C{color}", alpha=0.8, label=label if i == 0 else None)
    ax.axhline(threshold, color="gray", linestyle="--", linewidth=1, label=f"threshold {threshold:.0%}")
    ax.set(xlabel=xlabel, ylabel="eval success rate", ylim=(-0.02, 1.02), title=title)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
