#!/usr/bin/env bash
# The pixel VLA's PPO at many envs on a GPU machine (issue 19 item 1: RL over the VLA from pixels, 3 seeds). Each seed
# starts from its BC checkpoint .s31bc/bc_seed<s> (`embodied train experiment=mujoco_reach_rgb_vla_ppo seed=<s>
# train.total_env_steps=0`: the tower's perception stage, 500 demos, 2000 BC updates; BC=.s19bc: sessions 17-30's,
# made before the perception stage, with the tower trained in BC); a seed without one first runs that BC here.
# One process per seed, all at once; each evaluates its BC weights first (500 episodes, train.eval_at_start) and
# again after PPO, so before and after are the same protocol on the same machine.
# Why many envs: nothing in the first frame predicts a sampled episode's outcome (RESULTS.md, session 17), so the
# advantages need many episodes per update: 256 envs x 32 steps is ~220 episodes per update against ~27 at 32 envs.
# On a device machine (carry .whl .gl, made here by scripts/device_prepare.sh, and .s31bc if made before; python3
# there holds CUDA torch but not mujoco, zarr or hydra):
#   OUT=<dir> bash benchmarks/vla_pixels_gpu_job.sh                       # BC where missing, then PPO_S s of PPO
#   OUT=<dir2> RESUME=<dir> PPO_S=<more> bash benchmarks/vla_pixels_gpu_job.sh   # a second call: carry <dir> (an
#       ignored folder holding the first call's run_seed<s>.tar); each seed's run goes on until PPO_S seconds of PPO
#       in all (resume= with train.max_seconds)
# Each call leaves in $OUT (the device returns at most 8 files, 16 MiB each, 2 folders down): run_seed<s>.tar (the
# seed's config and online/ latest checkpoint and metrics, ~7 MB), bc.tar (the BC checkpoints it made, if any, 1.1 MB
# a seed), logs.tar.gz (the logs and each seed's PPO metrics) and summary.txt (each seed's evaluations and the median
# seconds an iteration spent collecting and updating). Knobs: PPO_S (seconds of PPO per seed, in all), N (envs per
# seed), SEEDS, BC (the folder of the BC runs, .s31bc; another folder with BC_EXTRA and EXTRA="env.image_size=96"
# runs BC and PPO at another setting in one call), THREADS (env.num_threads: physics threads), LIMIT (seconds the
# whole job may take: every run is stopped in time for the outputs to be written, inside the device call's 600 s),
# EXTRA (more overrides of the PPO runs), BC_EXTRA (of the BC runs), PY, DEVICE.
# train.eval_every=10000: no evaluation mid-run (500 pixel episodes each), the curve between is the training success.
# Speed (NVIDIA H200, three seeds at once, 256 envs, a median iteration of 8,192 env steps): session 19's ~440
# env-steps/s a seed was ~19 s collecting and ~0.4 s updating. The collection was the cameras: one GL read-back a
# frame (~80% of it under cProfile) and every env drawn twice in a step with a reset. Session 30 drew only the reset
# envs again (9.8 s) and the frames as tiles of one buffer read back at once (2.1 s): ~3,300 env-steps/s a seed with
# the update (benchmarks/RESULTS.md, "Tiled frames"). The envs draw with one renderer on a GPU whatever
# env.num_threads says (threads drew 2.0-3.5x slower there), and THREADS only sets the physics threads.
set -u
OUT=${OUT:-/tmp/out}
PY=${PY:-python3}
if [ "$PY" = python3 ]; then . scripts/device_env.sh || exit 1; fi  # the wheels and the GL loaders
PPO_S=${PPO_S:-390}
N=${N:-256}
SEEDS=${SEEDS:-0 1 2}
LIMIT=${LIMIT:-570}
BC=${BC:-.s31bc}  # where each seed's BC run is (bc_seed<s>), carried or made here
# train SECONDS ARGS...: at most SECONDS, and never past LIMIT - 25 s of the job (the outputs are written after)
train() {
    local left=$((LIMIT - 25 - SECONDS))
    OMP_NUM_THREADS=2 timeout "$(( $1 < left ? $1 : left ))" "$PY" -m embodied.cli train "${@:2}"
}
nproc; nvidia-smi --query-gpu=name,memory.total --format=csv 2>/dev/null; git rev-parse HEAD 2>/dev/null
mkdir -p /tmp/v "$OUT"
for s in $SEEDS; do  # BC where no checkpoint came along (3 seeds at once, ~24 min each on 2 CPU cores)
    [ -n "${RESUME:-}" ] || [ -d $BC/bc_seed$s ] || train 1200 experiment=mujoco_reach_rgb_vla_ppo seed=$s \
        device=${DEVICE:-cuda} train.total_env_steps=0 env.num_threads=${THREADS:-4} train.progress=false \
        hydra.run.dir=$BC/bc_seed$s ${BC_EXTRA:-} > "$OUT/bc_seed$s.log" 2>&1 &
done
wait
for s in $SEEDS; do
    if [ -n "${RESUME:-}" ]; then
        tar -xf "$RESUME/run_seed$s.tar" -C /tmp/v
        train $((PPO_S + 300)) resume=/tmp/v/run_seed$s train.max_seconds=$PPO_S > "$OUT/pixel_seed$s.log" 2>&1 &
    else
        rm -rf /tmp/v/run_seed$s  # a run folder left by an earlier call on this machine would be resumed
        train $((PPO_S + 300)) experiment=mujoco_reach_rgb_vla_ppo seed=$s device=${DEVICE:-cuda} \
            init_from=$BC/bc_seed$s pipeline.demos.episodes=0 pipeline.perception.updates=0 pipeline.bc.updates=0 \
            train.num_envs=$N \
            env.num_threads=${THREADS:-4} train.total_env_steps=4_000_000 train.max_seconds=$PPO_S \
            train.eval_at_start=true train.eval_every=10000 train.eval_episodes=500 pipeline.online.eval_episodes=500 \
            train.progress=false hydra.run.dir=/tmp/v/run_seed$s ${EXTRA:-} > "$OUT/pixel_seed$s.log" 2>&1 &
    fi
done
wait
for s in $SEEDS; do
    cp /tmp/v/run_seed$s/online/metrics.jsonl "$OUT/pixel_seed${s}_ppo_metrics.jsonl" 2>/dev/null
    echo "seed $s: $(grep -h 'evaluation: success\|trained' "$OUT/pixel_seed$s.log" | tr '\n' ' ')"
    grep -q "^trained" "$OUT/pixel_seed$s.log" || echo "  not finished: stopped at LIMIT=$LIMIT s, or failed (its log)"
    "$PY" -c "import json, statistics as st, sys; rows = [json.loads(l) for l in open(sys.argv[1])]
rows = [r for r in rows if 'time/collect' in r]
print(f'  {len(rows)} iterations, median s collecting / updating:',
      *(round(st.median(r[k] for r in rows), 2) for k in ('time/collect', 'time/update')))" \
        "$OUT/pixel_seed${s}_ppo_metrics.jsonl" 2>/dev/null
done | tee "$OUT/summary.txt"
for s in $SEEDS; do  # a tar a seed: with the aux loss's optimizer state, three seeds in one passed 16 MiB
    tar -cf "$OUT/run_seed$s.tar" -C /tmp/v run_seed$s/config.yaml run_seed$s/online/metrics.jsonl \
        run_seed$s/online/checkpoints/latest
done
made=$(for s in $SEEDS; do [ -f $BC/bc_seed$s/config.yaml ] && echo $BC/bc_seed$s/config.yaml \
    $BC/bc_seed$s/bc/checkpoints/final; done)  # the BC runs this call made (a carried checkpoint has no config)
[ -n "${RESUME:-}" ] || [ -z "$made" ] || tar -cf "$OUT/bc.tar" $made
(cd "$OUT" && logs=$(ls ./*.log ./*_ppo_metrics.jsonl 2>/dev/null) && tar -czf logs.tar.gz $logs && rm -f $logs)
ls -la "$OUT"
