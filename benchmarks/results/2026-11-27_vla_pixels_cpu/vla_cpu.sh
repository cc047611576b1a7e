#!/usr/bin/env bash
# Pixel VLA PPO from the CPU BC checkpoints, 3 seeds at once on the 2-core host (issue 19), code of 6600cb3.
OUT=/tmp/s27/vla
mkdir -p $OUT
cd /tmp/s27/runtree
for s in 0 1 2; do
    OMP_NUM_THREADS=1 PYTHONPATH=/tmp/s27/runtree /work/main/.venv/bin/python -m embodied.cli train \
        experiment=mujoco_reach_rgb_vla_ppo seed=$s device=cpu init_from=/work/main/.s19bc/bc_seed$s \
        pipeline.demos.episodes=0 pipeline.bc.updates=0 train.num_envs=256 train.total_env_steps=1_000_000 \
        train.max_seconds=${PPO_S:-4800} train.eval_at_start=true train.eval_every=10000 train.eval_episodes=500 \
        pipeline.online.eval_episodes=500 train.progress=false hydra.run.dir=$OUT/run_seed$s \
        > $OUT/seed$s.log 2>&1 &
done
wait
