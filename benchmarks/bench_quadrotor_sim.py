"""Quadrotor hover env: ours (sims.quadrotor, both auto-reset modes) vs the plain
eager reference (reference_quadrotor.py), eager torch on CPU (or --device).

    python benchmarks/bench_quadrotor_sim.py [--sizes 1,4096,65536] [--rounds 5] [--threads 1,2]

Rounds are interleaved (ours-indexed, ours-masked, reference, waypoint, ours-indexed, ...)
so that load from other processes hits every implementation alike; each round
times `steps` calls of env.step with pre-generated actions (auto-resets
included). Before timing, ours and the reference are stepped from the same
state with the same actions and must agree (allclose). --write-results puts the
table into benchmarks/RESULTS.md under "## Quadrotor simulator".
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.reference_quadrotor import ReferenceHoverEnv  # noqa: E402
from sims.quadrotor import HoverConfig, QuadrotorHoverEnv, QuadrotorWaypointEnv, WaypointConfig  # noqa: E402

SECTION = "## Quadrotor simulator"


def check_same_trajectory(device: str, num_envs: int = 256, steps: int = 100) -> float:
    """Step ours and the reference from one state with the same actions; return the max |difference|."""
    config = HoverConfig()
    ours, ref = QuadrotorHoverEnv(config, num_envs, device), ReferenceHoverEnv(config, num_envs, device)
    ours.reset(seed=0)
    ref.load_state(ours.get_state())
    gen = torch.Generator(device=device).manual_seed(1)
    worst = 0.0
    for _ in range(steps):
        action = (0.3 * torch.randn(num_envs, 4, generator=gen, device=device)).clamp(-1, 1)
        out_ours, out_ref = ours.step(action), ref.step(action)
        done = out_ours[2] | out_ours[3]
        assert torch.equal(done, out_ref[2] | out_ref[3]), "terminated/truncated differ"
        assert torch.equal(out_ours[4]["success"], out_ref[4]["success"]), "success differs"
        for key in ("state", "privileged"):  # the final observation: before any reset
            a, b = out_ours[4]["final_obs"][key], out_ref[4]["final_obs"][key]
            torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-3)
            worst = max(worst, (a - b).abs().max().item())
        torch.testing.assert_close(out_ours[1], out_ref[1], rtol=1e-3, atol=1e-3)
        if done.any():  # resets draw different random numbers: resynchronise
            ref.load_state(ours.get_state())
    return worst


def time_round(env, actions: list[torch.Tensor], steps: int, device: str) -> float:
    """Seconds for `steps` env.step calls."""
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    sync()
    start = time.perf_counter()
    for i in range(steps):
        env.step(actions[i % len(actions)])
    sync()
    return time.perf_counter() - start


def bench(sizes, rounds, steps_arg, threads, device, waypoint) -> list[dict]:
    rows = []
    for n_threads in threads:
        torch.set_num_threads(n_threads)
        for n in sizes:
            steps = steps_arg or (300 if n <= 64 else 60 if n <= 8192 else 10)
            config = HoverConfig()
            envs = {
                "ours (indexed reset)": QuadrotorHoverEnv(HoverConfig(reset_mode="indexed"), n, device),
                "ours (masked reset)": QuadrotorHoverEnv(HoverConfig(reset_mode="masked", cuda_graph=False), n, device),
                "reference": ReferenceHoverEnv(config, n, device),
            }
            if device.startswith("cuda"):  # the masked step replayed as one CUDA graph (env.cuda_graph, the default there)
                envs["ours (masked reset, CUDA graph)"] = QuadrotorHoverEnv(HoverConfig(reset_mode="masked"), n, device)
            if waypoint:  # the other task, for scale (the reference implements hover only)
                envs["ours, waypoint task (indexed reset)"] = QuadrotorWaypointEnv(WaypointConfig(reset_mode="indexed"), n, device)
            gen = torch.Generator(device=device).manual_seed(0)
            actions = [(0.3 * torch.randn(n, 4, generator=gen, device=device)).clamp(-1, 1) for _ in range(16)]
            rates = {name: [] for name in envs}
            for name, env in envs.items():  # warm-up
                time_round(env, actions, 3, device)
            for _ in range(rounds):
                for name, env in envs.items():
                    rates[name].append(n * steps / time_round(env, actions, steps, device))
            for name, r in rates.items():
                rows.append({"threads": n_threads, "N": n, "impl": name, "steps": steps, "median": statistics.median(r),
                             "min": min(r), "max": max(r), "ms_per_step": 1e3 * n / statistics.median(r)})  # fmt: skip
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| threads | N | implementation | env-steps/s median | min - max | ms/step | vs reference |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip
    ref = {(r["threads"], r["N"]): r["median"] for r in rows if r["impl"] == "reference"}
    for r in rows:
        ratio = "-" if "waypoint" in r["impl"] else f"{r['median'] / ref[(r['threads'], r['N'])]:.2f}x"
        lines.append(f"| {r['threads']} | {r['N']} | {r['impl']} | {r['median']:,.0f} | {r['min']:,.0f} - {r['max']:,.0f} "
                     f"| {r['ms_per_step']:.3f} | {ratio} |")  # fmt: skip
    return "\n".join(lines)


def write_results(text: str, path: str) -> None:
    """Replace (or append) this benchmark's section of RESULTS.md, keeping the others."""
    old = open(path).read() if os.path.exists(path) else "# Benchmark results\n"
    start = old.find(SECTION)
    if start < 0:
        new = old.rstrip("\n") + "\n\n" + text + "\n"
    else:
        nxt = old.find("\n## ", start + len(SECTION))
        new = old[:start] + text + ("\n" + old[nxt + 1 :] if nxt >= 0 else "\n")
    with open(path, "w") as f:
        f.write(new)


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1,4096,65536", help="comma-separated num_envs")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds per size")
    parser.add_argument("--steps", type=int, default=0, help="env steps per round (0: 300 / 60 / 10 by size)")
    parser.add_argument("--threads", default="1,2", help="comma-separated torch.set_num_threads values")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--no-waypoint", action="store_true", help="skip timing the waypoint task")
    parser.add_argument("--write-results", action="store_true", help="update benchmarks/RESULTS.md")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    threads = [int(t) for t in args.threads.split(",")]

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    worst = check_same_trajectory(args.device)
    print(f"same trajectory as the reference: 100 steps x 256 envs, max |obs difference| {worst:.2e}")
    rows = bench(sizes, args.rounds, args.steps, threads, args.device, not args.no_waypoint)
    result = table(rows)
    print(result)
    if args.write_results:
        command = "python " + " ".join(["benchmarks/bench_quadrotor_sim.py", *sys.argv[1:]])
        text = "\n".join([
            SECTION, "",
            f"- date: {datetime.date.today().isoformat()}",
            f"- machine: {os.cpu_count()}-core CPU ({cpu_name()}), shared with other jobs (load average {load:.1f} at "
            f"the start); device {args.device}",
            f"- torch {torch.__version__}, eager (no torch.compile); threads as in the table",
            f"- command: `{command}`",
            f"- check: same trajectory as the reference (100 steps x 256 envs, max |obs difference| {worst:.1e})",
            "- env: QuadrotorHoverEnv, default config (domain randomization on), actions 0.3 N(0, 1) clipped, "
            "auto-resets included; env-steps/s = N x steps / seconds over interleaved rounds",
            "- ours (indexed reset) is the CPU default (`reset_mode=auto`): it samples only the finished envs, "
            "which needs a host sync (`nonzero`), free on CPU; masked reset (the CUDA default) samples every env "
            "and selects with `torch.where`, sync-free",
            "", result,
        ])  # fmt: skip
        write_results(text, os.path.join(os.path.dirname(os.path.abspath(__file__)), "RESULTS.md"))


if __name__ == "__main__":
    main()
