#!/usr/bin/env bash
# The GPU checks of issue 21: every `gpu`-marked test and the GPU benchmarks, outputs under
# benchmarks/gpu_results/<UTC date and time>/ for benchmarks/RESULTS.md to cite.
#   bash scripts/gpu_check.sh            # ~10 min on one GPU
# Without CUDA it says what it skipped and exits 0.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python

if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    echo "gpu_check: no CUDA device here (torch.cuda.is_available() is False): skipped the gpu-marked tests" \
         "(pytest -m gpu), bench_quadrotor_sim.py --device cuda, bench_ppo.py and bench_maniskill.py. Nothing written."
    exit 0
fi

OUT=benchmarks/gpu_results/$(date -u +%Y-%m-%d_%H-%M)
mkdir -p "$OUT"
FAILED=0
run() {  # run NAME CMD...: stdout and stderr to $OUT/NAME.txt, the exit status to the summary
    echo "== $1: ${*:2}"
    "${@:2}" 2>&1 | tee "$OUT/$1.txt"
    local rc=${PIPESTATUS[0]}
    echo "$1 rc=$rc: ${*:2}" >> "$OUT/summary.txt"
    [ "$rc" -eq 0 ] || FAILED=1
}
has_device_flag() { "$PY" "$1" --help 2>/dev/null | grep -q -- "--device"; }

{ nvidia-smi; "$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0))"; git rev-parse HEAD; } > "$OUT/machine.txt" 2>&1

run pytest_gpu "$PY" -m pytest -m gpu -v -rs
# the quadrotor sim at N = 4096-262144 (issue 21); 3 interleaved rounds to fit the device budget
run bench_quadrotor_sim "$PY" benchmarks/bench_quadrotor_sim.py --device cuda --sizes 4096,16384,65536,262144 --threads 1 --rounds 3
# PPO end-to-end against rsl_rl and SB3 at 1024 and 4096 envs, and ManiSkill physx_cuda stepping: only once
# their scripts take a device (they are CPU-only today: running them here would measure the CPU again)
for bench in benchmarks/bench_ppo.py benchmarks/bench_maniskill.py; do
    if has_device_flag "$bench"; then
        case "$bench" in
            *bench_ppo.py) for n in 1024 4096; do run "bench_ppo_$n" "$PY" "$bench" --device cuda --num-envs "$n" --rounds 3; done ;;
            *) run bench_maniskill "$PY" "$bench" --device cuda ;;
        esac
    else
        echo "$bench: skipped, it has no --device option (CPU only)" | tee -a "$OUT/summary.txt"
    fi
done

echo "gpu_check: outputs in $OUT (summary.txt lists each step's exit status)"
exit "$FAILED"
