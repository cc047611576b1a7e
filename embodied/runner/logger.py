"""Run logging: metrics as JSONL and TensorBoard, a live progress bar, a learning-curve PNG."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn


class RunLogger:
    """Appends one JSON line per iteration to `metrics.jsonl` and mirrors scalars to TensorBoard."""

    def __init__(self, run_dir: Path, total_steps: int, start_steps: int = 0, show_progress: bool = True):
        from torch.utils.tensorboard import SummaryWriter

        self.run_dir = Path(run_dir)
        self.metrics_path = self.run_dir / "metrics.jsonl"
        self.tb = SummaryWriter(str(self.run_dir / "tensorboard"))
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            TextColumn("{task.completed:,.0f}/{task.total:,.0f} steps"),
            TextColumn("{task.fields[fps]:>9,.0f} steps/s"),
            TextColumn("return {task.fields[ret]:>8.2f}"),
            TextColumn("success {task.fields[success]:>5.1%}"),
            TimeElapsedColumn(),
            disable=not (show_progress and sys.stderr.isatty()),
        )
        self.task = self.progress.add_task("train", total=total_steps, completed=start_steps, fps=0.0, ret=0.0, success=0.0)
        self.progress.start()

    def log(self, record: dict) -> None:
        with self.metrics_path.open("a") as f:
            f.write(json.dumps(record) + "\n")
        step = record["env_steps"]
        for key, value in record.items():
            if key != "env_steps" and isinstance(value, (int, float)):
                self.tb.add_scalar(key, value, step)
        self.progress.update(
            self.task,
            completed=step,
            fps=record.get("fps", 0.0),
            ret=record.get("train/return", self.progress.tasks[0].fields["ret"]),
            success=record.get("train/success", self.progress.tasks[0].fields["success"]),
        )

    def close(self) -> None:
        self.progress.stop()
        self.tb.close()


@contextmanager
def update_progress(description: str, total: int, done: int = 0, show: bool = True) -> Iterator[Callable[[], None]]:
    """A live bar over a stage that counts updates (BC, offline RL), on a terminal: yields `advance()`."""
    bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("updates"),
                   TimeElapsedColumn(), TimeRemainingColumn(), disable=not (show and sys.stderr.isatty()))
    task = bar.add_task(description, total=total, completed=done)
    with bar:
        yield lambda: bar.advance(task)


def read_metrics(run_dir: Path) -> list[dict]:
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def truncate_metrics(run_dir: Path, iteration: int) -> None:
    """Drop records after `iteration` (written after the checkpoint a resumed run restarts from)."""
    records = [r for r in read_metrics(run_dir) if r["iteration"] <= iteration]
    (Path(run_dir) / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def plot_curve(run_dir: Path, title: str = "") -> Path:
    """Success rate and return against env steps (and wall time), from metrics.jsonl -> curve.png."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = [r for r in read_metrics(run_dir) if "train/return" in r]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    steps = [r["env_steps"] for r in records]
    axes[0].plot(steps, [r["train/success"] for r in records], label="train episodes")
    axes[1].plot(steps, [r["train/return"] for r in records])
    evals = [r for r in read_metrics(run_dir) if "eval/success" in r]
    if evals:
        axes[0].plot([r["env_steps"] for r in evals], [r["eval/success"] for r in evals], "o-", label="evaluation")
    axes[0].set(xlabel="env steps", ylabel="success rate", ylim=(-0.02, 1.02), title="success")
    axes[1].set(xlabel="env steps", ylabel="mean episode return", title="return")
    axes[0].legend(loc="upper left")
    if records:
        secs = records[-1]["time"]
        fig.suptitle(f"{title}  ({steps[-1]:,} steps, {secs:.0f} s of training)")
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.tight_layout()
    out = Path(run_dir) / "curve.png"
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
