#!/usr/bin/env bash
# The VLA from pixels over seeds (issue 19): `embodied train experiment=mujoco_reach_rgb_vla_ppo` (perception ->
# scripted demos -> BC -> PPO) for each seed at once, one process per seed, then the curves of all seeds in one figure.
#   bash benchmarks/vla_pixels_seeds.sh OUT_DIR [overrides ...]       # seeds 0 1 2 on the CPU
#   SEEDS="0 1 2" DEVICE=cuda PY=python3 bash benchmarks/vla_pixels_seeds.sh OUT_DIR   # on a GPU machine
# Writes OUT_DIR/mujoco_reach_rgb_vla_ppo/run_seed<s>/ (the runs), OUT_DIR/seed<s>.log, OUT_DIR/curves.png and
# OUT_DIR/summary.txt (after BC and after PPO, per seed). On 2 CPU cores the seeds share them: ~2 h for the three
# (BC ~20 min, PPO's 434k env steps ~95 min); on a GPU machine minutes.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: vla_pixels_seeds.sh OUT_DIR [overrides ...]}
shift
PY=${PY:-.venv/bin/python}
RUNS="$OUT/mujoco_reach_rgb_vla_ppo"
mkdir -p "$RUNS"
for seed in ${SEEDS:-0 1 2}; do
    OMP_NUM_THREADS=${THREADS:-1} "$PY" -c "from embodied.cli import main; main()" train \
        experiment=mujoco_reach_rgb_vla_ppo seed="$seed" device="${DEVICE:-cpu}" hydra.run.dir="$RUNS/run_seed$seed" "$@" \
        > "$OUT/seed$seed.log" 2>&1 &
done
wait
"$PY" benchmarks/plots.py "$RUNS" --out "$OUT/curves.png" || echo "plots.py failed: no figure"
{
    for seed in ${SEEDS:-0 1 2}; do
        echo "seed $seed: after BC $(tail -n 1 "$RUNS/run_seed$seed/bc/metrics.jsonl" 2>/dev/null)"
        echo "seed $seed: $(grep 'evaluation: success' "$OUT/seed$seed.log" | tail -n 1)"
    done
} | tee "$OUT/summary.txt"
