#!/usr/bin/env bash
# The GPU checks of issue 21: every `gpu`-marked test and the GPU benchmarks, outputs under
# benchmarks/gpu_results/<UTC date and time>/ for benchmarks/RESULTS.md to cite.
#   bash scripts/gpu_check.sh            # ~8 min on one GPU
#   PY=python3 GPU_CHECK_OUT=/some/dir bash scripts/gpu_check.sh   # another interpreter, another output folder
# Without CUDA it says what it skipped and exits 0.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}

if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    echo "gpu_check: no CUDA device here (torch.cuda.is_available() is False): skipped the gpu-marked tests" \
         "(pytest -m gpu), bench_quadrotor_sim.py --device cuda, bench_ppo.py and bench_maniskill.py. Nothing written."
    exit 0
fi

# on a bare device machine (PY=python3, .whl and .gl carried: scripts/device_prepare.sh makes them here): the wheels
# and the GL loaders MuJoCo's EGL needs
if [ "$PY" = python3 ] && [ -d .whl ]; then . scripts/device_env.sh || exit 1; fi
OUT=${GPU_CHECK_OUT:-benchmarks/gpu_results/$(date -u +%Y-%m-%d_%H-%M)}
mkdir -p "$OUT"
FAILED=0
run() {  # run NAME CMD...: stdout and stderr to $OUT/NAME.txt, the exit status to the summary; 240 s at most
    echo "== $1: ${*:2}"
    timeout 240 "${@:2}" 2>&1 | tee "$OUT/$1.txt"
    local rc=${PIPESTATUS[0]}
    echo "$1 rc=$rc: ${*:2}" >> "$OUT/summary.txt"
    [ "$rc" -eq 0 ] || FAILED=1
}
has_device_flag() { "$PY" "$1" --help 2>/dev/null | grep -q -- "--device"; }

{ nvidia-smi; "$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0))"; git rev-parse HEAD; } > "$OUT/machine.txt" 2>&1

# only the files that hold gpu tests: collecting the whole suite would need every extra installed
run pytest_gpu "$PY" -m pytest -m gpu -v -rs -p no:cacheprovider $(grep -rl "pytest.mark.gpu" tests)
# the attainable matrix rate (fp32, tf32, bf16) at the PPO minibatch shapes and at 8192^3: the peak for bench_ppo's model GFLOP/s
run bench_gemm "$PY" benchmarks/bench_gemm.py --device cuda
# the quadrotor sim at N = 4096-262144 (issue 21); 3 interleaved rounds to fit the device budget
run bench_quadrotor_sim "$PY" benchmarks/bench_quadrotor_sim.py --device cuda --sizes 4096,16384,65536,262144 --threads 1 --rounds 3
# PPO end-to-end against rsl_rl and SB3 at 1024 and 4096 envs, and ManiSkill physx_cuda stepping: only once
# their scripts take a device (they are CPU-only today: running them here would measure the CPU again)
for bench in benchmarks/bench_ppo.py benchmarks/bench_maniskill.py; do
    if has_device_flag "$bench"; then
        case "$bench" in
            *bench_ppo.py) for n in 1024 4096; do run "bench_ppo_$n" "$PY" "$bench" --device cuda --num-envs "$n" --rounds 3 --sb3-iters 4; done ;;
            *) run bench_maniskill "$PY" "$bench" --device cuda --num-envs 1024 --rounds 3 ;;
        esac
    else
        echo "$bench: skipped, it has no --device option (CPU only)" | tee -a "$OUT/summary.txt"
    fi
done

# the README's main job with everything on the GPU: success and seconds of training
run train_hover "$PY" -c "from embodied.cli import main; main()" train experiment=quadrotor_hover device=cuda
# the same with the update compiled and in bf16 (on 2 CPU cores 1.36x; on the GPU the eager update is launch-bound)
run train_hover_compiled_bf16 "$PY" -c "from embodied.cli import main; main()" train experiment=quadrotor_hover device=cuda \
    algo.compile=true algo.precision=bf16

echo "gpu_check: outputs in $OUT (summary.txt lists each step's exit status)"
exit "$FAILED"
