"""The machine's attainable matrix-multiply rate, at the PPO minibatch shapes and at one large shape (issue 21).

    .venv/bin/python benchmarks/bench_gemm.py                       # CPU, 1 and 2 threads, fp32
    python benchmarks/bench_gemm.py --device cuda                   # fp32, tf32 and bf16 on the GPU

The PPO shapes are the layers of the default MLP policy on quadrotor_hover (obs 22, privileged 9,
hidden 64x64, 4 actions) at the experiment's minibatch (1024 envs x 16 steps / 8 = 2048 rows) and
at bench_ppo's (4096 x 16 / 4 = 16384 rows): the forward product x @ W.T of each layer. The large
shape (2048^3 on the CPU, 8192^3 on CUDA) is the peak a PPO update could hope for. Each case is the
median of --repeats timed calls after warm-up; GFLOP/s = 2 m k n / seconds. bench_ppo.py prints the
model FLOP/s a PPO iteration achieves, to be divided by these numbers.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

LAYERS = [(22 + 9, 64), (64, 64), (64, 4)]  # (in, out): critic input state+privileged; the actor's 22 is near it


def cases(device: str) -> list[tuple[str, int, int, int]]:
    """(label, m, k, n) for x[m, k] @ W.T[k, n]."""
    rows = [(f"ppo mb {m} x {k}->{n}", m, k, n) for m in (2048, 16384) for k, n in LAYERS]
    big = 8192 if device == "cuda" else 2048
    return rows + [(f"large {big}^3", big, big, big)]


def time_matmul(m: int, k: int, n: int, device: str, dtype: torch.dtype, repeats: int) -> float:
    """Median seconds of one x @ w.T, with enough calls per sample to be well above the timer's grain."""
    x = torch.randn(m, k, device=device, dtype=dtype)
    w = torch.randn(n, k, device=device, dtype=dtype)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    calls = max(1, int(2e8 // (2 * m * k * n)))  # ~0.2 GFLOP per sample: microseconds of GEMM are too short alone
    for _ in range(3):
        x @ w.T
    samples = []
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        for _ in range(calls):
            x @ w.T
        sync()
        samples.append((time.perf_counter() - start) / calls)
    return statistics.median(samples)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--threads", default="1,2", help="comma list of torch.set_num_threads values (CPU)")
    p.add_argument("--repeats", type=int, default=7)
    args = p.parse_args(argv)
    if args.device == "cuda":
        configs = [("fp32", torch.float32, False), ("tf32", torch.float32, True), ("bf16", torch.bfloat16, False)]
        threads = [torch.get_num_threads()]
        where = torch.cuda.get_device_name(0)
    else:
        configs = [("fp32", torch.float32, False)]
        threads = [int(t) for t in args.threads.split(",")]
        where = "cpu"
    print(f"torch {torch.__version__}, {where}, date {time.strftime('%Y-%m-%d %H:%M')}", flush=True)
    header = ["shape"] + [f"{name} {t}t" if args.device == "cpu" else name for name, _, _ in configs for t in threads]
    print("| " + " | ".join(header) + " | (GFLOP/s) |\n|" + "---|" * (len(header) + 1))
    for label, m, k, n in cases(args.device):
        cells = []
        for _, dtype, tf32 in configs:
            torch.backends.cuda.matmul.allow_tf32 = tf32
            for t in threads:
                torch.set_num_threads(t)
                cells.append(f"{2 * m * k * n / time_matmul(m, k, n, args.device, dtype, args.repeats) / 1e9:,.1f}")
        print(f"| {label} | " + " | ".join(cells) + " | |", flush=True)


if __name__ == "__main__":
    main()
