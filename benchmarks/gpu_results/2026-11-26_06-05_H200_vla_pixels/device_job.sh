#!/usr/bin/env bash
# device job: pixel VLA 3 seeds (BC -> PPO) + language-following VLA sizes, in parallel
set -u
nproc; nvidia-smi --query-gpu=name,memory.total --format=csv
python3 -c "import transformers, torch; print('transformers', transformers.__version__, 'torch', torch.__version__)"
mkdir -p /tmp/v /tmp/lang
for size in "128 4" "256 4"; do
  set -- $size
  ( OMP_NUM_THREADS=1 timeout 480 python3 -c "from embodied.cli import main; main()" train experiment=arm_reach_vla_bc \
      env.goal_in_state=false device=cuda seed=0 policy.hidden=$1 policy.layers=$2 pipeline.demos.episodes=500 \
      pipeline.bc.updates=3000 pipeline.bc.eval_every=1000 train.eval_episodes=1000 hydra.run.dir=/tmp/lang/h$1_l$2 \
      > /tmp/lang/h$1_l$2.log 2>&1
    for shift in 1 2; do timeout 60 python3 -m embodied.cli eval /tmp/lang/h$1_l$2 --episodes 1000 --env language_shift=$shift >> /tmp/lang/h$1_l$2.log 2>&1; done ) &
done
SEEDS="0 1 2" DEVICE=cuda PY=python3 THREADS=2 timeout 500 bash benchmarks/vla_pixels_seeds.sh /tmp/v train.max_seconds=200
wait
cp /tmp/v/seed*.log /tmp/v/summary.txt /tmp/v/curves.png $OUT/ 2>/dev/null
tar czf $OUT/runs.tgz --exclude='*.zarr' --exclude='checkpoints' -C /tmp v lang
tail -n 3 /tmp/lang/*.log
