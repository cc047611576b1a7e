#!/usr/bin/env bash
# Issue 18's learning measurement (RESULTS.md, "Language agents"): SmolLM2-135M-Instruct + LoRA trained by GRPO on
# each language task for 90 minutes of training per seed (train.max_seconds, set in the experiments), 200 held-out
# episodes before (the same for every seed: the evaluation samples from a fixed seed) and after, 95% intervals;
# then a table and a figure of the training episodes' success per update.
#   benchmarks/bench_lm_learning.sh [OUT]                 # both tasks, seeds 0 1 2, one after another (~11 h)
#   TASKS=lm_calculator SEEDS="0 1" PARALLEL=2 benchmarks/bench_lm_learning.sh   # two runs at once, 1 thread each
# A run takes ~10 GB of memory (23 GB here: at most two at once). Extra arguments after OUT go to every run.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/lm_learning}
shift || true
EMBODIED=${EMBODIED:-.venv/bin/embodied}
PY=${PY:-.venv/bin/python}
export HF_HUB_OFFLINE=1
for task in ${TASKS:-lm_guess_number lm_calculator}; do
  # the base rate: the untrained model on the 200 held-out episodes, once per task
  if [ ! -f "$OUT/$task/base.json" ]; then
    mkdir -p "$OUT/$task"
    $PY - "$task" "$OUT/$task/base.json" <<'PY'
import json, sys
sys.path.insert(0, ".")
from embodied.cli import compose
from embodied.runner.trainer import Trainer
task, path = sys.argv[1:]
trainer = Trainer(compose([f"experiment={task}", "threads=1"]), f"{path}.run")
json.dump(trainer.evaluate(200), open(path, "w"), indent=1)
PY
  fi
  jobs=0
  for seed in ${SEEDS:-0 1 2}; do
    $EMBODIED train experiment="$task" seed="$seed" threads=1 train.progress=false train.eval_every=0 \
      train.eval_at_start=false hydra.run.dir="$OUT/$task/seed$seed" "$@" > "$OUT/$task/seed$seed.log" 2>&1 &
    jobs=$((jobs + 1))
    if [ "$jobs" -ge "${PARALLEL:-1}" ]; then wait; jobs=0; fi
  done
  wait
done
$PY - "$OUT" <<'PY'
import json, sys
from pathlib import Path
sys.path.insert(0, ".")
from benchmarks.plots import plot_curves
from embodied.runner.logger import read_metrics
out = Path(sys.argv[1])
print("| task | seed | updates | training min | held-out before | held-out after | change |")
print("|---|---|---|---|---|---|---|")
curves = {}
for task_dir in sorted(p for p in out.iterdir() if p.is_dir()):
    base = json.loads((task_dir / "base.json").read_text())
    for run in sorted(task_dir.glob("seed*[0-9]")):
        rows = read_metrics(run)
        final = [r for r in rows if "eval/success" in r][-1]
        train = [(r["iteration"], r["train/success"]) for r in rows if "train/success" in r]
        curves.setdefault(task_dir.name, {})[int(run.name[4:])] = train
        print(f"| {task_dir.name} | {run.name[4:]} | {final['iteration']} | {final['time'] / 60:.0f} | "
              f"{base['success']:.1%} ({base['success_low']:.1%}-{base['success_high']:.1%}) | "
              f"{final['eval/success']:.1%} ({final['eval/success_low']:.1%}-{final['eval/success_high']:.1%}) | "
              f"{100 * (final['eval/success'] - base['success']):+.1f} points |")
plot_curves(curves, None, out / "lm_learning.png", xlabel="GRPO updates (32 episodes each)",
            ylabel="training episodes' success", title="SmolLM2-135M-Instruct + LoRA, GRPO, per seed")
print(f"figure: {out / 'lm_learning.png'}")
PY
