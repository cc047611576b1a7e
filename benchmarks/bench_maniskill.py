"""Our ManiSkill3 adapter vs raw ManiSkill stepping of the same env (CPU backend here; GPU-parallel on CUDA).

    python benchmarks/bench_maniskill.py [--env-id PushCube-v1] [--obs-modes state,rgb] [--rounds 7] [--steps 200]
    python benchmarks/bench_maniskill.py --device cuda --num-envs 1024   # physx_cuda: 1024 scenes in one env

Raw = `env.step(action)` on ManiSkill's own gym env, resetting it when an episode
ends (what ManiSkillVectorEnv does); ours = `ManiSkillEnv.step` on the very same
ManiSkill env object (the adapter's `maniskill_envs[0]`), which adds the
TensorDict mapping, the language field, truncation vs termination and
`final_obs`. Rounds alternate raw/ours so load from other processes hits both
alike; each round times `steps` steps with pre-drawn actions, in process CPU
time by default (the machines are shared; `--clock wall` for wall time). Reported: steps/s
medians, the per-round ratio ours/raw (median and min-max), the end-to-end
overhead (1 - median ratio), and the adapter's own CPU time per step measured
alone (ManiSkill's step replaced by a replay of a real step's outputs) as a
share of a raw step. Goal: overhead <= 5%.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from sims.maniskill import ManiSkillEnv  # noqa: E402


# CPU time of this process (all its threads): on a shared machine wall time mostly
# measures the other tenants; --clock wall reports wall time instead
CLOCK = time.process_time


def sync(device: str) -> None:
    """Wait for queued CUDA work, so a timer read after it counts it (a no-op on the CPU)."""
    if device == "cuda":
        torch.cuda.synchronize()


def raw_round(ms_env, actions: list[torch.Tensor], device: str) -> float:
    """Env steps/s of ManiSkill's own env; ended scenes reset as ManiSkillVectorEnv resets them."""
    sync(device)
    start = CLOCK()
    for action in actions:
        _, _, terminated, truncated, _ = ms_env.step(action)
        done = (terminated | truncated).reshape(-1)
        if bool(done.any()):  # one scene: a plain reset; several: only the ended ones
            ms_env.reset(options=None if done.numel() == 1 else {"env_idx": done.nonzero().squeeze(-1)})
    sync(device)
    return len(actions) * actions[0].shape[0] / (CLOCK() - start)


def ours_round(env: ManiSkillEnv, actions: list[torch.Tensor], device: str) -> float:
    sync(device)
    start = CLOCK()
    for action in actions:
        env.step(action)
    sync(device)
    return len(actions) * actions[0].shape[0] / (CLOCK() - start)


def adapter_cost_us(env: ManiSkillEnv, action: torch.Tensor, steps: int = 20000) -> float:
    """CPU microseconds per step spent in the adapter alone: ManiSkill's step is replaced by
    one returning a real step's outputs (nothing ends), so only our mapping is timed."""
    real = env.maniskill_envs
    out = real[0].step(action)

    class Replay:
        unwrapped = real[0].unwrapped

        def step(self, _action):
            return out

    env.maniskill_envs = [Replay()]
    try:
        start = time.process_time()
        for _ in range(steps):
            env.step(action)
        return (time.process_time() - start) / steps * 1e6
    finally:
        env.maniskill_envs = real


def bench(env_id: str, obs_mode: str, rounds: int, steps: int, device: str = "cpu", num_envs: int = 1) -> dict:
    env = ManiSkillEnv(ManiSkillEnv.Config(env_id=env_id, obs_mode=obs_mode, image_size=128), num_envs=num_envs,
                       device=device)
    ms_env = env.maniskill_envs[0]
    gen = torch.Generator().manual_seed(0)
    actions = [(torch.rand(num_envs, *env.action_spec.shape, generator=gen) * 2 - 1).to(device) for _ in range(steps)]
    env.reset(seed=0)
    raw_round(ms_env, actions[:20], device)  # warm-up both paths
    ours_round(env, actions[:20], device)
    raw, ours = [], []
    for _ in range(rounds):
        env.reset(seed=0)
        raw.append(raw_round(ms_env, actions, device))
        env.reset(seed=0)
        ours.append(ours_round(env, actions, device))
    env.reset(seed=0)
    cost = adapter_cost_us(env, actions[0], 20000 if obs_mode == "state" else 2000)
    env.close()
    ratios = [o / r for o, r in zip(ours, raw)]
    return {"raw": raw, "ours": ours, "ratios": ratios, "cost_us": cost}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env-id", default="PushCube-v1")
    parser.add_argument("--obs-modes", default="state,rgb")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=200, help="steps per round (rgb rounds use a quarter)")
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu",
                        help="process CPU time or wall time (always wall time on CUDA)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="cuda: ManiSkill's physx_cuda backend, all --num-envs scenes in one GPU-parallel env")
    parser.add_argument("--num-envs", type=int, default=1, help="parallel scenes (more than 1 needs --device cuda)")
    args = parser.parse_args()
    if args.num_envs > 1 and args.device != "cuda":
        parser.error("--num-envs > 1 needs --device cuda (on the CPU the adapter steps one ManiSkill env per scene)")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch.cuda.is_available() is False on this machine")
    clock = "wall" if args.device == "cuda" else args.clock  # GPU work runs outside this process's CPU time
    global CLOCK
    CLOCK = time.process_time if clock == "cpu" else time.perf_counter
    torch.set_num_threads(1)
    print(f"clock: {clock}, torch threads: 1, device: {args.device}, scenes: {args.num_envs}")
    print("| task | obs | raw ManiSkill env-steps/s (median) | ours env-steps/s (median) "
          "| ours/raw per round: median (min - max) "
          "| overhead (end to end) | adapter alone, us per (batched) step (% of a raw step) |")
    print("|---|---|---|---|---|---|---|")
    for mode in args.obs_modes.split(","):
        steps = args.steps if mode == "state" else max(20, args.steps // 4)
        r = bench(args.env_id, mode, args.rounds, steps, args.device, args.num_envs)
        med = statistics.median(r["ratios"])
        print(f"| {args.env_id} | {mode} | {statistics.median(r['raw']):,.0f} | {statistics.median(r['ours']):,.0f} "
              f"| {med:.3f} ({min(r['ratios']):.3f} - {max(r['ratios']):.3f}) | {100 * (1 - med):+.1f}% "
              f"| {r['cost_us']:.0f} ({r['cost_us'] * statistics.median(r['raw']) / args.num_envs / 1e4:.1f}%) |", flush=True)


if __name__ == "__main__":
    main()
