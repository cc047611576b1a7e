#!/usr/bin/env bash
# Issue 17's user story, end to end, on MuJoCo push (RESULTS.md, "User story: record -> LeRobot -> o2o"):
#   A. record scripted-expert episodes -> export a LeRobot v3 dataset -> LeRobot 0.6.1's LeRobotDataset loads it
#      (frames, episodes, shapes, values) -> import it back, equal to the recording frame for frame
#   B. a dataset written by LeRobot's own writer (our env's rollouts) trains through data= as it is
#   C. BC -> IQL -> online RLPD from the LeRobot dataset vs online RLPD from scratch: online env steps to 80%
#
#   benchmarks/user_story.sh [OUT]     # OUT: runs/user_story; ~1.5 h on 2 CPU cores, most of it C's scratch runs
# Environment: EMBODIED, PY (our venv), LEROBOT_PY (scripts/lerobot_env.sh's env), SEEDS, NOISE, O2O_STEPS,
# SCRATCH_STEPS. Our package reaches the LeRobot env through PYTHONPATH only in tests/data/lerobot_side.py's callers.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/user_story}
EMBODIED=${EMBODIED:-.venv/bin/embodied}
PY=${PY:-.venv/bin/python}
LEROBOT_PY=${LEROBOT_PY:-.lerobot-env/bin/python}
SEEDS=${SEEDS:-0 1 2}
NOISE=${NOISE:-0.3}  # action noise of the recording: BC from the noiseless expert's 100 episodes reached 4% (seed 0)
O2O_STEPS=${O2O_STEPS:-12000}
SCRATCH_STEPS=${SCRATCH_STEPS:-70000}  # the slowest scratch seed of 2026-11-25 crossed 80% at 66k
export HF_HUB_OFFLINE=1
mkdir -p "$OUT"
set -x

# A1. record: the scripted expert, 100 episodes, Gaussian action noise (std NOISE) on every action
$EMBODIED record env=mujoco_push --operator scripted --episodes 100 --action-noise "$NOISE" --store "$OUT/push.zarr"
$EMBODIED data info "$OUT/push.zarr"
# A2. export to LeRobot v3.0
$EMBODIED data export "$OUT/push.zarr" "$OUT/push_lerobot" --fps 10
# A3. LeRobot's own LeRobotDataset reads every frame; compared with the store
$LEROBOT_PY tests/data/lerobot_side.py read "$OUT/push_lerobot" "$OUT/lerobot_read.npz"
$PY benchmarks/user_story.py lerobot "$OUT/push.zarr" "$OUT/lerobot_read.npz"
# A4. import back (obs/language at the env's 64 bytes) and compare every key, frame for frame
$EMBODIED data import "$OUT/push_lerobot" "$OUT/push_back.zarr" --language-bytes 64
$PY benchmarks/user_story.py roundtrip "$OUT/push.zarr" "$OUT/push_back.zarr"

# B. our env's rollouts (npz) -> LeRobotDataset.create / add_frame / save_episode / finalize -> data=
$PY benchmarks/user_story.py rollout mujoco_push 100 "$NOISE" "$OUT/rollout.npz"
$LEROBOT_PY tests/data/lerobot_side.py write_npz "$OUT/lerobot_written" "$OUT/rollout.npz"
$EMBODIED train experiment=mujoco_push_o2o data="$OUT/lerobot_written" seed=0 threads=1 train.progress=false \
    train.total_env_steps=4000 hydra.run.dir="$OUT/lerobot_written_run"

# C. o2o (= embodied train experiment=mujoco_push_o2o data=$OUT/push_lerobot seed=<s> train.total_env_steps=...)
#    vs scratch (the same experiment with data=null pipeline.bc.updates=0 pipeline.offline.updates=0
#    pipeline.online.offline_fraction=0 pipeline.online.random_steps=1000 algo.bc_weight=0): same 16 envs,
#    64x64 actor and 10 LayerNorm critics, batch 64, utd 1; 100 deterministic eval episodes every 2k env steps
# shellcheck disable=SC2086
$PY benchmarks/bench_o2o.py --task mujoco_push --data "$OUT/push_lerobot" --methods o2o --seeds $SEEDS \
    --steps "$O2O_STEPS" --threshold 0.8 --out "$OUT/o2o" threads=1
# shellcheck disable=SC2086
$PY benchmarks/bench_o2o.py --task mujoco_push --methods scratch --seeds $SEEDS --steps "$SCRATCH_STEPS" \
    --threshold 0.8 --out "$OUT/scratch" threads=1
$PY benchmarks/bench_o2o.py --task mujoco_push --collect "$OUT/o2o" "$OUT/scratch" --threshold 0.8 --out "$OUT"
