"""A sweep's runs side by side: per setting, the mean and 95% interval across seeds of the runs' final metrics.

    embodied train -m seed=0,1,2 algo.lr=1e-4,3e-4 hydra/launcher=ray   # runs/multirun/<time>/<num>_<name>_seed<seed>
    embodied sweep runs/multirun/<time>                                   # a markdown table, and sweep.png there
    embodied sweep runs/multirun/<time> --metric eval/success --metric algo/approx_kl --out lr.png

A run is a folder of the sweep with Hydra's `.hydra/overrides.yaml`. Its setting is its overrides of the keys
whose value differs between the sweep's runs, seed aside: runs that differ only in their seed are one setting.
A run's final metrics are each key's last value in its metrics.jsonl (a pipeline's: its online stage's, then its
summary.json); `train_seconds` is the training time of the last record. Only finished runs count (a final
checkpoint, or a pipeline's summary.json): a run still going would mix its mid-run values in.

The Ray launcher is Hydra's hydra-ray-launcher plugin, its settings in configs/hydra/launcher/ray.yaml;
`launcher_error` checks, before Hydra starts, that what it needs is installed.
"""

from __future__ import annotations

import argparse
import difflib
import importlib.util
import json
import math
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

from embodied.runner.logger import read_metrics

METRICS = ("eval/success", "eval/return", "train/return", "train_seconds")  # shown unless --metric says otherwise

# t_{0.975, df}: the two-sided 95% critical values of Student's t, NIST/SEMATECH e-Handbook of Statistical
# Methods, table 1.3.6.7.2 (https://www.itl.nist.gov/div898/handbook/eda/section3/eda3672.htm). Between the
# listed df beyond 30 the smaller df's value is taken (a slightly wider interval); 1.960 is the normal limit.
T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
         11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093,
         20: 2.086, 21: 2.080, 22: 2.074, 23: 2.069, 24: 2.064, 25: 2.060, 26: 2.056, 27: 2.052, 28: 2.048,
         29: 2.045, 30: 2.042, 40: 2.021, 60: 2.000, 100: 1.984}  # fmt: skip


@dataclass(frozen=True)
class Run:
    path: Path
    overrides: dict[str, str]  # key -> value, as given on the command line (`algo.lr` -> `3e-4`)
    seed: int | str
    metrics: dict[str, float]  # final values (`final_metrics`)


@dataclass(frozen=True)
class Stat:
    mean: float
    half: float  # half-width of the 95% t-interval; nan for a single run
    n: int


def t_interval(values: list[float]) -> Stat:
    """Mean and half-width of the 95% confidence interval of the mean, t_{0.975, n-1} * s / sqrt(n)."""
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return Stat(mean, math.nan, n)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    df = n - 1
    t = T_975[max(d for d in T_975 if d <= df)] if df <= 100 else 1.960
    return Stat(mean, t * std / math.sqrt(n), n)


def final_metrics(run_dir: Path) -> dict[str, float]:
    """Each metric's last value: metrics.jsonl (a pipeline's online stage: online/metrics.jsonl), then the
    summary.json a pipeline writes; `time` becomes `train_seconds`."""
    source = run_dir / "online" if (run_dir / "online").is_dir() else run_dir
    values: dict[str, float] = {}
    for record in read_metrics(source):
        values.update(record)
    if "time" in values:
        values["train_seconds"] = values.pop("time")
    summary = run_dir / "summary.json"
    if summary.exists():
        values.update(json.loads(summary.read_text()))
    return {k: float(v) for k, v in values.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def finished(run_dir: Path) -> bool:
    """A Trainer saves checkpoints/final at its end (then evaluates), a pipeline writes summary.json last."""
    return (run_dir / "checkpoints" / "final").is_dir() or (run_dir / "summary.json").exists()


def read_sweep(sweep_dir: Path) -> list[Run]:
    """The sweep's finished runs, in job order. FileNotFoundError naming `sweep_dir` where it is no sweep or none
    of its runs finished; an unfinished run (still running, or failed) is left out with a notice."""
    import yaml

    sweep_dir = Path(sweep_dir)
    if not sweep_dir.is_dir():
        raise FileNotFoundError(f"no such directory: {sweep_dir}")
    if (sweep_dir / ".hydra").is_dir():
        raise FileNotFoundError(f"{sweep_dir} is a single run, not a sweep: give the folder above its runs "
                                "(runs/multirun/<time>, from `embodied train -m ...`)")
    folders = sorted((p.parent.parent for p in sweep_dir.glob("*/.hydra/overrides.yaml")), key=_job_order)
    if not (sweep_dir / "multirun.yaml").exists() or not folders:  # Hydra writes multirun.yaml as a sweep starts
        raise FileNotFoundError(f"{sweep_dir} is not a sweep: a sweep's folder holds Hydra's multirun.yaml and a "
                                "folder per run with .hydra/overrides.yaml (runs/multirun/<time>, from `embodied "
                                "train -m ...`)")
    runs, empty = [], []
    for folder in folders:
        overrides = dict(o.split("=", 1) for o in yaml.safe_load((folder / ".hydra/overrides.yaml").read_text()) or []
                         if "=" in o)  # fmt: skip
        metrics = final_metrics(folder) if finished(folder) else {}
        if not metrics:
            empty.append(folder.name)
            continue
        seed = overrides.get("seed")
        if seed is None:  # not on the command line: the config's
            seed = (yaml.safe_load((folder / ".hydra/config.yaml").read_text()) or {}).get("seed", "?")
        runs.append(Run(folder, overrides, int(seed) if str(seed).lstrip("-").isdigit() else seed, metrics))
    if not runs:
        raise FileNotFoundError(f"no run of the sweep {sweep_dir} has finished (a final checkpoint and metrics.jsonl):"
                                f" {', '.join(empty)} (still running, or stopped)")
    if empty:
        print(f"notice: left out the runs that have not finished (still running, or stopped): {', '.join(empty)}",
              file=sys.stderr)
    return runs


def _job_order(folder: Path) -> tuple:
    num = folder.name.split("_", 1)[0]  # Hydra's <job num>_...
    return (0, int(num), folder.name) if num.isdigit() else (1, 0, folder.name)


def settings(runs: list[Run]) -> tuple[dict[str, list[Run]], list[str]]:
    """Group the runs by setting: ("key=value ...", in the first run's key order, for the keys whose value
    differs between runs, seed aside) -> its runs; and the overrides every run shares."""
    keys = list(dict.fromkeys(k for run in runs for k in run.overrides))
    swept = [k for k in keys if k != "seed" and len({run.overrides.get(k) for run in runs}) > 1]
    common = [f"{k}={runs[0].overrides[k]}" for k in keys if k != "seed" and k not in swept]
    groups: dict[str, list[Run]] = {}
    for run in runs:
        label = " ".join(f"{k}={run.overrides[k]}" for k in swept if k in run.overrides) or "(all runs)"
        groups.setdefault(label, []).append(run)
    return groups, common


def aggregate(groups: dict[str, list[Run]], metrics: list[str]) -> dict[str, dict[str, Stat | None]]:
    """setting -> metric -> mean and interval over the setting's runs that logged it (None: none did)."""
    return {label: {m: t_interval([r.metrics[m] for r in runs if m in r.metrics]) if any(m in r.metrics for r in runs)
                    else None for m in metrics}  # fmt: skip
            for label, runs in groups.items()}


def table(groups: dict[str, list[Run]], stats: dict[str, dict[str, Stat | None]], metrics: list[str]) -> str:
    """A markdown table: one row per setting, `mean ± half-width` per metric (`(n=k)` where fewer runs logged it)."""
    lines = ["| setting | seeds | " + " | ".join(metrics) + " |", "|---|---|" + "---|" * len(metrics)]
    for label, runs in groups.items():
        cells = []
        for m in metrics:
            s = stats[label][m]
            cell = "–" if s is None else f"{s.mean:.4g}" if s.n < 2 else f"{s.mean:.4g} ± {s.half:.2g}"
            cells.append(cell + (f" (n={s.n})" if s is not None and s.n < len(runs) else ""))
        seeds = ",".join(str(r.seed) for r in runs)
        lines.append(f"| {label} | {seeds} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(groups: dict[str, list[Run]], stats: dict[str, dict[str, Stat | None]], metrics: list[str], path: Path,
         title: str) -> Path:  # fmt: skip
    """One panel per metric: each setting's mean with its 95% interval, and its runs' values as dots."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [textwrap.fill(label, 28) for label in groups]  # long settings: several lines under the axis
    width, height = max(3.2, 0.7 * len(labels) + 1.6), 3.6 + 0.2 * max(label.count("\n") for label in labels)
    fig, axes = plt.subplots(1, len(metrics), figsize=(width * len(metrics), height), squeeze=False)
    for ax, m in zip(axes[0], metrics):
        for x, label in enumerate(groups):
            s = stats[label][m]
            if s is None:
                continue
            ax.errorbar([x], [s.mean], yerr=[0.0 if math.isnan(s.half) else s.half], fmt="o", color="C0", capsize=5)
            ys = [r.metrics[m] for r in groups[label] if m in r.metrics]
            ax.plot([x] * len(ys), ys, ".", color="gray", alpha=0.6)
        slanted = len(labels) > 3  # long setting labels would overlap
        ax.set_xticks(range(len(labels)), labels, rotation=30 if slanted else 0, ha="right" if slanted else "center")
        ax.set(title=m, xlim=(-0.5, len(labels) - 0.5))
        if m.endswith("success"):  # a rate: the whole range, as curve.png shows it
            ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    fig.suptitle(f"{title}\nmean and 95% interval across seeds; dots: runs", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="embodied sweep", description="Compare a sweep's settings across seeds.")
    parser.add_argument("dir", type=Path, help="the sweep's folder (runs/multirun/<time>, from embodied train -m)")
    parser.add_argument("--metric", action="append", default=None,
                        help=f"a metrics.jsonl key or train_seconds, repeatable (default: {', '.join(METRICS)})")
    parser.add_argument("--out", type=Path, default=None, help="the plot (default: <dir>/sweep.png)")
    args = parser.parse_args(argv)
    try:
        runs = read_sweep(args.dir)
    except FileNotFoundError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    logged = {m for run in runs for m in run.metrics}
    metrics = args.metric or [m for m in METRICS if m in logged]
    unknown = [m for m in metrics if m not in logged]
    if unknown or not metrics:
        close = [c for m in unknown for c in difflib.get_close_matches(m, logged, n=1)]
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        print(f"error: no run of {args.dir} logged {', '.join(unknown) or ', '.join(METRICS)}{hint}; "
              f"its metrics: {', '.join(sorted(logged))}", file=sys.stderr)
        return 1
    groups, common = settings(runs)
    stats = aggregate(groups, metrics)
    shared = f"; every run: {' '.join(common)}" if common else ""
    print(f"sweep {args.dir}: {len(runs)} runs, {len(groups)} settings{shared}")
    print("final metrics, mean ± half-width of the 95% t-interval across seeds\n")
    print(table(groups, stats, metrics))
    out = plot(groups, stats, metrics, args.out or args.dir / "sweep.png", title=args.dir.resolve().name)
    print(f"\nplot: {out}")
    return 0


def uses_ray_launcher(argv: list[str]) -> bool:
    return any(a.lstrip("+") == "hydra/launcher=ray" for a in argv)


def launcher_error(argv: list[str]) -> str | None:
    """`embodied train -m ... hydra/launcher=ray` without what it needs: the message naming the extra (checked
    before Hydra starts, which would fail inside the launch). Imports nothing of Ray."""
    if not uses_ray_launcher(argv):
        return None
    import warnings

    # configs/hydra/launcher/ray.yaml stands in for the plugin's config of the same name, which Hydra 1.3 merges
    # with a deprecation warning per composition; the result is the plugin's config with our keys
    warnings.filterwarnings("ignore", message=r"\s*'hydra/launcher/ray' is validated against ConfigStore schema")
    missing = [name for name, module in (("ray", "ray"), ("hydra-ray-launcher", "hydra_plugins.hydra_ray_launcher"))
               if not _installed(module)]
    if not missing:
        return None
    return (f"hydra/launcher=ray needs the optional package{'s' if len(missing) > 1 else ''} "
            f"{' and '.join(repr(m) for m in missing)}: pip install -e '.[ray]' && "
            "pip install --no-deps hydra-ray-launcher==1.2.2 (scripts/setup.sh with the ray extra does both)")


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # its parent package (hydra_plugins) is absent
        return False
