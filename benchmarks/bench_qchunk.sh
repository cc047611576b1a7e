#!/usr/bin/env bash
# Q-chunking A/B on the user story's MuJoCo push data (RESULTS.md, "Action chunks: Q-chunking from data"):
# experiment=mujoco_push_o2o with policy.horizon=1 (the story's setting) and policy.horizon=4 (actor emits 4-action
# chunks, the critic scores them, chunked TD offline and online), interleaved per seed; then one figure of both.
#   benchmarks/bench_qchunk.sh DATA [OUT]     # DATA: the story's LeRobot dataset (benchmarks/user_story.sh A2)
# ~15 min on 2 CPU cores (6 runs of ~2.5 min).
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=$1
OUT=${2:-runs/qchunk}
PY=${PY:-.venv/bin/python}
export HF_HUB_OFFLINE=1
for seed in ${SEEDS:-0 1 2}; do
  for h in 1 4; do
    $PY benchmarks/bench_o2o.py --task mujoco_push --data "$DATA" --methods o2o --seeds "$seed" --steps 12000 \
      --threshold 0.8 --out "$OUT/h$h" threads=1 policy.horizon=$h
  done
done
$PY - "$OUT" <<'PY'
import json, sys
from pathlib import Path
sys.path.insert(0, ".")
from benchmarks.plots import plot_curves
from embodied.runner.logger import read_metrics
out = Path(sys.argv[1])
curves = {}
for h, label in (("h1", "horizon 1 (one-step TD)"), ("h4", "horizon 4 (Q-chunking)")):
    curves[label] = {int(d.name.rsplit("seed", 1)[1]): [(r["env_steps"], r["eval/success"])
                     for r in read_metrics(d / "online") if "eval/success" in r] for d in sorted((out / h).glob("o2o_seed*"))}
    for d in sorted((out / h).glob("o2o_seed*")):
        stage = lambda s: [round(r["eval/success"], 2) for r in read_metrics(d / s) if "eval/success" in r][-1]
        print(label, d.name, "bc", stage("bc"), "offline", stage("offline"), "online", curves[label][int(d.name[8:])])
plot_curves(curves, 0.8, out / "qchunk_curves.png", xlabel="online env steps",
            title="push o2o from 100 recorded episodes: horizon 1 vs 4")
PY
